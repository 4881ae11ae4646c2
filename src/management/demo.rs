//! Demo resources of one organization (used by `--demo`).

use rusqlite::Connection;

use crate::store::tenants;

/// Fills organization number `n` (0 or 1) of the demo world with management resources.
pub fn fill_organization(
    conn: &Connection,
    org: i64,
    default_site: i64,
    n: usize,
    now: i64,
) -> crate::store::Result<()> {
    let second = if n == 0 { "Branch Office" } else { "Warehouse" };
    let second_site = tenants::create_site(conn, org, second, false, now)?;
    crate::store::users::fill_people_and_networks(conn, org, default_site, second_site, n, now)?;
    crate::store::devices::fill_devices(conn, org, default_site, second_site, n, now)?;
    Ok(())
}
