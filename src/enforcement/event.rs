//! The event validator: checks a POST /1.0/events body (one event object or an array of them)
//! against the spec and decisions.md, and prepares each event for storage.

use std::borrow::Cow;

use serde_json::{Map, Value};

use super::domain::{self, DomainError};
pub use crate::error::FieldError;
use crate::json::Duplicate;

/// Entries of an `errors` map past which only each bad element's first problem is listed: every
/// bad element is still named (decisions.md), and a batch of thousands gets one entry each.
pub const DETAILED_ERRORS: usize = 1000;

/// Most entries in one `errors` map. A 1 MiB body holds more elements than this only if they
/// average under 105 bytes, far less than an event with its eight required fields (about 200), so
/// every bad element of a batch of events is named.
// SECURITY: a 1 MiB body of 524,000 one-byte elements would otherwise get a 16 MB answer.
pub const MAX_ERRORS: usize = 10_000;

/// What validating and storing a batch takes at most, as a multiple of the body's length: the
/// body itself, the copy stored as the batch's text, and the validator's working memory (the
/// events found, or the errors and the one element being looked at; see `validate_slow`). The
/// share of the memory budget a batch is charged before its body is read (`crate::budget`); a
/// test holds the validator to it.
pub const MEMORY_FACTOR: usize = 3;

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

/// The general validator: every problem named.
///
/// A JSON object anywhere in the body that holds the same member twice (compared as decoded) is
/// a problem of the element it belongs to, named by the member's path within the element:
/// `"dstDomain": "is duplicated"`, `"[3].vendorExtra.hits[0].name": "is duplicated"`, whether
/// the member is a field of the spec, an unknown extra field, or inside one. An element with a
/// repeated member is listed with those problems only (its fields would be judged on a value
/// the client did not choose); the other elements are judged as usual, so that a refused batch
/// still names every bad element. An element that is not an object is named as such only.
///
/// The body is read one element at a time, and of each only the fields of the spec are kept
/// (`json::for_each_element`): the working memory is the list of problems and one element's
/// fields, not a tree of the body (which for `[{},{},...]` was forty times the body's size).
fn validate_slow(body: &[u8]) -> Result<Vec<ValidEvent>, EventsError> {
    use crate::json::{Element, Top};
    let mut errors = Vec::new();
    let mut out = Vec::new();
    let mut each = |index: Option<usize>, element: Element, dups: Vec<Duplicate>| {
        // A 1 MiB body holds fewer than 2^32 elements.
        let index32 = index.map(|i| i as u32);
        // Past the body's top: the element's own position in an array body.
        let skip = usize::from(index.is_some());
        match element {
            Element::Object(_) if !dups.is_empty() => {
                name_duplicates(&mut ElementErrors::new(&mut errors, index32), &dups, skip);
            }
            Element::Object(obj) => {
                if let Some(ev) = validate_event(&obj, index32, &mut errors) {
                    // Kept only while the body may still be accepted whole.
                    if errors.is_empty() {
                        out.push(ev);
                    }
                }
            }
            Element::Other => {
                ElementErrors::new(&mut errors, index32).push("", "must be an object")
            }
        }
        if !errors.is_empty() && !out.is_empty() {
            out = Vec::new();
        }
    };
    let top = crate::json::for_each_element(body, MAX_ERRORS, &is_field, &mut each)
        .map_err(|e| EventsError::Malformed(format!("Malformed JSON: {e}")))?;
    match top {
        Top::Array(0) => return Err(EventsError::Malformed("no events".into())),
        Top::Other => {
            return Err(EventsError::Malformed(
                "The body must be an event object or an array of event objects".into(),
            ))
        }
        Top::Object | Top::Array(_) => {}
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(EventsError::Fields(errors))
    }
}

/// Whether `name` is a field the validator looks at (in any spelling).
fn is_field(name: &str) -> bool {
    name == "disableDstSafeguards"
        || REQUIRED
            .iter()
            .chain(OPTIONAL)
            .any(|&(field, alt)| field == name || alt.is_some_and(|(alt, _)| alt == name))
}

