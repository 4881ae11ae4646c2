//! One error type per interface, each mapping to a status and the interface's JSON body.
//! Internal failures map to 500 without detail; the detail goes to the log.

use std::borrow::Cow;

use hyper::header::{HeaderValue, ALLOW, CONNECTION, RETRY_AFTER, WWW_AUTHENTICATE};
use hyper::{Response, StatusCode};
use serde_json::{json, Map, Value};

use crate::http::{json, Body};
use crate::store::StoreError;

/// One problem of a refused body: a field of one element, named by the spelling the client sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The element's position in an array body; `None` for a body that is one event object.
    pub index: Option<u32>,
    /// The field as sent; empty when the element itself is wrong (not an object). A repeated
    /// member inside a field's value is named by its path (`vendorExtra.hits[2].name`).
    pub field: Cow<'static, str>,
    pub problem: &'static str,
}

/// Displays as the entry's key in the `errors` map: `dstDomain`, `[3].dstDomain` or `[3]`.
impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.index, &*self.field) {
            (Some(i), "") => write!(f, "[{i}]"),
            (Some(i), field) => write!(f, "[{i}].{field}"),
            (None, field) => f.write_str(field),
        }
    }
}

/// Errors of the enforcement interface (`/1.0/`), body
/// `{"code", "message", ["errors"], "statusCode"}`.
#[derive(Debug, Clone, PartialEq)]
pub enum EnfError {
    /// 400 with a message.
    BadRequest(String),
    /// 400 naming each bad field.
    Validation(Vec<FieldError>),
    /// 400: the request exceeds 1 MiB; the connection is closed after the answer.
    TooLarge,
    /// 403: missing, malformed, unknown or revoked customer key.
    InvalidCredentials,
    /// 404 with a message.
    NotFound(&'static str),
    /// 405 with the allowed methods.
    MethodNotAllowed(&'static str),
    /// 415: a body that is not `application/json`.
    UnsupportedMediaType,
    /// 429 with a Retry-After in seconds.
    TooManyRequests(u64),
    /// 429 with a Retry-After in seconds: the request would add more new domains than the key's
    /// budget holds now (`--cloud-limits`).
    TooManyNewDomains(u64),
    /// 503 with a Retry-After in seconds: the storage cannot take the request now (disk full, I/O
    /// error, writer restarting) or the server is over a budget; nothing of it was stored.
    Unavailable(u64),
    /// 503 with a Retry-After in seconds: the answer of the storage's commit was lost and its
    /// outcome could not be learnt in time (the database away for longer than a failover may
    /// take): the request may or may not have been stored.
    Unsettled(u64),
    /// 500; details are logged where they happen.
    Internal,
}

impl EnfError {
    pub fn status(&self) -> StatusCode {
        match self {
            EnfError::BadRequest(_) | EnfError::Validation(_) | EnfError::TooLarge => {
                StatusCode::BAD_REQUEST
            }
            EnfError::InvalidCredentials => StatusCode::FORBIDDEN,
            EnfError::NotFound(_) => StatusCode::NOT_FOUND,
            EnfError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            EnfError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            EnfError::TooManyRequests(_) | EnfError::TooManyNewDomains(_) => {
                StatusCode::TOO_MANY_REQUESTS
            }
            EnfError::Unavailable(_) | EnfError::Unsettled(_) => StatusCode::SERVICE_UNAVAILABLE,
            EnfError::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn code(&self) -> &'static str {
        match self {
            EnfError::BadRequest(_) | EnfError::Validation(_) | EnfError::TooLarge => {
                "BadRequestError"
            }
            EnfError::InvalidCredentials => "InvalidCredentials",
            EnfError::NotFound(_) => "NotFoundError",
            EnfError::MethodNotAllowed(_) => "MethodNotAllowed",
            EnfError::UnsupportedMediaType => "UnsupportedMediaType",
            EnfError::TooManyRequests(_) | EnfError::TooManyNewDomains(_) => "TooManyRequests",
            EnfError::Unavailable(_) | EnfError::Unsettled(_) => "ServiceUnavailableError",
            EnfError::Internal => "InternalError",
        }
    }

    pub fn message(&self) -> String {
        match self {
            EnfError::BadRequest(m) => m.clone(),
            EnfError::Validation(_) => "There were one or more missing or required fields".into(),
            EnfError::TooLarge => "Request too large".into(),
            // SECURITY: the same words whether the key is missing, malformed, unknown or revoked.
            EnfError::InvalidCredentials => "Invalid customer key".into(),
            EnfError::NotFound(m) => (*m).into(),
            EnfError::MethodNotAllowed(_) => "Method not allowed".into(),
            EnfError::UnsupportedMediaType => "Content-Type must be application/json".into(),
            EnfError::TooManyRequests(_) => "Too many requests".into(),
            EnfError::TooManyNewDomains(_) => {
                "Too many new domains: at most 200 a minute for a customer key".into()
            }
            EnfError::Unavailable(_) => UNAVAILABLE.into(),
            EnfError::Unsettled(_) => UNSETTLED.into(),
            EnfError::Internal => "Internal error".into(),
        }
    }

    /// The JSON body, members in the documented order. Serialised straight from the error (a
    /// refused batch can name up to `MAX_ERRORS` elements), without a `Value` tree in between.
    pub fn body(&self) -> EnfBody<'_> {
        EnfBody(self)
    }

    pub fn into_response(self) -> Response<Body> {
        let mut res = json(self.status(), &self.body());
        let h = res.headers_mut();
        match &self {
            EnfError::MethodNotAllowed(allow) => {
                h.insert(ALLOW, HeaderValue::from_static(allow));
            }
            EnfError::TooManyRequests(secs)
            | EnfError::TooManyNewDomains(secs)
            | EnfError::Unavailable(secs)
            | EnfError::Unsettled(secs) => {
                h.insert(RETRY_AFTER, HeaderValue::from(*secs));
            }
            EnfError::TooLarge => {
                h.insert(CONNECTION, HeaderValue::from_static("close"));
            }
            _ => {}
        }
        res
    }
}

/// The JSON body of an enforcement error: `{"code", "message", ["errors"], "statusCode"}`.
pub struct EnfBody<'e>(&'e EnfError);

impl serde::Serialize for EnfBody<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let e = self.0;
        let errors = match e {
            EnfError::Validation(errors) => Some(FieldErrors(errors)),
            _ => None,
        };
        let mut m = s.serialize_map(Some(3 + usize::from(errors.is_some())))?;
        m.serialize_entry("code", e.code())?;
        m.serialize_entry("message", &e.message())?;
        if let Some(errors) = errors {
            m.serialize_entry("errors", &errors)?;
        }
        m.serialize_entry("statusCode", &e.status().as_u16())?;
        m.end()
    }
}

