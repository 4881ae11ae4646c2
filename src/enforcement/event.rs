//! The event validator: checks a POST /1.0/events body (one event object or an array of them)
//! against the spec and decisions.md, and prepares each event for storage.

use serde_json::{Map, Value};

use super::domain::{self, DomainError};

/// Entries of an `errors` map past which only each bad element's first problem is listed: every
/// bad element is still named (decisions.md), and a batch of thousands gets one entry each.
pub const DETAILED_ERRORS: usize = 1000;

/// Most entries in one `errors` map. A 1 MiB body holds more elements than this only if they
/// average under 105 bytes, far less than an event with its eight required fields (about 200), so
/// every bad element of a batch of events is named.
// SECURITY: a 1 MiB body of 524,000 one-byte elements would otherwise get a 16 MB answer.
pub const MAX_ERRORS: usize = 10_000;

/// An event that passed validation. The event itself is stored as sent: see [`events_text`].
#[derive(Debug, Clone, PartialEq)]
pub struct ValidEvent {
    /// Normalised `dstDomain`.
    pub domain: String,
    /// `disableDstSafeguards: true` was sent.
    pub disable_safeguards: bool,
}

/// The events of a body that passed validation, as the JSON array text to store: the body
/// itself when it is an array, or the one event object in brackets. Text as sent: unknown fields,
/// spacing and escapes included.
pub fn events_text(valid_body: &str) -> String {
    let text = valid_body.trim_matches(|c| matches!(c, ' ' | '\t' | '\n' | '\r'));
    if text.starts_with('[') {
        text.to_string()
    } else {
        let mut out = String::with_capacity(text.len() + 2);
        out.push('[');
        out.push_str(text);
        out.push(']');
        out
    }
}

/// Why a body was refused.
#[derive(Debug, Clone, PartialEq)]
pub enum EventsError {
    /// Not JSON, or JSON that is neither an object nor an array; the message says which.
    Malformed(String),
    /// One or more fields are missing or invalid, in order.
    Fields(Vec<FieldError>),
}

/// One problem of a refused body: a field of one element, named by the spelling the client sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldError {
    /// The element's position in an array body; `None` for a body that is one event object.
    pub index: Option<u32>,
    /// The field as sent; empty when the element itself is wrong (not an object).
    pub field: &'static str,
    pub problem: &'static str,
}

/// Displays as the entry's key in the `errors` map: `dstDomain`, `[3].dstDomain` or `[3]`.
impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.index, self.field) {
            (Some(i), "") => write!(f, "[{i}]"),
            (Some(i), field) => write!(f, "[{i}].{field}"),
            (None, field) => f.write_str(field),
        }
    }
}

/// A field's alternative spelling and the problem named when both are sent with different values.
type Alt = Option<(&'static str, &'static str)>;

/// Required string fields, with the alternative spelling if there is one.
const REQUIRED: &[(&str, Alt)] = &[
    ("deviceId", Some(("deviceID", "conflicts with deviceId"))),
    ("deviceVersion", None),
    ("eventTime", None),
    ("alertTime", None),
    ("dstDomain", None),
    ("dstUrl", Some(("dstURL", "conflicts with dstUrl"))),
    ("protocolVersion", None),
    ("providerName", None),
];

/// Optional string fields.
const OPTIONAL: &[(&str, Alt)] = &[
    ("dstIp", Some(("dstIP", "conflicts with dstIp"))),
    ("eventSeverity", None),
    ("eventType", None),
    ("eventDescription", None),
    ("eventHash", None),
    ("fileName", None),
    ("fileHash", None),
    (
        "externalUrl",
        Some(("externalURL", "conflicts with externalUrl")),
    ),
    ("src", None),
];

/// Validates a request body and gives its events with their text to store (`events_text`). All
/// or nothing: any bad element refuses the whole body.
pub fn validate_events(body: &[u8]) -> Result<(Vec<ValidEvent>, String), EventsError> {
    let text = std::str::from_utf8(body);
    let events = match text.ok().and_then(fast::validate) {
        Some(events) => events,
        None => validate_slow(body)?,
    };
    // A valid body is UTF-8 (it parsed as JSON): the lossy conversion never runs.
    let stored = match text {
        Ok(t) => events_text(t),
        Err(_) => events_text(&String::from_utf8_lossy(body)),
    };
    Ok((events, stored))
}

