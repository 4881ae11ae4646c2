//! What every management handler shares: scope checks, paging, request bodies and field-by-field
//! input validation that names the offending field, and 200 responses.

use bytes::Bytes;
use hyper::{Response, StatusCode};
use serde_json::{Map, Value};

use crate::error::MgmtError;
use crate::http::{is_json_content_type, json, Body};
use crate::state::RequestCtx;

/// Default page size of management lists.
pub const DEFAULT_LIMIT: i64 = 100;
/// Largest page size of management lists.
pub const MAX_LIMIT: i64 = 200;

/// A `200 OK` JSON response.
pub fn ok<T: serde::Serialize + ?Sized>(value: &T) -> Response<Body> {
    json(StatusCode::OK, value)
}

/// `LIMIT` and `OFFSET` of a list request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Paging {
    pub limit: i64,
    pub offset: i64,
}

/// Parses `page` (default 1, 0 taken as 1) and `limit` (default 100, 1..=200).
pub fn paging(ctx: &RequestCtx) -> Result<Paging, MgmtError> {
    let int = |name: &str| -> Result<Option<i64>, MgmtError> {
        match ctx.query.get(name) {
            None => Ok(None),
            Some(v) => v
                .parse::<i64>()
                .map(Some)
                .map_err(|_| MgmtError::BadRequest(format!("{name} must be an integer"))),
        }
    };
    let page = match int("page")? {
        None | Some(0) => 1,
        Some(p) if p > 0 => p,
        Some(_) => {
            return Err(MgmtError::BadRequest(
                "page must be greater than or equal to 0".into(),
            ))
        }
    };
    let limit = match int("limit")? {
        None => DEFAULT_LIMIT,
        Some(l) if (1..=MAX_LIMIT).contains(&l) => l,
        Some(_) => {
            return Err(MgmtError::BadRequest(format!(
                "limit must be between 1 and {MAX_LIMIT}"
            )))
        }
    };
    // Pages far beyond any list are simply empty; saturate instead of overflowing.
    let offset = (page - 1).saturating_mul(limit);
    Ok(Paging { limit, offset })
}

/// 415 unless the request says it carries JSON.
pub fn require_json(ctx: &RequestCtx) -> Result<(), MgmtError> {
    if is_json_content_type(&ctx.headers) {
        Ok(())
    } else {
        Err(MgmtError::UnsupportedMediaType)
    }
}

/// Checks the Content-Type and parses the body as a JSON object. An object anywhere in the body
/// that holds a member twice is refused, naming the member by its path (`name is duplicated`,
/// `settings.domains is duplicated`): which of the two values was meant cannot be told.
pub fn object_body(ctx: &RequestCtx, body: &Bytes) -> Result<Map<String, Value>, MgmtError> {
    require_json(ctx)?;
    match crate::json::from_slice(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(MgmtError::BadRequest(
            "request body must be a JSON object".into(),
        )),
        Err(crate::json::Error::Duplicate(d)) => {
            Err(MgmtError::BadRequest(format!("{d} is duplicated")))
        }
        Err(crate::json::Error::Syntax(e)) => Err(MgmtError::BadRequest(format!(
            "request body is not valid JSON: {e}"
        ))),
    }
}

/// Field access on an input object. Every error names the field. JSON `null` counts as absent.
pub struct Input<'a>(pub &'a Map<String, Value>);

fn bad(field: &str, what: &str) -> MgmtError {
    MgmtError::BadRequest(format!("{field} {what}"))
}