/// The `errors` map: each problem under its key (`[3].dstDomain`), in order.
struct FieldErrors<'e>(&'e [FieldError]);

impl serde::Serialize for FieldErrors<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for e in self.0 {
            m.serialize_entry(&Key(e), e.problem)?;
        }
        m.end()
    }
}

/// A problem's key, written straight into the output.
struct Key<'e>(&'e FieldError);

impl serde::Serialize for Key<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self.0)
    }
}

/// Errors of the management interface (`/v1/`), body
/// `{"statusCode", "error", "message", "txId"}`; 401 has its own fixed body.
#[derive(Debug, Clone, PartialEq)]
pub enum MgmtError {
    /// 401: missing or wrong Basic credentials.
    Unauthorized,
    /// 400 naming the problem.
    BadRequest(String),
    /// 400: the request exceeds 1 MiB.
    TooLarge,
    /// 404: missing, or outside the credential's scope (the two are indistinguishable).
    NotFound,
    /// 405 with the allowed methods.
    MethodNotAllowed(&'static str),
    /// 409 naming the conflict.
    Conflict(String),
    /// 415.
    UnsupportedMediaType,
    /// 503 with a Retry-After in seconds (see `EnfError::Unavailable`).
    Unavailable(u64),
    /// 503 with a Retry-After in seconds: the outcome is unknown (see `EnfError::Unsettled`).
    Unsettled(u64),
    /// 500; details are logged where they happen.
    Internal,
}

impl MgmtError {
    pub fn status(&self) -> StatusCode {
        match self {
            MgmtError::Unauthorized => StatusCode::UNAUTHORIZED,
            MgmtError::BadRequest(_) | MgmtError::TooLarge => StatusCode::BAD_REQUEST,
            MgmtError::NotFound => StatusCode::NOT_FOUND,
            MgmtError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            MgmtError::Conflict(_) => StatusCode::CONFLICT,
            MgmtError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            MgmtError::Unavailable(_) | MgmtError::Unsettled(_) => StatusCode::SERVICE_UNAVAILABLE,
            MgmtError::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn message(&self) -> String {
        match self {
            MgmtError::Unauthorized => "Invalid authentication credentials".into(),
            MgmtError::BadRequest(m) | MgmtError::Conflict(m) => m.clone(),
            MgmtError::TooLarge => "Request too large".into(),
            MgmtError::NotFound => "Not found".into(),
            MgmtError::MethodNotAllowed(_) => "Method not allowed".into(),
            MgmtError::UnsupportedMediaType => "Content-Type must be application/json".into(),
            MgmtError::Unavailable(_) => UNAVAILABLE.into(),
            MgmtError::Unsettled(_) => UNSETTLED.into(),
            MgmtError::Internal => "Internal error".into(),
        }
    }

    /// The JSON body for a request with transaction id `tx_id`.
    pub fn body(&self, tx_id: &str) -> Value {
        if *self == MgmtError::Unauthorized {
            return json!({"message": self.message()});
        }
        let status = self.status();
        let mut m = Map::new();
        m.insert("statusCode".into(), json!(status.as_u16()));
        m.insert(
            "error".into(),
            json!(status.canonical_reason().unwrap_or("Error")),
        );
        m.insert("message".into(), json!(self.message()));
        m.insert("txId".into(), json!(tx_id));
        Value::Object(m)
    }

    pub fn into_response(self, tx_id: &str) -> Response<Body> {
        let mut res = json(self.status(), &self.body(tx_id));
        let h = res.headers_mut();
        match &self {
            MgmtError::Unauthorized => {
                h.insert(
                    WWW_AUTHENTICATE,
                    HeaderValue::from_static("Basic realm=\"parasol\""),
                );
            }
            MgmtError::MethodNotAllowed(allow) => {
                h.insert(ALLOW, HeaderValue::from_static(allow));
            }
            MgmtError::TooLarge => {
                h.insert(CONNECTION, HeaderValue::from_static("close"));
            }
            MgmtError::Unavailable(secs) | MgmtError::Unsettled(secs) => {
                h.insert(RETRY_AFTER, HeaderValue::from(*secs));
            }
            _ => {}
        }
        res
    }
}

/// The message of a 503: the same words on both interfaces.
const UNAVAILABLE: &str =
    "The service cannot store requests right now; nothing of this request was stored. Retry later";

/// The message of a 503 whose outcome is unknown: the same words on both interfaces.
const UNSETTLED: &str = "The database did not confirm whether this request was stored: its \
    outcome is unknown. Check whether it took effect before retrying it";

impl From<StoreError> for MgmtError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound => MgmtError::NotFound,
            StoreError::Conflict(m) => MgmtError::Conflict(m),
            StoreError::Invalid(m) => MgmtError::BadRequest(m),
            e => match e.retry_after() {
                Some(secs) if e.is_unsettled() => MgmtError::Unsettled(secs),
                // The storage fault itself is logged once by the store.
                Some(secs) => MgmtError::Unavailable(secs),
                None => {
                    log::error!("management request failed: {e}");
                    MgmtError::Internal
                }
            },
        }
    }
}

