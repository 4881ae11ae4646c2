//! Customers of service providers and MSPs (organizations with a parent): the management
//! records and their derived fields.
