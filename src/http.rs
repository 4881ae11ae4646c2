//! Small HTTP helpers shared by both interfaces: the response body type, JSON responses, query
//! strings and percent-decoding.

use std::borrow::Cow;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Response, StatusCode, Uri};
use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

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

/// The bytes a query value keeps as they are: RFC 3986's unreserved characters.
const QUERY_VALUE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Decodes `%XX` escapes; an escape that is not one (`%zz`, a `%` at the end) is kept as sent,
/// as URL parsers do. `None` if the result is not UTF-8.
pub fn percent_decode(s: &str) -> Option<String> {
    decode(s, false).map(Cow::into_owned)
}

/// Decodes `s` (with `plus_is_space`, a query-string component: `+` is a space), borrowing it
/// when it holds nothing to decode. `None` as for `percent_decode`.
fn decode(s: &str, plus_is_space: bool) -> Option<Cow<'_, str>> {
    // Nearly every component (a customer key, a page number) holds neither: one scan of its
    // bytes, instead of the decoder's byte-by-byte iterator and a UTF-8 check of text that is
    // already a `str` (some 1,000 instructions of every event request's key look-up).
    if !s.bytes().any(|b| b == b'%' || (plus_is_space && b == b'+')) {
        return Some(Cow::Borrowed(s));
    }
    if plus_is_space && s.contains('+') {
        let spaced = s.replace('+', " ");
        return percent_decode_str(&spaced)
            .decode_utf8()
            .ok()
            .map(|d| Cow::Owned(d.into_owned()));
    }
    percent_decode_str(s).decode_utf8().ok()
}

/// Percent-encodes a query value (everything but unreserved characters).
pub fn query_encode(s: &str) -> String {
    // A customer key or a page number needs no escape: copied as it is, without the formatting
    // machinery `to_string` goes through.
    if s.bytes()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~'))
    {
        return s.to_string();
    }
    utf8_percent_encode(s, QUERY_VALUE).to_string()
}

/// A request's query string: `(name, value)` pairs in order, decoded as they are looked up (a
/// request reads one or two of them, and most hold nothing to decode: no copies). Components
/// that do not decode are taken undecoded, so that they fail later validation rather than vanish.
#[derive(Debug, Default, Clone)]
pub struct Query(Uri);

impl Query {
    /// The query of a request's target.
    pub fn new(uri: Uri) -> Query {
        Query(uri)
    }

    /// The first value of `name`.
    pub fn get(&self, name: &str) -> Option<Cow<'_, str>> {
        let mut rest = self.0.query();
        while let Some(q) = rest {
            let (pair, next) = cut(q, b'&');
            rest = next;
            if pair.is_empty() {
                continue;
            }
            let (k, v) = cut(pair, b'=');
            if component(k) == name {
                return Some(component(v.unwrap_or("")));
            }
        }
        None
    }
}

/// `s` up to the first `sep` and what follows it, if `sep` occurs. (A byte loop: for the short
/// strings of a request line it costs less than the general substring search.)
pub fn cut(s: &str, sep: u8) -> (&str, Option<&str>) {
    debug_assert!(sep.is_ascii());
    match s.bytes().position(|c| c == sep) {
        // An ASCII byte is always a character boundary.
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    }
}

/// A query component decoded, or as sent if it does not decode.
fn component(s: &str) -> Cow<'_, str> {
    decode(s, true).unwrap_or(Cow::Borrowed(s))
}

/// True when the request's Content-Type is `application/json` (parameters allowed).
pub fn is_json_content_type(headers: &hyper::HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            cut(v, b';')
                .0
                .trim()
                .eq_ignore_ascii_case("application/json")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes() {
        assert_eq!(percent_decode("a%20b%2Fc").as_deref(), Some("a b/c"));
        assert_eq!(percent_decode("b%C3%BCcher").as_deref(), Some("bücher"));
        assert_eq!(percent_decode("a+b").as_deref(), Some("a+b"));
        assert_eq!(decode("a+b", true).as_deref(), Some("a b"));
        assert_eq!(percent_decode("%").as_deref(), Some("%"));
        assert_eq!(percent_decode("%4").as_deref(), Some("%4"));
        assert_eq!(percent_decode("%zz%41").as_deref(), Some("%zzA"));
        assert_eq!(percent_decode("%FF"), None);
        assert!(matches!(
            decode("plain", true),
            Some(Cow::Borrowed("plain"))
        ));
    }

    fn query(q: &str) -> Query {
        Query::new(format!("/1.0/domains?{q}").parse().unwrap())
    }

    #[test]
    fn query_pairs() {
        let q = query("customerKey=k&where%5Bname%5D=www.example.com&x&&page=2&page=3&a+b=c+d");
        assert_eq!(q.get("customerKey").as_deref(), Some("k"));
        assert_eq!(q.get("where[name]").as_deref(), Some("www.example.com"));
        assert_eq!(q.get("x").as_deref(), Some(""));
        assert_eq!(q.get("page").as_deref(), Some("2"));
        assert_eq!(q.get("a b").as_deref(), Some("c d"));
        assert_eq!(q.get("nope"), None);
        assert_eq!(q.get(""), None);
        assert_eq!(
            query("where[name]=a.example").get("where[name]").as_deref(),
            Some("a.example")
        );
        // A component that does not decode is taken as sent.
        assert_eq!(query("page=%zz").get("page").as_deref(), Some("%zz"));
        assert_eq!(query("%zz=1").get("%zz").as_deref(), Some("1"));
        assert_eq!(Query::default().get("page"), None);
        assert_eq!(
            Query::new("/1.0/domains".parse().unwrap()).get("page"),
            None
        );
    }

    #[test]
    fn cuts() {
        assert_eq!(cut("a=b=c", b'='), ("a", Some("b=c")));
        assert_eq!(cut("a=", b'='), ("a", Some("")));
        assert_eq!(cut("=b", b'='), ("", Some("b")));
        assert_eq!(cut("ab", b'='), ("ab", None));
        assert_eq!(cut("", b'='), ("", None));
        assert_eq!(cut("\u{e9}&\u{fc}", b'&'), ("\u{e9}", Some("\u{fc}")));
    }

    #[test]
    fn encodes() {
        assert_eq!(query_encode("a b/ü"), "a%20b%2F%C3%BC");
        assert_eq!(query_encode("A-z.0_9~+&="), "A-z.0_9~%2B%26%3D");
        assert_eq!(query_encode("Key-0.9_a~Z"), "Key-0.9_a~Z");
        assert_eq!(query_encode(""), "");
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