/// The general validator: the whole body as a JSON tree, every problem named.
fn validate_slow(body: &[u8]) -> Result<Vec<ValidEvent>, EventsError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| EventsError::Malformed(format!("Malformed JSON: {e}")))?;
    let mut errors = Vec::new();
    let events = match value {
        Value::Object(obj) => match validate_event(&obj, None, &mut errors) {
            Some(ev) if errors.is_empty() => vec![ev],
            _ => Vec::new(),
        },
        Value::Array(items) => {
            if items.is_empty() {
                return Err(EventsError::Malformed("no events".into()));
            }
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                // A 1 MiB body holds fewer than 2^32 elements.
                let index = Some(i as u32);
                match item {
                    Value::Object(obj) => {
                        if let Some(ev) = validate_event(obj, index, &mut errors) {
                            out.push(ev);
                        }
                    }
                    _ => ElementErrors::new(&mut errors, index).push("", "must be an object"),
                }
            }
            out
        }
        _ => {
            return Err(EventsError::Malformed(
                "The body must be an event object or an array of event objects".into(),
            ))
        }
    };
    if errors.is_empty() {
        Ok(events)
    } else {
        Err(EventsError::Fields(errors))
    }
}

/// The problems of one element, recorded into the body's list: all of them while the list is
/// short, only the element's first once it holds `DETAILED_ERRORS` entries, none past
/// `MAX_ERRORS`.
struct ElementErrors<'e> {
    errors: &'e mut Vec<FieldError>,
    index: Option<u32>,
    start: usize,
}

impl<'e> ElementErrors<'e> {
    fn new(errors: &'e mut Vec<FieldError>, index: Option<u32>) -> ElementErrors<'e> {
        let start = errors.len();
        ElementErrors {
            errors,
            index,
            start,
        }
    }

    fn push(&mut self, field: &'static str, problem: &'static str) {
        let n = self.errors.len();
        if n < DETAILED_ERRORS || (n == self.start && n < MAX_ERRORS) {
            self.errors.push(FieldError {
                index: self.index,
                field,
                problem,
            });
        }
    }

    fn any(&self) -> bool {
        self.errors.len() != self.start
    }
}

/// Looks a field up under either spelling. Returns the spelling used and the value; `null` is
/// absence. Both spellings with different values is an error naming the second one.
fn field<'a>(
    obj: &'a Map<String, Value>,
    name: &'static str,
    alt: Alt,
    errors: &mut ElementErrors,
) -> Option<(&'static str, &'a Value)> {
    let a = obj.get(name).filter(|v| !v.is_null());
    let b = alt.and_then(|(alt, conflict)| {
        obj.get(alt)
            .filter(|v| !v.is_null())
            .map(|v| (alt, conflict, v))
    });
    match (a, b) {
        (Some(a), Some((alt, conflict, b))) => {
            if a != b {
                errors.push(alt, conflict);
            }
            Some((name, a))
        }
        (Some(a), None) => Some((name, a)),
        (None, Some((alt, _, b))) => Some((alt, b)),
        (None, None) => None,
    }
}

