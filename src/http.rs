//! Small HTTP helpers shared by both interfaces: the response body type, JSON responses, query
//! strings and percent-decoding.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Response, StatusCode};

/// The body type of every response.
pub type Body = Full<Bytes>;

/// A JSON response with the given status.
pub fn json_response(status: StatusCode, body: Vec<u8>) -> Response<Body> {
    let mut res = Response::new(Full::new(Bytes::from(body)));
    *res.status_mut() = status;
    res.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    res
}

/// Serialises `value` as a JSON response.
pub fn json<T: serde::Serialize + ?Sized>(status: StatusCode, value: &T) -> Response<Body> {
    match serde_json::to_vec(value) {
        Ok(body) => json_response(status, body),
        Err(e) => {
            log::error!("cannot serialise response: {e}");
            json_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                br#"{"code":"InternalError","message":"Internal error","statusCode":500}"#.to_vec(),
            )
        }
    }
}

/// 204 No Content, no body.
pub fn no_content() -> Response<Body> {
    let mut res = Response::new(Full::new(Bytes::new()));
    *res.status_mut() = StatusCode::NO_CONTENT;
    res
}

/// Decodes `%XX` escapes. `None` if an escape is malformed or the result is not UTF-8.
pub fn percent_decode(s: &str) -> Option<String> {
    percent_decode_impl(s, false)
}

/// Decodes a query-string component: `%XX` escapes and `+` as a space.
pub fn query_decode(s: &str) -> Option<String> {
    percent_decode_impl(s, true)
}

fn percent_decode_impl(s: &str, plus_is_space: bool) -> Option<String> {
    if !(s.contains('%') || plus_is_space && s.contains('+')) {
        return Some(s.to_string());
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hi = hex(*b.get(i + 1)?)?;
                let lo = hex(*b.get(i + 2)?)?;
                out.push(hi << 4 | lo);
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Percent-encodes a query value (everything but unreserved characters).
pub fn query_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &c in s.as_bytes() {
        if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~') {
            out.push(c as char);
        } else {
            out.push_str(&format!("%{c:02X}"));
        }
    }
    out
}

/// A parsed query string: decoded `(name, value)` pairs in order. Components that do not decode
/// are kept undecoded so that they fail later validation rather than vanish.
#[derive(Debug, Default, Clone)]
pub struct Query(Vec<(String, String)>);

impl Query {
    pub fn parse(query: Option<&str>) -> Query {
        let Some(q) = query else {
            return Query::default();
        };
        Query(
            q.split('&')
                .filter(|p| !p.is_empty())
                .map(|pair| {
                    let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                    (
                        query_decode(k).unwrap_or_else(|| k.to_string()),
                        query_decode(v).unwrap_or_else(|| v.to_string()),
                    )
                })
                .collect(),
        )
    }

    /// The first value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// True when the request's Content-Type is `application/json` (parameters allowed).
pub fn is_json_content_type(headers: &hyper::HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes() {
        assert_eq!(percent_decode("a%20b%2Fc").as_deref(), Some("a b/c"));
        assert_eq!(percent_decode("b%C3%BCcher").as_deref(), Some("bücher"));
        assert_eq!(percent_decode("a+b").as_deref(), Some("a+b"));
        assert_eq!(query_decode("a+b").as_deref(), Some("a b"));
        assert_eq!(percent_decode("%"), None);
        assert_eq!(percent_decode("%4"), None);
        assert_eq!(percent_decode("%zz"), None);
        assert_eq!(percent_decode("%FF"), None);
    }

    #[test]
    fn query_pairs() {
        let q = Query::parse(Some(
            "customerKey=k&where%5Bname%5D=www.example.com&x&page=2&page=3",
        ));
        assert_eq!(q.get("customerKey"), Some("k"));
        assert_eq!(q.get("where[name]"), Some("www.example.com"));
        assert_eq!(q.get("x"), Some(""));
        assert_eq!(q.get("page"), Some("2"));
        assert_eq!(q.get("nope"), None);
        assert_eq!(
            Query::parse(Some("where[name]=a.example")).get("where[name]"),
            Some("a.example")
        );
    }

    #[test]
    fn encodes() {
        assert_eq!(query_encode("a b/ü"), "a%20b%2F%C3%BC");
    }

    #[test]
    fn content_types() {
        let mut h = hyper::HeaderMap::new();
        assert!(!is_json_content_type(&h));
        for (v, ok) in [
            ("application/json", true),
            ("application/json; charset=utf-8", true),
            ("Application/JSON", true),
            ("text/plain", false),
            ("application/jsonx", false),
        ] {
            h.insert(CONTENT_TYPE, HeaderValue::from_static(v));
            assert_eq!(is_json_content_type(&h), ok, "{v}");
        }
    }
}