/// Records `"<path>": "is duplicated"` for the repeated members of one element, their paths
/// taken from step `skip` on (past the element's own position in an array body). Each name
/// once: two paths can read alike (a member named `a.b` beside an object `a` with a member `b`).
fn name_duplicates(errors: &mut ElementErrors, dups: &[Duplicate], skip: usize) {
    let mut named: Vec<String> = Vec::with_capacity(dups.len());
    for d in dups {
        let mut name = String::new();
        // Writing into a String cannot fail.
        let _ = crate::json::write_path(&mut name, d.path.get(skip..).unwrap_or_default());
        if !named.contains(&name) {
            named.push(name.clone());
            errors.push(name, "is duplicated");
        }
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

    fn push(&mut self, field: impl Into<Cow<'static, str>>, problem: &'static str) {
        let n = self.errors.len();
        if n < DETAILED_ERRORS || (n == self.start && n < MAX_ERRORS) {
            self.errors.push(FieldError {
                index: self.index,
                field: field.into(),
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
/// spelling and the right types and pass every check. Such a body is read in one pass by a small
/// scanner straight into borrowed fields (no JSON tree, no map, no copy of the text per event).
/// Any doubt (an alternative spelling, a wrong type, a failed check, an escape in a string, a
/// repeated member at any depth, more members in one object than it keeps track of, a number
/// with an exponent, deep nesting, anything unusual) answers `None` and the general validator
/// decides, with its error messages. Both accept exactly the same bodies.
mod fast {
    use super::ValidEvent;
    use crate::enforcement::domain;

    /// The fields the fast path reads, by slot: the eight required strings, then the optional
    /// strings, then the flag.
    const DEVICE_ID: usize = 0;
    const DEVICE_VERSION: usize = 1;
    const EVENT_TIME: usize = 2;
    const ALERT_TIME: usize = 3;
    const DST_DOMAIN: usize = 4;
    const DST_URL: usize = 5;
    const PROTOCOL_VERSION: usize = 6;
    const PROVIDER_NAME: usize = 7;
    const DST_IP: usize = REQUIRED_FIELDS;
    const REQUIRED_FIELDS: usize = super::REQUIRED.len();
    /// Optional string fields other than `dstIp` share one slot each for the repeat check.
    const OTHER_STRINGS: usize = DST_IP + 1;
    const DISABLE: usize = REQUIRED_FIELDS + super::OPTIONAL.len();
    /// Nesting of an unknown field's value beyond which the general validator decides.
    const MAX_DEPTH: u32 = 16;
    /// Members of one object (unknown fields of an event, or members of an object inside one)
    /// that the fast path compares for repeats, on the stack; an object with more is left to
    /// the general validator. Clients send a few extra fields at most.
    pub(super) const MAX_MEMBERS: usize = 16;

    /// The members of one object seen so far (up to `MAX_MEMBERS`), as byte ranges of the text
    /// (a table of zeros to start with, cheaper to set up than one of string slices).
    struct Members {
        keys: [(u32, u32); MAX_MEMBERS],
        n: usize,
    }

    impl Members {
        #[inline(always)]
        fn new() -> Members {
            Members {
                keys: [(0, 0); MAX_MEMBERS],
                n: 0,
            }
        }

        /// Records key `k` (a slice of `text`); `None` (the general validator decides) if it
        /// is one seen before or there is no room to tell. Keys here hold no escapes, so equal
        /// text is the same member.
        #[inline(always)]
        fn add(&mut self, text: &str, k: &str) -> Option<()> {
            if self.n == MAX_MEMBERS {
                return None;
            }
            for &(a, b) in &self.keys[..self.n] {
                if text.get(a as usize..b as usize) == Some(k) {
                    return None;
                }
            }
            // `k` lies inside `text` (a body of at most a few MiB: offsets fit in 32 bits).
            let start = k.as_ptr() as usize - text.as_ptr() as usize;
            self.keys[self.n] = (start as u32, (start + k.len()) as u32);
            self.n += 1;
            Some(())
        }
    }

    /// What a key means to the fast path.
    #[derive(Debug, PartialEq)]
    pub(super) enum Key {
        /// A string field (`null` allowed when optional), by slot.
        Str(usize),
        /// `disableDstSafeguards`: a boolean or `null`.
        Flag,
        /// An alternative spelling: the general validator handles both spellings.
        Alt,
        /// Anything else: any JSON value, kept as sent.
        Unknown,
    }

    pub(super) fn key(k: &str) -> Key {
        match k {
            "deviceId" => Key::Str(DEVICE_ID),
            "deviceVersion" => Key::Str(DEVICE_VERSION),
            "eventTime" => Key::Str(EVENT_TIME),
            "alertTime" => Key::Str(ALERT_TIME),
            "dstDomain" => Key::Str(DST_DOMAIN),
            "dstUrl" => Key::Str(DST_URL),
            "protocolVersion" => Key::Str(PROTOCOL_VERSION),
            "providerName" => Key::Str(PROVIDER_NAME),
            "dstIp" => Key::Str(DST_IP),
            "eventSeverity" => Key::Str(OTHER_STRINGS),
            "eventType" => Key::Str(OTHER_STRINGS + 1),
            "eventDescription" => Key::Str(OTHER_STRINGS + 2),
            "eventHash" => Key::Str(OTHER_STRINGS + 3),
            "fileName" => Key::Str(OTHER_STRINGS + 4),
            "fileHash" => Key::Str(OTHER_STRINGS + 5),
            "externalUrl" => Key::Str(OTHER_STRINGS + 6),
            "src" => Key::Str(OTHER_STRINGS + 7),
            "disableDstSafeguards" => Key::Flag,
            "deviceID" | "dstURL" | "dstIP" | "externalURL" => Key::Alt,
            _ => Key::Unknown,
        }
    }

    /// The length of the plain string text at the start of `b` (up to its closing quote), or
    /// `None` if an escape, a control character or the end of the input comes first. Eight bytes
    /// at a time: in each word, the flag of the first byte that is a quote, a backslash or below
    /// 0x20 is exact (a borrow only runs toward higher bytes).
    #[inline(always)]
    pub(super) fn plain_len(b: &[u8]) -> Option<usize> {
        const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
        const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
        let special = |x: u64| {
            let q = x ^ (ONES * u64::from(b'"'));
            let s = x ^ (ONES * u64::from(b'\\'));
            (q.wrapping_sub(ONES) & !q
                | s.wrapping_sub(ONES) & !s
                | x.wrapping_sub(ONES * 0x20) & !x)
                & HIGH
        };
        let mut i = 0;
        while let Some(word) = b.get(i..i + 8) {
            let m = special(u64::from_le_bytes(word.try_into().ok()?));
            if m != 0 {
                i += (m.trailing_zeros() / 8) as usize;
                return (b[i] == b'"').then_some(i);
            }
            i += 8;
        }
        let n = b[i..]
            .iter()
            .position(|&c| c == b'"' || c == b'\\' || c < 0x20)?;
        (b[i + n] == b'"').then_some(i + n)
    }

    struct Scanner<'a> {
        text: &'a str,
        i: usize,
    }

    impl<'a> Scanner<'a> {
        /// The next byte after JSON whitespace, not consumed.
        #[inline(always)]
        fn peek(&mut self) -> Option<u8> {
            let b = self.text.as_bytes();
            while let Some(&c) = b.get(self.i) {
                if !matches!(c, b' ' | b'\t' | b'\n' | b'\r') {
                    return Some(c);
                }
                self.i += 1;
            }
            None
        }

        /// Consumes `c` after whitespace.
        #[inline(always)]
        fn eat(&mut self, c: u8) -> Option<()> {
            if self.text.as_bytes().get(self.i) != Some(&c) && self.peek()? != c {
                return None;
            }
            self.i += 1;
            Some(())
        }

        /// A string without escapes, its quotes consumed.
        #[inline(always)]
        fn string(&mut self) -> Option<&'a str> {
            self.eat(b'"')?;
            let start = self.i;
            let n = plain_len(&self.text.as_bytes()[start..])?;
            self.i = start + n + 1;
            // Both ends are next to an ASCII quote: character boundaries.
            self.text.get(start..start + n)
        }

        /// `word` exactly (a literal's first letter already seen).
        fn literal(&mut self, word: &str) -> Option<()> {
            let end = self.i + word.len();
            (self.text.as_bytes().get(self.i..end)? == word.as_bytes()).then(|| self.i = end)
        }

        /// A string, or `null` as `None`.
        #[inline(always)]
        fn string_or_null(&mut self) -> Option<Option<&'a str>> {
            match self.peek()? {
                b'"' => self.string().map(Some),
                b'n' => self.literal("null").map(|()| None),
                _ => None,
            }
        }

        /// A number of the plain forms that every JSON reader takes: an integer of up to 18
        /// digits, optionally with up to 18 decimals (no exponent: `1e400` is out of range for
        /// the general validator's reader).
        fn number(&mut self) -> Option<()> {
            let b = self.text.as_bytes();
            if b.get(self.i) == Some(&b'-') {
                self.i += 1;
            }
            let digits = |i: &mut usize| {
                let start = *i;
                while b.get(*i).is_some_and(u8::is_ascii_digit) {
                    *i += 1;
                }
                *i - start
            };
            let first = *b.get(self.i)?;
            let n = digits(&mut self.i);
            if n == 0 || n > 18 || (first == b'0' && n > 1) {
                return None;
            }
            if b.get(self.i) == Some(&b'.') {
                self.i += 1;
                let n = digits(&mut self.i);
                if n == 0 || n > 18 {
                    return None;
                }
            }
            Some(())
        }

        /// Any JSON value, checked and passed over (an unknown field's).
        fn skip_value(&mut self, depth: u32) -> Option<()> {
            match self.peek()? {
                b'"' => self.string().map(drop),
                b't' => self.literal("true"),
                b'f' => self.literal("false"),
                b'n' => self.literal("null"),
                b'-' | b'0'..=b'9' => self.number(),
                open @ (b'[' | b'{') if depth < MAX_DEPTH => {
                    let close = if open == b'[' { b']' } else { b'}' };
                    self.i += 1;
                    if self.peek()? == close {
                        self.i += 1;
                        return Some(());
                    }
                    let mut members = Members::new();
                    loop {
                        if open == b'{' {
                            let k = self.string()?;
                            members.add(self.text, k)?;
                            self.eat(b':')?;
                        }
                        self.skip_value(depth + 1)?;
                        match self.peek()? {
                            b',' => self.i += 1,
                            c if c == close => {
                                self.i += 1;
                                return Some(());
                            }
                            _ => return None,
                        }
                    }
                }
                _ => None,
            }
        }

        /// An unknown field of an event: its key recorded (a repeat is the general validator's
        /// to name), its value passed over. Kept out of line: the common event has none, and
        /// the loop over its fields stays as small as before.
        #[cold]
        #[inline(never)]
        fn unknown_field(&mut self, seen: &mut Option<Members>, k: &'a str) -> Option<()> {
            seen.get_or_insert_with(Members::new).add(self.text, k)?;
            self.skip_value(0)
        }

        /// One event object, checked.
        fn event(&mut self) -> Option<ValidEvent> {
            self.eat(b'{')?;
            let mut fields: [Option<&'a str>; DISABLE] = [None; DISABLE];
            let mut seen = 0u32;
            // Made on the first unknown field: most events have none.
            let mut unknown: Option<Members> = None;
            let mut disable = false;
            loop {
                let k = self.string()?;
                self.eat(b':')?;
                match key(k) {
                    Key::Str(slot) => {
                        // A field sent twice is left to the general validator.
                        if seen & 1 << slot != 0 {
                            return None;
                        }
                        seen |= 1 << slot;
                        // `null` leaves a required field missing: refused, by the general path.
                        fields[slot] = self.string_or_null()?;
                    }
                    Key::Flag => {
                        if seen & 1 << DISABLE != 0 {
                            return None;
                        }
                        seen |= 1 << DISABLE;
                        disable = match self.peek()? {
                            b't' => self.literal("true").map(|()| true)?,
                            b'f' => self.literal("false").map(|()| false)?,
                            b'n' => self.literal("null").map(|()| false)?,
                            _ => return None,
                        };
                    }
                    Key::Alt => return None,
                    Key::Unknown => self.unknown_field(&mut unknown, k)?,
                }
                match self.peek()? {
                    b',' => self.i += 1,
                    b'}' => {
                        self.i += 1;
                        break;
                    }
                    _ => return None,
                }
            }
            // Every required field sent, and not as `null`.
            if fields[..REQUIRED_FIELDS].iter().any(Option::is_none) {
                return None;
            }
            check(&fields, disable)
        }
    }

    /// The checks of the general validator on a fully read event (all required fields present).
    fn check(f: &[Option<&str>], disable_safeguards: bool) -> Option<ValidEvent> {
        let s = |slot: usize| f[slot].unwrap_or_default();
        let url = s(DST_URL);
        let ok = !s(DEVICE_ID).is_empty()
            && !s(DEVICE_VERSION).is_empty()
            && crate::timefmt::parse_rfc3339(s(EVENT_TIME)).is_some()
            && crate::timefmt::parse_rfc3339(s(ALERT_TIME)).is_some()
            && !url.is_empty()
            && !url.chars().any(char::is_control)
            && s(PROTOCOL_VERSION) == "1.0a"
            && s(PROVIDER_NAME) == "Security Platform"
            && f[DST_IP].is_none_or(|ip| ip.parse::<std::net::Ipv4Addr>().is_ok());
        if !ok {
            return None;
        }
        Some(ValidEvent {
            domain: domain::normalize(s(DST_DOMAIN)).ok()?,
            disable_safeguards,
        })
    }

    pub(super) fn validate(text: &str) -> Option<Vec<ValidEvent>> {
        let mut s = Scanner { text, i: 0 };
        let events = match s.peek()? {
            b'[' => {
                s.i += 1;
                let mut out = Vec::new();
                loop {
                    out.push(s.event()?);
                    match s.peek()? {
                        b',' => s.i += 1,
                        b']' => {
                            s.i += 1;
                            break;
                        }
                        _ => return None,
                    }
                }
                out
            }
            b'{' => vec![s.event()?],
            _ => return None,
        };
        // Nothing but whitespace may follow.
        s.peek().is_none().then_some(events)
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

    /// Panics unless the fast path's answer agrees with the general validator's: whatever the
    /// fast path accepts, the general validator accepts with the same events. True if the fast
    /// path took the body itself.
    fn agree(body: &str) -> bool {
        let fast = fast::validate(body);
        let slow = validate_slow(body.as_bytes());
        match (&fast, &slow) {
            (Some(f), Ok(s)) => {
                assert_eq!(f, s, "{body}");
                true
            }
            (Some(_), Err(e)) => panic!("fast path accepted what is refused: {body}: {e:?}"),
            (None, _) => false,
        }
    }

    /// The fast path and the general validator agree on what they accept and what they make of
    /// it, and the fast path takes the plain good bodies itself.
    #[test]
    fn fast_path_agrees_with_the_general_validator() {
        let mut cases = vec![good()];
        let mut v = good();
        v["vendorExtra"] = json!({"x": [1, -2.5, true, false, null, {}, [], "\u{e9}"]});
        v["dstIp"] = json!("192.0.2.1");
        v["disableDstSafeguards"] = json!(true);
        v["eventType"] = Value::Null;
        cases.push(v);
        let mut v = good();
        v["disableDstSafeguards"] = Value::Null;
        v["fileName"] = json!("r\u{e9}sum\u{e9}.pdf");
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
            ("dstUrl", json!("a\u{7f}b")),
            ("providerName", json!("Other")),
            ("disableDstSafeguards", json!("yes")),
            ("deviceId", Value::Null),
            ("deviceVersion", json!("")),
            ("vendorExtra", json!(1e300)),
        ] {
            let mut v = good();
            v[field] = bad;
            cases.push(v);
        }
        for v in &cases {
            let plain = v.get("deviceID").is_none() && v.get("vendorExtra") != Some(&json!(1e300));
            for body in [
                v.to_string(),
                serde_json::to_string_pretty(v).unwrap(),
                json!([v, good()]).to_string(),
                serde_json::to_string_pretty(&json!([v, good()])).unwrap(),
            ] {
                let took = agree(&body);
                let refused = validate_slow(body.as_bytes()).is_err();
                assert_eq!(took, plain && !refused, "{body}");
            }
        }
    }

    /// Texts the fast path leaves to the general validator, which decides either way.
    #[test]
    fn the_fast_path_declines_anything_unusual() {
        let base = good().to_string();
        let with = |extra: &str| format!("{{{extra},{}", &base[1..]);
        let deep = |n: usize| format!("{}1{}", "[".repeat(n), "]".repeat(n));
        let cases = [
            // Accepted by the general validator.
            (base.replace("http://", "http:\\/\\/"), true),
            (with("\"v\\u00e9ndor\":1"), true),
            (with("\"vendorExtra\":1e5"), true),
            (with("\"vendorExtra\":12345678901234567890123"), true),
            (with("\"vendorExtra\":0.1234567890123456789012"), true),
            (with(&format!("\"vendorExtra\":{}", deep(20))), true),
            (with("\"vendorExtra\":\"tab\\there\""), true),
            (with("\"dstIP\":\"192.0.2.1\""), true),
            // Refused by it.
            (with("\"dstDomain\":\"other.example\""), false),
            (with("\"vendorExtra\":1,\"vendorExtra\":1"), false),
            (with("\"vendorExtra\":{\"a\":[],\"a\":[]}"), false),
            (with("\"vendorExtra\":1e400"), false),
            (with("\"vendorExtra\":01"), false),
            (with("\"vendorExtra\":-"), false),
            (with("\"vendorExtra\":1."), false),
            (with("\"vendorExtra\":tru"), false),
            (with("\"vendorExtra\":nul"), false),
            (with("\"vendorExtra\":[1,]"), false),
            (with("\"vendorExtra\":{\"a\"}"), false),
            (with(&format!("\"vendorExtra\":{}", deep(200))), false),
            (format!("{base} x"), false),
            (format!("[{base},]"), false),
            (format!("[{base}"), false),
            (format!("\u{feff}{base}"), false),
            (
                base.replace("\"deviceVersion\"", "\"deviceVersion\" 1"),
                false,
            ),
            ("[]".to_string(), false),
            ("{}".to_string(), false),
        ];
        for (body, accepted) in cases {
            assert!(!agree(&body), "the fast path took {body}");
            assert_eq!(validate_slow(body.as_bytes()).is_ok(), accepted, "{body}");
        }
        // Whitespace anywhere JSON allows it is plain.
        let spaced = format!(
            " \r\n[\t{} ,\n{}\n] \n",
            base.replace("\":", "\" :\t").replace(",\"", ", \""),
            base
        );
        assert!(agree(&spaced));
    }

    /// decisions.md: an object with the same member twice is a 400 naming the member, keyed like
    /// the other field errors; any object of the body counts, nested ones too.
    #[test]
    fn repeated_members_are_named() {
        let base = good().to_string();
        let with = |extra: &str| format!("{{{extra},{}", &base[1..]);
        let cases = [
            (with("\"dstDomain\":\"b.example\""), "dstDomain"),
            (with("\"dstDomain\":null"), "dstDomain"),
            (with("\"v\":1,\"v\":[1]"), "v"),
            (with("\"v\":1,\"\\u0076\":1"), "v"),
            (with("\"v\":{\"a\":1,\"b\":{\"c\":1,\"c\":1}}"), "v.b.c"),
            (with("\"v\":[0,{\"a\":1,\"a\":2}]"), "v[1].a"),
            (with("\"src\":\"a\",\"src\":null"), "src"),
            (
                format!(
                    "{{\"disableDstSafeguards\":true,{}",
                    &with("\"disableDstSafeguards\":false")[1..]
                ),
                "disableDstSafeguards",
            ),
        ];
        for (body, name) in &cases {
            assert!(!agree(body), "the fast path took {body}");
            match validate_body(body.as_bytes()) {
                Err(EventsError::Fields(f)) => {
                    let got: Vec<(String, &str)> =
                        f.iter().map(|e| (e.to_string(), e.problem)).collect();
                    assert_eq!(got, [(name.to_string(), "is duplicated")], "{body}");
                }
                other => panic!("{body}: {other:?}"),
            }
        }
        // In a batch: each element named, the others judged as usual.
        let mut bad = good();
        bad["dstDomain"] = json!("not a domain");
        let body = format!(
            "[{},{},{},{}]",
            base,
            cases[0].0,
            bad,
            with("\"x\":{\"y\":1,\"y\":2,\"y\":3,\"z\":0,\"z\":0}")
        );
        assert!(!agree(&body));
        let Err(EventsError::Fields(f)) = validate_body(body.as_bytes()) else {
            panic!("refused with field errors")
        };
        let got: Vec<String> = f.iter().map(|e| format!("{e}={}", e.problem)).collect();
        assert_eq!(
            got,
            [
                "[1].dstDomain=is duplicated",
                "[2].dstDomain=is invalid",
                "[3].x.y=is duplicated",
                "[3].x.z=is duplicated"
            ]
        );
        // Inside an element that is not an object, only that is said.
        let body = format!("[{base},[{{\"a\":1,\"a\":1}}]]");
        assert_eq!(
            errors_of(&serde_json::from_str(&body.replace("\"a\":1,", "\"b\":1,")).unwrap()),
            [("[1]".to_string(), "must be an object".to_string())]
        );
        let Err(EventsError::Fields(f)) = validate_body(body.as_bytes()) else {
            panic!("refused with field errors")
        };
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].to_string(), "[1]");
        // Two different members are not a repeat, however alike.
        assert!(agree(&with("\"v\":1,\"V\":1,\"v2\":{\"v\":1}")));
    }

    /// Unknown members past what the fast path tracks go to the general validator, which
    /// accepts them when none repeats.
    #[test]
    fn many_unknown_members_are_left_to_the_general_validator() {
        let base = good().to_string();
        let members = |n: usize| (0..n).map(|i| format!("\"x{i}\":{i},")).collect::<String>();
        let body = format!("{{{}{}", members(fast::MAX_MEMBERS), &base[1..]);
        assert!(agree(&body), "a full table is still the fast path's");
        let body = format!("{{{}{}", members(fast::MAX_MEMBERS + 1), &base[1..]);
        assert!(!agree(&body));
        assert!(validate_body(body.as_bytes()).is_ok());
        let nested = format!("{{{}\"n\":1}}", members(fast::MAX_MEMBERS));
        let body = format!("{{\"v\":{nested},{}", &base[1..]);
        assert!(!agree(&body));
        assert!(validate_body(body.as_bytes()).is_ok());
    }

    /// The fast path's keys are the general validator's fields, in the same slots.
    #[test]
    fn fast_keys_are_the_validators_fields() {
        use fast::{key, Key};
        for (i, (name, alt)) in REQUIRED.iter().chain(OPTIONAL).enumerate() {
            assert_eq!(key(name), Key::Str(i), "{name}");
            if let Some((alt, _)) = alt {
                assert_eq!(key(alt), Key::Alt, "{alt}");
            }
        }
        assert_eq!(key("disableDstSafeguards"), Key::Flag);
        assert_eq!(key("vendorExtra"), Key::Unknown);
    }

    #[test]
    fn plain_string_lengths() {
        let naive = |b: &[u8]| {
            let n = b
                .iter()
                .position(|&c| c == b'"' || c == b'\\' || c < 0x20)?;
            (b[n] == b'"').then_some(n)
        };
        for s in [
            "",
            "\"",
            "abc\"",
            "abcdefgh\"",
            "abcdefghijklmnop\"x",
            "abc\\\"",
            "abcdefg\u{1}\"",
            "\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\"",
            "abcdefgh",
            "abc\u{7f}\u{80}\"",
        ] {
            assert_eq!(fast::plain_len(s.as_bytes()), naive(s.as_bytes()), "{s:?}");
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
        fn plain_lengths_are_exact(bytes in proptest::collection::vec(
            prop_oneof![Just(b'"'), Just(b'\\'), Just(0x1fu8), Just(0x20u8), Just(0x7fu8), Just(0xe9u8), Just(b'a')],
            0..40,
        )) {
            let naive = bytes.iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20)
                .filter(|&n| bytes[n] == b'"');
            prop_assert_eq!(fast::plain_len(&bytes), naive);
        }

        /// Random edits of good bodies never make the fast path accept what the general validator
        /// refuses, or read it differently.
        #[test]
        fn edited_bodies_agree(
            array in any::<bool>(),
            edits in proptest::collection::vec(
                (any::<prop::sample::Index>(), 0u8..3, prop::sample::select(
                    &[
                        "{", "}", "[", "]", "\"", ",", ":", " ", "\\", "\\\"", "\\u00e9", "0",
                        "-1", "1.5", "1e3", "true", "null", "\u{1}", "\u{7f}", "\u{e9}", "x",
                        "\"dstDomain\":\"b.example\",", "\"deviceID\":\"d\",", "\"k\":[{}],",
                    ][..],
                )),
                1..4,
            ),
        ) {
            let mut body = if array {
                json!([good(), good()]).to_string()
            } else {
                good().to_string()
            };
            for (at, op, piece) in edits {
                let mut i = at.index(body.len() + 1);
                while !body.is_char_boundary(i) {
                    i -= 1;
                }
                let end = body[i..].chars().next().map_or(i, |c| i + c.len_utf8());
                match op {
                    0 => body.insert_str(i, piece),
                    1 => body.replace_range(i..end, piece),
                    _ => body.replace_range(i..end, ""),
                }
            }
            agree(&body);
        }

        /// Extra members, some repeated, some nested: both paths agree, and the body is refused
        /// exactly when an object holds a member twice.
        #[test]
        fn repeats_are_refused_by_both_paths(
            extras in proptest::collection::vec(
                (prop::sample::select(&["a", "b", "c", "dstDomain", "src"][..]),
                 proptest::option::of(proptest::collection::vec(
                     prop::sample::select(&["p", "q", "r"][..]), 0..4))),
                0..5,
            ),
        ) {
            let base = good().to_string();
            let mut text = String::from("{");
            let mut top: Vec<&str> = REQUIRED.iter().map(|(n, _)| *n).collect();
            let mut repeated = false;
            for (name, inner) in &extras {
                repeated |= top.contains(name);
                top.push(name);
                let value = match inner {
                    None => if *name == "src" { "\"h\"".to_string() } else { "1".to_string() },
                    Some(keys) => {
                        let mut seen = Vec::new();
                        for k in keys {
                            repeated |= seen.contains(k);
                            seen.push(*k);
                        }
                        format!("{{{}}}", keys.iter().map(|k| format!("\"{k}\":0")).collect::<Vec<_>>().join(","))
                    }
                };
                text.push_str(&format!("\"{name}\":{value},"));
            }
            text.push_str(&base[1..]);
            agree(&text);
            let result = validate_body(text.as_bytes());
            let dup_named = matches!(&result, Err(EventsError::Fields(f))
                if f.iter().any(|e| e.problem == "is duplicated"));
            prop_assert_eq!(dup_named, repeated, "{}", text);
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