impl Input<'_> {
    fn get(&self, field: &str) -> Option<&Value> {
        self.0.get(field).filter(|v| !v.is_null())
    }

    /// A required non-empty string (surrounding white space removed), at most 255 characters.
    pub fn req_str(&self, field: &str) -> Result<String, MgmtError> {
        self.opt_str(field)?
            .ok_or_else(|| bad(field, "is required"))
    }

    /// An optional string; an empty or blank one counts as absent.
    pub fn opt_str(&self, field: &str) -> Result<Option<String>, MgmtError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::String(s)) => {
                let t = s.trim();
                if t.chars().count() > 255 {
                    Err(bad(field, "must be at most 255 characters"))
                } else if t.chars().any(char::is_control) {
                    Err(bad(field, "must not contain control characters"))
                } else if t.is_empty() {
                    Ok(None)
                } else {
                    Ok(Some(t.to_string()))
                }
            }
            Some(_) => Err(bad(field, "must be a string")),
        }
    }

    /// A required integer (a JSON number without a fraction).
    pub fn req_int(&self, field: &str) -> Result<i64, MgmtError> {
        match self.get(field) {
            None => Err(bad(field, "is required")),
            Some(v) => v.as_i64().ok_or_else(|| bad(field, "must be an integer")),
        }
    }

    /// A required integer within `range`.
    pub fn req_int_in(
        &self,
        field: &str,
        range: std::ops::RangeInclusive<i64>,
    ) -> Result<i64, MgmtError> {
        let v = self.req_int(field)?;
        if range.contains(&v) {
            Ok(v)
        } else {
            Err(bad(
                field,
                &format!("must be between {} and {}", range.start(), range.end()),
            ))
        }
    }

    /// A required array of plausible e-mail addresses (at least one).
    pub fn req_emails(&self, field: &str) -> Result<Vec<String>, MgmtError> {
        let v = self.opt_emails(field)?;
        if self.get(field).is_none() {
            return Err(bad(field, "is required"));
        }
        if v.is_empty() {
            return Err(bad(field, "must hold at least one e-mail address"));
        }
        Ok(v)
    }

    /// An optional array of plausible e-mail addresses (absent: empty).
    pub fn opt_emails(&self, field: &str) -> Result<Vec<String>, MgmtError> {
        match self.get(field) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => {
                if items.len() > 100 {
                    return Err(bad(field, "must hold at most 100 addresses"));
                }
                items
                    .iter()
                    .map(|i| match i.as_str() {
                        Some(s) if is_email(s.trim()) => Ok(s.trim().to_string()),
                        _ => Err(bad(field, "must be an array of e-mail addresses")),
                    })
                    .collect()
            }
            Some(_) => Err(bad(field, "must be an array of e-mail addresses")),
        }
    }

    /// A required plausible e-mail address.
    pub fn req_email(&self, field: &str) -> Result<String, MgmtError> {
        let s = self.req_str(field)?;
        if is_email(&s) {
            Ok(s)
        } else {
            Err(bad(field, "must be an e-mail address"))
        }
    }

    /// A required IPv4 address in dotted-decimal form.
    pub fn req_ipv4(&self, field: &str) -> Result<String, MgmtError> {
        let s = self.req_str(field)?;
        match s.parse::<std::net::Ipv4Addr>() {
            Ok(ip) => Ok(ip.to_string()),
            Err(_) => Err(bad(field, "must be an IPv4 address")),
        }
    }
}

/// `x@y.z`: one `@`, a non-empty local part, a domain with a dot inside it, no white space.
pub fn is_email(s: &str) -> bool {
    let Some((local, domain)) = s.split_once('@') else {
        return false;
    };
    !local.is_empty()
        && !domain.contains('@')
        && !s.chars().any(|c| c.is_whitespace() || c.is_control())
        && s.len() <= 254
        && domain
            .split_once('.')
            .is_some_and(|(a, b)| !a.is_empty() && !b.is_empty() && !b.ends_with('.'))
}

/// 200 with the record, or 404 when there is none.
pub fn found<T: serde::Serialize>(rec: Option<T>) -> Result<Response<Body>, MgmtError> {
    rec.map(|r| ok(&r)).ok_or(MgmtError::NotFound)
}

impl Input<'_> {
    /// A required secret: a non-empty string of at most 1024 characters, kept exactly as sent
    /// (no trimming: spaces may be part of a password).
    pub fn req_secret(&self, field: &str) -> Result<String, MgmtError> {
        match self.get(field) {
            None => Err(bad(field, "is required")),
            Some(Value::String(s)) if s.is_empty() => Err(bad(field, "is required")),
            Some(Value::String(s)) if s.chars().count() > 1024 => {
                Err(bad(field, "must be at most 1024 characters"))
            }
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(bad(field, "must be a string")),
        }
    }
}