fn validate_event(
    obj: &Map<String, Value>,
    index: Option<u32>,
    errors: &mut Vec<FieldError>,
) -> Option<ValidEvent> {
    let errors = &mut ElementErrors::new(errors, index);
    let mut domain_out = None;
    for &(name, alt) in REQUIRED {
        let Some((spelled, value)) = field(obj, name, alt, errors) else {
            errors.push(name, "is required");
            continue;
        };
        let Value::String(s) = value else {
            errors.push(spelled, "must be a string");
            continue;
        };
        let problem: Option<&'static str> = match name {
            "eventTime" | "alertTime" => crate::timefmt::parse_rfc3339(s)
                .is_none()
                .then_some("is invalid"),
            "dstDomain" => match domain::normalize(s) {
                Ok(d) => {
                    domain_out = Some(d);
                    None
                }
                Err(DomainError::TooLong) => Some("must be at most 255 characters"),
                Err(DomainError::Invalid) => Some("is invalid"),
            },
            "dstUrl" => (s.is_empty() || s.chars().any(char::is_control)).then_some("is invalid"),
            "protocolVersion" => (s != "1.0a").then_some("must be 1.0a"),
            "providerName" => (s != "Security Platform").then_some("must be Security Platform"),
            _ => s.is_empty().then_some("must not be empty"),
        };
        if let Some(p) = problem {
            errors.push(spelled, p);
        }
    }
    for &(name, alt) in OPTIONAL {
        if let Some((spelled, value)) = field(obj, name, alt, errors) {
            match value {
                Value::String(s) => {
                    if name == "dstIp" && s.parse::<std::net::Ipv4Addr>().is_err() {
                        errors.push(spelled, "is invalid");
                    }
                }
                _ => errors.push(spelled, "must be a string"),
            }
        }
    }
    let disable_safeguards = match obj.get("disableDstSafeguards") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            errors.push("disableDstSafeguards", "must be a boolean");
            false
        }
    };
    if errors.any() {
        return None;
    }
    Some(ValidEvent {
        domain: domain_out?,
        disable_safeguards,
    })
}

/// The fast path for what clients send nearly always: events whose fields all use the canonical
/// spelling and the right types and pass every check. Such a body is read in one pass straight
/// into typed fields (no JSON tree, no map and no copy of the text per event). Any doubt (an
/// alternative spelling, a wrong type, a failed check, anything unusual) answers `None` and the
/// general validator decides, with its error messages. Both accept exactly the same bodies.
mod fast {
    use std::borrow::Cow;

    use serde::Deserialize;
    use serde_json::value::RawValue;

    use super::ValidEvent;
    use crate::enforcement::domain;

