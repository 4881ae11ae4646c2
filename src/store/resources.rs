//! Per-organization management resources: networks, roaming computers, internal networks,
//! virtual appliances, sites, users and roles.