/// Optional inputs of other types (device registration by operators), each error naming the field.
impl Input<'_> {
    /// An optional boolean.
    pub fn opt_bool(&self, field: &str) -> Result<Option<bool>, MgmtError> {
        match self.get(field) {
            None => Ok(None),
            Some(v) => v
                .as_bool()
                .map(Some)
                .ok_or_else(|| bad(field, "must be a boolean")),
        }
    }

    /// An optional integer within `range`.
    pub fn opt_int_in(
        &self,
        field: &str,
        range: std::ops::RangeInclusive<i64>,
    ) -> Result<Option<i64>, MgmtError> {
        match self.get(field) {
            None => Ok(None),
            Some(_) => self.req_int_in(field, range).map(Some),
        }
    }

    /// An optional string that must be one of `allowed` (exact spelling).
    pub fn opt_one_of(&self, field: &str, allowed: &[&str]) -> Result<Option<String>, MgmtError> {
        match self.opt_str(field)? {
            Some(s) if !allowed.contains(&s.as_str()) => Err(bad(
                field,
                &format!("must be one of {}", allowed.join(", ")),
            )),
            other => Ok(other),
        }
    }

    /// An optional RFC 3339 date-time, as epoch seconds.
    pub fn opt_time(&self, field: &str) -> Result<Option<i64>, MgmtError> {
        match self.opt_str(field)? {
            None => Ok(None),
            Some(s) => crate::timefmt::parse_rfc3339(&s)
                .map(Some)
                .ok_or_else(|| bad(field, "must be an RFC 3339 date-time")),
        }
    }

    /// An optional IPv4 address in dotted-decimal form.
    pub fn opt_ipv4(&self, field: &str) -> Result<Option<String>, MgmtError> {
        match self.get(field) {
            None => Ok(None),
            Some(_) => self.req_ipv4(field).map(Some),
        }
    }

    /// An optional array of non-empty strings (absent: empty), at most 100 of them.
    pub fn opt_strings(&self, field: &str) -> Result<Vec<String>, MgmtError> {
        match self.get(field) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) if items.len() <= 100 => items
                .iter()
                .map(|i| match i.as_str().map(str::trim) {
                    Some(s) if !s.is_empty() && s.len() <= 255 && !s.contains(char::is_control) => {
                        Ok(s.to_string())
                    }
                    _ => Err(bad(field, "must be an array of strings")),
                })
                .collect(),
            Some(_) => Err(bad(field, "must be an array of at most 100 strings")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emails() {
        for ok in ["a@b.c", "first.last+tag@example.co.uk"] {
            assert!(is_email(ok), "{ok}");
        }
        for bad in ["", "a", "a@b", "@b.c", "a@.c", "a@b.", "a b@c.d", "a@b@c.d"] {
            assert!(!is_email(bad), "{bad}");
        }
    }

    #[test]
    fn inputs_name_the_field() {
        let v: Value =
            serde_json::json!({"s": " x ", "n": 5, "f": 1.5, "e": [], "z": null, "b": ""});
        let m = v.as_object().unwrap();
        let i = Input(m);
        assert_eq!(i.req_str("s").unwrap(), "x");
        assert_eq!(
            i.req_str("z"),
            Err(MgmtError::BadRequest("z is required".into()))
        );
        assert_eq!(
            i.req_str("b"),
            Err(MgmtError::BadRequest("b is required".into()))
        );
        assert_eq!(
            i.req_str("n"),
            Err(MgmtError::BadRequest("n must be a string".into()))
        );
        assert_eq!(i.req_int("n").unwrap(), 5);
        assert_eq!(
            i.req_int("f"),
            Err(MgmtError::BadRequest("f must be an integer".into()))
        );
        assert!(i.req_int_in("n", 6..=9).is_err());
        assert!(i.req_emails("e").is_err());
        assert_eq!(i.opt_emails("missing").unwrap(), Vec::<String>::new());
    }
}