impl From<StoreError> for EnfError {
    fn from(e: StoreError) -> Self {
        match e.retry_after() {
            Some(secs) if e.is_unsettled() => EnfError::Unsettled(secs),
            Some(secs) => EnfError::Unavailable(secs),
            None => {
                log::error!("enforcement request failed: {e}");
                EnfError::Internal
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enforcement_mapping_is_pinned() {
        let cases: Vec<(EnfError, u16, &str)> = vec![
            (EnfError::BadRequest("x".into()), 400, "BadRequestError"),
            (EnfError::Validation(vec![]), 400, "BadRequestError"),
            (EnfError::TooLarge, 400, "BadRequestError"),
            (EnfError::InvalidCredentials, 403, "InvalidCredentials"),
            (EnfError::NotFound("x"), 404, "NotFoundError"),
            (EnfError::MethodNotAllowed("GET"), 405, "MethodNotAllowed"),
            (EnfError::UnsupportedMediaType, 415, "UnsupportedMediaType"),
            (EnfError::TooManyRequests(1), 429, "TooManyRequests"),
            (EnfError::Unavailable(5), 503, "ServiceUnavailableError"),
            (EnfError::Unsettled(5), 503, "ServiceUnavailableError"),
            (EnfError::Internal, 500, "InternalError"),
        ];
        for (e, status, code) in cases {
            let body = serde_json::to_value(e.body()).unwrap();
            assert_eq!(e.status().as_u16(), status);
            assert_eq!(body["code"], code);
            assert_eq!(body["statusCode"], status);
            let keys: Vec<&String> = body.as_object().unwrap().keys().collect();
            assert_eq!(keys.first().map(|s| s.as_str()), Some("code"));
            assert_eq!(keys.last().map(|s| s.as_str()), Some("statusCode"));
        }
        let v = EnfError::Validation(vec![
            FieldError {
                index: Some(3),
                field: "dstDomain".into(),
                problem: "is required",
            },
            FieldError {
                index: Some(4),
                field: "".into(),
                problem: "must be an object",
            },
        ]);
        assert_eq!(
            serde_json::to_string(&v.body()).unwrap(),
            r#"{"code":"BadRequestError","message":"There were one or more missing or required fields","errors":{"[3].dstDomain":"is required","[4]":"must be an object"},"statusCode":400}"#
        );
    }

    #[test]
    fn management_mapping_is_pinned() {
        assert_eq!(
            MgmtError::Unauthorized.body("t").to_string(),
            r#"{"message":"Invalid authentication credentials"}"#
        );
        let b = MgmtError::Conflict("dup".into()).body("tx1");
        assert_eq!(
            b.to_string(),
            r#"{"statusCode":409,"error":"Conflict","message":"dup","txId":"tx1"}"#
        );
        // decisions.md: `error` holds the status's reason phrase.
        for (e, s, reason) in [
            (MgmtError::BadRequest("x".into()), 400, "Bad Request"),
            (MgmtError::TooLarge, 400, "Bad Request"),
            (MgmtError::NotFound, 404, "Not Found"),
            (
                MgmtError::MethodNotAllowed("GET"),
                405,
                "Method Not Allowed",
            ),
            (
                MgmtError::UnsupportedMediaType,
                415,
                "Unsupported Media Type",
            ),
            (MgmtError::Unavailable(5), 503, "Service Unavailable"),
            (MgmtError::Unsettled(5), 503, "Service Unavailable"),
            (MgmtError::Internal, 500, "Internal Server Error"),
        ] {
            assert_eq!(e.status().as_u16(), s);
            let b = e.body("t");
            assert_eq!(b["statusCode"], s);
            assert_eq!(b["error"], reason, "{s}");
            assert_eq!(b["txId"], "t");
        }
    }
}