    #[derive(Deserialize)]
    struct Event<'a> {
        #[serde(borrow, rename = "deviceId")]
        device_id: Cow<'a, str>,
        #[serde(borrow, rename = "deviceVersion")]
        device_version: Cow<'a, str>,
        #[serde(borrow, rename = "eventTime")]
        event_time: Cow<'a, str>,
        #[serde(borrow, rename = "alertTime")]
        alert_time: Cow<'a, str>,
        #[serde(borrow, rename = "dstDomain")]
        dst_domain: Cow<'a, str>,
        #[serde(borrow, rename = "dstUrl")]
        dst_url: Cow<'a, str>,
        #[serde(borrow, rename = "protocolVersion")]
        protocol_version: Cow<'a, str>,
        #[serde(borrow, rename = "providerName")]
        provider_name: Cow<'a, str>,
        #[serde(borrow, default, rename = "dstIp")]
        dst_ip: Option<Cow<'a, str>>,
        // The other optional fields need only be strings (or null).
        #[serde(borrow, default, rename = "eventSeverity")]
        _severity: Option<Cow<'a, str>>,
        #[serde(borrow, default, rename = "eventType")]
        _type: Option<Cow<'a, str>>,
        #[serde(borrow, default, rename = "eventDescription")]
        _description: Option<Cow<'a, str>>,
        #[serde(borrow, default, rename = "eventHash")]
        _hash: Option<Cow<'a, str>>,
        #[serde(borrow, default, rename = "fileName")]
        _file_name: Option<Cow<'a, str>>,
        #[serde(borrow, default, rename = "fileHash")]
        _file_hash: Option<Cow<'a, str>>,
        #[serde(borrow, default, rename = "externalUrl")]
        _external_url: Option<Cow<'a, str>>,
        #[serde(borrow, default, rename = "src")]
        _src: Option<Cow<'a, str>>,
        #[serde(default, rename = "disableDstSafeguards")]
        disable: Option<bool>,
        // Alternative spellings: their presence sends the body to the general validator.
        #[serde(borrow, default, rename = "deviceID")]
        alt1: Option<&'a RawValue>,
        #[serde(borrow, default, rename = "dstURL")]
        alt2: Option<&'a RawValue>,
        #[serde(borrow, default, rename = "dstIP")]
        alt3: Option<&'a RawValue>,
        #[serde(borrow, default, rename = "externalURL")]
        alt4: Option<&'a RawValue>,
    }

    fn check(e: Event) -> Option<ValidEvent> {
        let ok = e.alt1.is_none()
            && e.alt2.is_none()
            && e.alt3.is_none()
            && e.alt4.is_none()
            && !e.device_id.is_empty()
            && !e.device_version.is_empty()
            && crate::timefmt::parse_rfc3339(&e.event_time).is_some()
            && crate::timefmt::parse_rfc3339(&e.alert_time).is_some()
            && !e.dst_url.is_empty()
            && !e.dst_url.chars().any(char::is_control)
            && e.protocol_version == "1.0a"
            && e.provider_name == "Security Platform"
            && e.dst_ip
                .as_ref()
                .is_none_or(|ip| ip.parse::<std::net::Ipv4Addr>().is_ok());
        if !ok {
            return None;
        }
        Some(ValidEvent {
            domain: domain::normalize(&e.dst_domain).ok()?,
            disable_safeguards: e.disable.unwrap_or(false),
        })
    }

    /// An array of events, each checked as soon as it is read (so that a batch never exists as
    /// thousands of parsed `Event`s at once); the first declined one stops the parse.
    struct Checked(Vec<ValidEvent>);

    impl<'de> Deserialize<'de> for Checked {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Checked, D::Error> {
            struct Elements;
            impl<'de> serde::de::Visitor<'de> for Elements {
                type Value = Checked;

                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("an array of events")
                }

                fn visit_seq<A: serde::de::SeqAccess<'de>>(
                    self,
                    mut seq: A,
                ) -> Result<Checked, A::Error> {
                    let mut out = Vec::new();
                    while let Some(e) = seq.next_element::<Event<'de>>()? {
                        let valid = check(e)
                            .ok_or_else(|| serde::de::Error::custom("left to the general path"))?;
                        out.push(valid);
                    }
                    Ok(Checked(out))
                }
            }
            d.deserialize_seq(Elements)
        }
    }

    pub(super) fn validate(text: &str) -> Option<Vec<ValidEvent>> {
        match text.trim_start().as_bytes().first()? {
            b'[' => {
                let Checked(events) = serde_json::from_str(text).ok()?;
                (!events.is_empty()).then_some(events)
            }
            b'{' => Some(vec![check(serde_json::from_str(text).ok()?)?]),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// The events `validate_events` gives for a body.
    fn validate_body(body: &[u8]) -> Result<Vec<ValidEvent>, EventsError> {
        validate_events(body).map(|(events, _)| events)
    }

    fn good() -> Value {
        json!({
            "deviceId": "ba6a59f4-e692-4724-ba36-c28132c761de",
            "deviceVersion": "13.7a",
            "eventTime": "2026-11-22T10:00:00.0Z",
            "alertTime": "2026-11-22T10:00:01Z",
            "dstDomain": "Internetbadguys.com",
            "dstUrl": "http://internetbadguys.com/a?b=c",
            "protocolVersion": "1.0a",
            "providerName": "Security Platform"
        })
    }

    fn errors_of(v: &Value) -> Vec<(String, String)> {
        match validate_body(v.to_string().as_bytes()) {
            Err(EventsError::Fields(f)) => f
                .iter()
                .map(|e| (e.to_string(), e.problem.to_string()))
                .collect(),
            other => panic!("expected field errors, got {other:?}"),
        }
    }

    /// The fast path and the general validator agree on what they accept and what they make of
    /// it.
    #[test]
    fn fast_path_agrees_with_the_general_validator() {
        let mut cases = vec![good()];
        let mut v = good();
        v["vendorExtra"] = json!({"x": [1, 2]});
        v["dstIp"] = json!("192.0.2.1");
        v["disableDstSafeguards"] = json!(true);
        v["eventType"] = Value::Null;
        cases.push(v);
        for (field, bad) in [
            ("dstIp", json!("300.1.1.1")),
            ("eventType", json!(3)),
            ("src", json!(false)),
            ("eventSeverity", json!({"a": 1})),
            ("deviceID", json!("x")),
            ("dstDomain", json!("not a domain")),
            ("eventTime", json!("yesterday")),
            ("dstUrl", json!("a\u{1}b")),
            ("providerName", json!("Other")),
            ("disableDstSafeguards", json!("yes")),
            ("deviceId", Value::Null),
            ("deviceVersion", json!("")),
        ] {
            let mut v = good();
            v[field] = bad;
            cases.push(v);
        }
        for v in &cases {
            for body in [v.to_string(), json!([v, good()]).to_string()] {
                let fast = fast::validate(&body);
                let slow = validate_slow(body.as_bytes());
                match (&fast, &slow) {
                    (Some(f), Ok(s)) => {
                        assert_eq!(f.len(), s.len());
                        for (a, b) in f.iter().zip(s) {
                            assert_eq!(
                                (&a.domain, a.disable_safeguards),
                                (&b.domain, b.disable_safeguards)
                            );
                        }
                    }
                    (Some(_), Err(e)) => {
                        panic!("fast path accepted what is refused: {body}: {e:?}")
                    }
                    (None, _) => assert!(
                        slow.is_err() || v.get("deviceID").is_some() || v["eventType"].is_null(),
                        "fast path declined a plain good body: {body}"
                    ),
                }
            }
        }
    }

    #[test]
    fn accepts_a_good_event_and_keeps_unknown_fields() {
        let mut v = good();
        v["vendorExtra"] = json!({"x": 1});
        let out = validate_body(v.to_string().as_bytes()).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].domain, "internetbadguys.com");
        assert!(!out[0].disable_safeguards);
    }

    #[test]
    fn events_are_stored_as_sent_in_an_array() {
        let one = " {\"dstDomain\": \"a.example\", \"vendorExtra\": \"\\u00e9\"}\n";
        assert_eq!(
            events_text(one),
            "[{\"dstDomain\": \"a.example\", \"vendorExtra\": \"\\u00e9\"}]"
        );
        let many = "\r\n[ {\"a\": 1},\n{\"b\": [2]} ]\t";
        assert_eq!(events_text(many), "[ {\"a\": 1},\n{\"b\": [2]} ]");
        for text in [one, many] {
            let parsed: Value = serde_json::from_str(&events_text(text)).unwrap();
            assert!(parsed.is_array());
        }
    }

    #[test]
    fn every_required_field_is_required_and_null_counts_as_missing() {
        for (name, _) in REQUIRED {
            let mut v = good();
            v.as_object_mut().unwrap().remove(*name);
            assert_eq!(
                errors_of(&v),
                vec![(name.to_string(), "is required".to_string())]
            );
            let mut v = good();
            v[*name] = Value::Null;
            assert_eq!(
                errors_of(&v),
                vec![(name.to_string(), "is required".to_string())]
            );
        }
    }

    #[test]
    fn alternative_spellings() {
        let mut v = good();
        let o = v.as_object_mut().unwrap();
        o.remove("deviceId");
        o.remove("dstUrl");
        o.insert("deviceID".into(), json!("d"));
        o.insert("dstURL".into(), json!("http://x"));
        o.insert("dstIP".into(), json!("10.1.2.3"));
        o.insert("externalURL".into(), json!("https://info"));
        assert!(validate_body(v.to_string().as_bytes()).is_ok());
        // Same value twice is fine; different values are not.
        v["deviceId"] = json!("d");
        assert!(validate_body(v.to_string().as_bytes()).is_ok());
        v["deviceId"] = json!("e");
        assert_eq!(
            errors_of(&v),
            vec![("deviceID".into(), "conflicts with deviceId".into())]
        );
        // Errors name the spelling that was sent.
        let mut v = good();
        v.as_object_mut().unwrap().remove("dstUrl");
        v["dstURL"] = json!(5);
        assert_eq!(
            errors_of(&v),
            vec![("dstURL".into(), "must be a string".into())]
        );
    }

    #[test]
    fn types_and_values() {
        let cases = [
            ("deviceVersion", json!(13), "must be a string"),
            ("eventTime", json!("2026-11-22"), "is invalid"),
            ("alertTime", json!("yesterday"), "is invalid"),
            ("dstDomain", json!("http://x.example"), "is invalid"),
            ("dstDomain", json!("10.0.0.1"), "is invalid"),
            (
                "dstDomain",
                json!("a".repeat(256)),
                "must be at most 255 characters",
            ),
            ("dstUrl", json!(""), "is invalid"),
            ("protocolVersion", json!("1.0"), "must be 1.0a"),
            ("providerName", json!("Other"), "must be Security Platform"),
            ("dstIp", json!("1.2.3"), "is invalid"),
            ("dstIp", json!("::1"), "is invalid"),
            ("src", json!(false), "must be a string"),
            ("disableDstSafeguards", json!("true"), "must be a boolean"),
            ("deviceId", json!(""), "must not be empty"),
        ];
        for (name, value, msg) in cases {
            let mut v = good();
            v[name] = value;
            assert_eq!(
                errors_of(&v),
                vec![(name.to_string(), msg.to_string())],
                "{name}"
            );
        }
        let mut v = good();
        v["disableDstSafeguards"] = json!(true);
        v["eventSeverity"] = Value::Null;
        assert!(validate_body(v.to_string().as_bytes()).unwrap()[0].disable_safeguards);
    }

    #[test]
    fn arrays_are_all_or_nothing_and_name_the_element() {
        let mut bad = good();
        bad["dstDomain"] = json!("not a domain");
        let body = json!([good(), good(), good(), bad, 7]);
        assert_eq!(
            errors_of(&body),
            vec![
                ("[3].dstDomain".to_string(), "is invalid".to_string()),
                ("[4]".to_string(), "must be an object".to_string())
            ]
        );
        assert_eq!(
            validate_body(json!([good(), good()]).to_string().as_bytes())
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn malformed_bodies() {
        for body in [&b"[]"[..], b"", b"{", b"\"x\"", b"3", b"null", b"[1,]"] {
            assert!(
                matches!(validate_body(body), Err(EventsError::Malformed(_))),
                "{body:?}"
            );
        }
    }

    #[test]
    fn every_bad_element_is_listed_and_the_list_stays_bounded() {
        // 2001 empty objects: 8 problems each. The first 125 elements are listed with all of
        // them (1000 entries); every later element with its first.
        let body = format!("[{}{{}}]", "{},".repeat(2000));
        let errors = errors_of(&serde_json::from_str(&body).unwrap());
        assert_eq!(errors.len(), DETAILED_ERRORS + (2001 - DETAILED_ERRORS / 8));
        assert_eq!(errors[7], ("[0].providerName".into(), "is required".into()));
        assert_eq!(
            errors[DETAILED_ERRORS],
            ("[125].deviceId".into(), "is required".into())
        );
        let listed: std::collections::BTreeSet<&str> = errors
            .iter()
            .map(|(k, _)| k.split('.').next().unwrap())
            .collect();
        assert_eq!(listed.len(), 2001, "every element is named");
        // Elements that are not objects, past the budget too.
        let mut items = vec![json!({}); 200];
        items.push(json!(7));
        assert_eq!(
            errors_of(&Value::Array(items)).last(),
            Some(&("[200]".to_string(), "must be an object".to_string()))
        );
        // Bodies of tiny elements stop at MAX_ERRORS entries (and are still refused whole).
        for tiny in ["{}", "1"] {
            let body = format!("[{}{tiny}]", format!("{tiny},").repeat(MAX_ERRORS + 500));
            let errors = errors_of(&serde_json::from_str(&body).unwrap());
            assert_eq!(errors.len(), MAX_ERRORS, "{tiny}");
        }
    }

    proptest! {
        #[test]
        fn never_panics_on_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = validate_body(&bytes);
        }

        #[test]
        fn never_panics_on_json_shapes(
            domain in "\\PC{0,80}",
            time in "\\PC{0,40}",
            ip in "\\PC{0,20}",
            flag in proptest::option::of(any::<bool>()),
        ) {
            let mut v = good();
            v["dstDomain"] = json!(domain);
            v["eventTime"] = json!(time);
            v["dstIp"] = json!(ip);
            if let Some(f) = flag { v["disableDstSafeguards"] = json!(f); }
            let _ = validate_body(v.to_string().as_bytes());
            let _ = validate_body(json!([v.clone(), v]).to_string().as_bytes());
        }
    }
}
