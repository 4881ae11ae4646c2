//! The event validator (`validate_events`: the fast path, then the general validator) on any
//! bytes as a POST /1.0/events body.
//!
//! Invariants: it never panics. A body it accepts yields at least one event; the text it stores
//! is a JSON array with one object per event and no object holding a member twice; that text,
//! validated again, gives the same events; each event's domain is already normalised
//! (normalising it again changes nothing). A body it refuses with field errors names at least
//! one and at most `MAX_ERRORS` problems, each key once (the `errors` map has unique members).
#![no_main]

use libfuzzer_sys::fuzz_target;
use parasol::enforcement::domain::normalize;
use parasol::enforcement::event::{validate_events, EventsError, MAX_ERRORS};
use serde_json::Value;

fuzz_target!(|body: &[u8]| {
    match validate_events(body) {
        Ok((events, stored)) => {
            assert!(!events.is_empty());
            let tree = parasol::json::from_slice(stored.as_bytes())
                .unwrap_or_else(|e| panic!("stored text {stored:?} does not parse: {e}"));
            let Value::Array(items) = tree else {
                panic!("stored text is not an array: {stored:?}")
            };
            assert_eq!(items.len(), events.len());
            assert!(items.iter().all(Value::is_object));
            for ev in &events {
                assert_eq!(normalize(&ev.domain).as_deref(), Ok(ev.domain.as_str()));
            }
            let (again, stored_again) = validate_events(stored.as_bytes())
                .unwrap_or_else(|e| panic!("stored text {stored:?} is refused: {e:?}"));
            assert_eq!(again, events);
            assert_eq!(stored_again, stored);
        }
        Err(EventsError::Fields(errors)) => {
            assert!(!errors.is_empty() && errors.len() <= MAX_ERRORS);
            let mut keys: Vec<String> = errors.iter().map(ToString::to_string).collect();
            keys.sort();
            let n = keys.len();
            keys.dedup();
            assert_eq!(keys.len(), n, "an errors key named twice: {errors:?}");
        }
        Err(EventsError::Malformed(_)) => {}
    }
});
