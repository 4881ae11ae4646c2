//! Roaming computers of an organization (`/v1/organizations/{id}/roamingcomputers`): list with
//! filters, read, rename, delete, addressed by `deviceId`. Operators register them with
//! `parasol roaming register`, validated here.

use bytes::Bytes;
use hyper::Response;
use serde_json::{Map, Value};

use super::common::{found, object_body, ok, paging, Input};
use crate::error::MgmtError;
use crate::http::Body;
use crate::router::ReadUpdateDelete;
use crate::state::{AppState, RequestCtx};
use crate::store::{NewRoamingComputer, RoamingFilter};

/// Observed values of a roaming computer's `status`.
pub const ROAMING_STATUSES: &[&str] = &[
    "Off",
    "Open",
    "Transparent",
    "Encrypted",
    "VA",
    "Network",
    "Disabled",
    "Uninstalled",
];
/// Observed values of a roaming computer's `type`.
pub const ROAMING_TYPES: &[&str] = &["roaming", "anyconnect"];

/// Handles the endpoints of this resource for organization `org` (already checked visible).
pub async fn handle(
    state: &AppState,
    ep: ReadUpdateDelete<String>,
    org: i64,
    ctx: &RequestCtx,
    body: Bytes,
) -> Result<Response<Body>, MgmtError> {
    use ReadUpdateDelete::*;
    let store = &state.store;
    match ep {
        List => {
            let p = paging(ctx)?;
            let f = filter(ctx)?;
            let list = store
                .list_roaming_computers(org, f, p.limit, p.offset)
                .await?;
            Ok(ok(&list))
        }
        Get(device) => found(store.get_roaming_computer(org, device).await?),
        Update(device) => {
            let name = Input(&object_body(ctx, &body)?).req_str("name")?;
            Ok(ok(&store
                .rename_roaming_computer(org, device, name)
                .await?))
        }
        Delete(device) => Ok(ok(&store.delete_roaming_computer(org, device).await?)),
    }
}

fn filter(ctx: &RequestCtx) -> Result<RoamingFilter, MgmtError> {
    let time = |name: &str, round_up: bool| -> Result<Option<i64>, MgmtError> {
        ctx.query
            .get(name)
            .map(|v| {
                query_time(&v, round_up).ok_or_else(|| {
                    MgmtError::BadRequest(format!("{name} must be an RFC 3339 date-time"))
                })
            })
            .transpose()
    };
    Ok(RoamingFilter {
        name: ctx.query.get("name").map(std::borrow::Cow::into_owned),
        status: ctx.query.get("status").map(std::borrow::Cow::into_owned),
        before: time("lastSyncBefore", true)?,
        after: time("lastSyncAfter", false)?,
    })
}

/// Parses a date-time from a query string as whole epoch seconds. `lastSync` is stored in whole
/// seconds, so `lastSync < t` for a `t` with a non-zero fraction is `lastSync < ceil(t)`
/// (`round_up`), and `lastSync > t` is `lastSync > floor(t)`. A `+` of an unencoded offset
/// arrives as a space (form decoding); RFC 3339 has no space, so it is read back as `+`. RFC 3339
/// (section 5.6) allows `t` and `z` in lower case; the only letters it has are those two, so
/// upper-casing the whole value accepts them and lets nothing else through.
fn query_time(v: &str, round_up: bool) -> Option<i64> {
    let v = v.replace(' ', "+").to_ascii_uppercase();
    let secs = crate::timefmt::parse_rfc3339(&v)?;
    let fraction = v
        .get(19..)
        .and_then(|rest| rest.strip_prefix('.'))
        .is_some_and(|f| f.chars().take_while(char::is_ascii_digit).any(|d| d != '0'));
    Some(if round_up && fraction {
        secs.saturating_add(1)
    } else {
        secs
    })
}

/// Validates a roaming computer's registration: `name` required; `deviceId` (hex, 8 to 64
/// digits, stored lower-case) required; `type` (roaming or anyconnect, default roaming) and
/// `status` (one of the observed values, default Off) optional; `lastSync` RFC 3339; the rest
/// optional as in the spec's table.
pub fn roaming_input(m: &Map<String, Value>) -> Result<NewRoamingComputer, MgmtError> {
    let i = Input(m);
    let name = i.req_str("name")?;
    let device_id = i.req_str("deviceId")?.to_ascii_lowercase();
    if !(8..=64).contains(&device_id.len()) || !device_id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(MgmtError::BadRequest(
            "deviceId must be 8 to 64 hexadecimal digits".into(),
        ));
    }
    Ok(NewRoamingComputer {
        device_id,
        name,
        kind: i
            .opt_one_of("type", ROAMING_TYPES)?
            .unwrap_or_else(|| "roaming".into()),
        status: i
            .opt_one_of("status", ROAMING_STATUSES)?
            .unwrap_or_else(|| "Off".into()),
        last_sync_status: i.opt_str("lastSyncStatus")?,
        last_sync: i.opt_time("lastSync")?,
        applied_bundle: i.opt_int_in("appliedBundle", 0..=i64::MAX)?,
        has_ip_blocking: i.opt_bool("hasIpBlocking")?.unwrap_or(false),
        version: i.opt_str("version")?,
        os_version: i.opt_str("osVersion")?,
        os_version_name: i.opt_str("osVersionName")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_times_round_for_strict_comparisons() {
        assert_eq!(
            query_time("2026-11-22T10:00:00Z", true),
            Some(1_795_341_600)
        );
        assert_eq!(
            query_time("2026-11-22T10:00:00.000Z", true),
            Some(1_795_341_600)
        );
        assert_eq!(
            query_time("2026-11-22T10:00:00.5Z", true),
            Some(1_795_341_601)
        );
        assert_eq!(
            query_time("2026-11-22T10:00:00.5Z", false),
            Some(1_795_341_600)
        );
        assert_eq!(
            query_time("2026-11-22T12:00:00 02:00", false),
            Some(1_795_341_600)
        );
        assert_eq!(query_time("yesterday", false), None);
        assert_eq!(query_time("", false), None);
    }

    #[test]
    fn registration_is_validated_naming_the_field() {
        let input = |v: Value| roaming_input(v.as_object().unwrap());
        let ok = input(serde_json::json!({"name": "pc", "deviceId": "0A0B0C0D0E0F1011"})).unwrap();
        assert_eq!(
            (ok.device_id.as_str(), ok.kind.as_str()),
            ("0a0b0c0d0e0f1011", "roaming")
        );
        for (v, field) in [
            (serde_json::json!({"deviceId": "0a0b0c0d"}), "name"),
            (
                serde_json::json!({"name": "pc", "deviceId": "xyz"}),
                "deviceId",
            ),
            (
                serde_json::json!({"name": "pc", "deviceId": "0a0b0c0d", "type": "x"}),
                "type",
            ),
            (
                serde_json::json!({"name": "pc", "deviceId": "0a0b0c0d", "status": "open"}),
                "status",
            ),
            (
                serde_json::json!({"name": "pc", "deviceId": "0a0b0c0d", "lastSync": "now"}),
                "lastSync",
            ),
        ] {
            match input(v) {
                Err(MgmtError::BadRequest(m)) => assert!(m.starts_with(field), "{m}"),
                other => panic!("{other:?}"),
            }
        }
    }
}
