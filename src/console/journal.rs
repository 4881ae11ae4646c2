//! The request journal: the latest `POST /1.0/events` requests of each customer key, in memory,
//! for the console (what an integrator's product sent, and why a request was refused).
//!
//! Recording sits on the enforcement path, so it is cheap: a fixed-size record pushed into the
//! key's ring under one short lock, with strings only for a refusal (its message and each field
//! and reason the answer named). Bounded twice: `PER_KEY` records per key (the oldest goes) and
//! `MAX_KEYS` keys (a key past them is not journaled until the process restarts). A refusal for
//! the customer key itself (403) is not journaled: it belongs to no organization, and recording
//! made-up keys would let anyone fill the journal.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;

use bytes::Bytes;

use crate::store::CustomerKey;

/// Records kept per customer key.
pub const PER_KEY: usize = 100;
/// Customer keys journaled at most.
pub const MAX_KEYS: usize = 10_000;

/// Field errors shown of one refusal.
const MAX_FIELDS: usize = 20;

/// One journaled request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Unix seconds.
    pub at: i64,
    pub client: Option<IpAddr>,
    pub status: u16,
    /// Events in the batch (accepted requests; a refused body was not counted).
    pub events: u32,
    /// A refusal's answer as it was sent (the response's own bytes, shared, not copied): read
    /// when the journal's page is drawn (`Refusal::of`).
    pub answer: Option<Bytes>,
}

/// What a refusal's answer said: its message and each field it named, with the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub message: String,
    pub fields: Vec<FieldProblem>,
}

/// One field a refusal named, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldProblem {
    /// The event's position in an array body.
    pub index: Option<u32>,
    pub field: String,
    pub problem: String,
}

impl FieldProblem {
    /// From the answer's key (`[1].dstDomain`, `[1]`, `dstDomain`) and reason.
    fn of(key: &str, problem: String) -> FieldProblem {
        let indexed = key.strip_prefix('[').and_then(|rest| {
            let (i, field) = rest.split_once(']')?;
            Some((i.parse().ok()?, field.strip_prefix('.').unwrap_or(field)))
        });
        let (index, field) = match indexed {
            Some((i, field)) => (Some(i), field),
            None => (None, key),
        };
        FieldProblem {
            index,
            field: field.to_string(),
            problem,
        }
    }
}

impl Refusal {
    /// Reads a refusal's JSON answer (`{"code", "message", ["errors"], "statusCode"}`).
    pub fn of(answer: &[u8]) -> Refusal {
        let v: serde_json::Value = serde_json::from_slice(answer).unwrap_or_default();
        let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
        Refusal {
            message: text(&v["message"]),
            fields: v["errors"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .take(MAX_FIELDS)
                        .map(|(k, why)| FieldProblem::of(k, text(why)))
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

/// Minutes the per-minute counts cover (the overview's chart).
pub const MINUTES: usize = 60;

/// Events accepted and event requests refused in one minute.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Minute {
    /// Unix minute (seconds / 60).
    pub minute: i64,
    pub accepted: u64,
    pub refused: u64,
}

/// What is kept of one customer key: its latest requests and its counts.
struct Entry {
    ring: VecDeque<Record>,
    /// Indexed by the minute modulo `MINUTES`; a slot of an older minute is stale.
    minutes: [Minute; MINUTES],
    /// Events accepted and event requests refused since the server started.
    totals: (u64, u64),
}

pub struct Journal {
    inner: Mutex<HashMap<CustomerKey, Entry>>,
}

impl Default for Journal {
    fn default() -> Self {
        Journal {
            inner: Mutex::new(HashMap::new()),
        }
    }
}

/// The counts of a set of customer keys: the last hour per minute and the totals since start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counts {
    /// Oldest first, `MINUTES` of them, ending with the current minute.
    pub hour: Vec<Minute>,
    /// Events accepted and event requests refused since the server started.
    pub totals: (u64, u64),
}

impl Journal {
    /// Journals one answered `POST /1.0/events` of a customer key: 202 with the events of the
    /// batch, or a refusal with its answer's body. Nothing for a 403 (the caller passes none).
    pub fn record(
        &self,
        key: CustomerKey,
        client: Option<IpAddr>,
        status: u16,
        events: usize,
        answer: Option<Bytes>,
    ) {
        let at = crate::timefmt::now();
        let events = u32::try_from(events).unwrap_or(u32::MAX);
        let mut rings = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let len = rings.len();
        let entry = match rings.get_mut(&key) {
            Some(e) => e,
            None if len < MAX_KEYS => rings.entry(key).or_insert_with(|| Entry {
                ring: VecDeque::with_capacity(PER_KEY),
                minutes: [Minute::default(); MINUTES],
                totals: (0, 0),
            }),
            None => return,
        };
        let minute = at.div_euclid(60);
        let slot = &mut entry.minutes[minute.rem_euclid(MINUTES as i64) as usize];
        if slot.minute != minute {
            *slot = Minute {
                minute,
                ..Minute::default()
            };
        }
        if status == 202 {
            slot.accepted += u64::from(events);
            entry.totals.0 += u64::from(events);
        } else {
            slot.refused += 1;
            entry.totals.1 += 1;
        }
        if entry.ring.len() == PER_KEY {
            entry.ring.pop_front();
        }
        entry.ring.push_back(Record {
            at,
            client,
            status,
            events,
            answer,
        });
    }

    /// The records of these keys, newest first, with `status` only if given.
    pub fn latest(&self, keys: &[CustomerKey], status: Option<u16>) -> Vec<Record> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<Record> = keys
            .iter()
            .filter_map(|k| inner.get(k))
            .flat_map(|e| e.ring.iter())
            .filter(|r| status.is_none_or(|s| r.status == s))
            .cloned()
            .collect();
        drop(inner);
        out.sort_by_key(|r| std::cmp::Reverse(r.at));
        out
    }

    /// The counts of these keys together: the last `MINUTES` minutes up to `now` (Unix seconds),
    /// oldest first (zero for a minute with no request), and the totals since start.
    pub fn counts(&self, keys: &[CustomerKey], now: i64) -> Counts {
        let current = now.div_euclid(60);
        let first = current - MINUTES as i64 + 1;
        let mut hour: Vec<Minute> = (first..=current)
            .map(|minute| Minute {
                minute,
                ..Minute::default()
            })
            .collect();
        let mut totals = (0, 0);
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        for e in keys.iter().filter_map(|k| inner.get(k)) {
            totals.0 += e.totals.0;
            totals.1 += e.totals.1;
            for slot in &e.minutes {
                if (first..=current).contains(&slot.minute) {
                    let m = &mut hour[(slot.minute - first) as usize];
                    m.accepted += slot.accepted;
                    m.refused += slot.refused;
                }
            }
        }
        Counts { hour, totals }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{EnfError, FieldError};

    #[test]
    fn counts_are_each_keys_and_cover_the_last_hour_only() {
        let j = Journal::default();
        let key = CustomerKey::parse("ba6a59f4-e692-4724-ba36-c28132c761de").unwrap();
        let other = CustomerKey::parse("0b6a59f4-e692-4724-ba36-c28132c761de").unwrap();
        j.record(key, None, 202, 3, None);
        j.record(key, None, 415, 0, Some(Bytes::from_static(b"{}")));
        j.record(other, None, 202, 40, None);
        let now = crate::timefmt::now();
        let c = j.counts(&[key], now);
        assert_eq!(c.hour.len(), MINUTES);
        assert_eq!(c.hour[MINUTES - 1].minute, now / 60);
        // The clock may have turned a minute between recording and reading.
        let sum = c
            .hour
            .iter()
            .fold((0, 0), |t, m| (t.0 + m.accepted, t.1 + m.refused));
        assert_eq!((sum, c.totals), ((3, 1), (3, 1)));
        assert_eq!(j.counts(&[key, other], now).totals, (43, 1));
        assert_eq!(j.counts(&[], now).totals, (0, 0));
        // An hour later, nothing of it is left in the chart; the totals stay.
        let later = j.counts(&[key], now + 3600);
        assert!(later.hour.iter().all(|m| m.accepted == 0 && m.refused == 0));
        assert_eq!(later.totals, (3, 1));
        assert_eq!(j.latest(&[key], None).len(), 2);
    }

    #[test]
    fn a_refusal_is_read_from_its_answer() {
        let e = EnfError::Validation(vec![FieldError {
            index: Some(1),
            field: "dstDomain".into(),
            problem: "is required",
        }]);
        let body = serde_json::to_vec(&e.body()).unwrap();
        assert_eq!(
            Refusal::of(&body),
            Refusal {
                message: e.message(),
                fields: vec![FieldProblem {
                    index: Some(1),
                    field: "dstDomain".into(),
                    problem: "is required".into(),
                }],
            }
        );
        let e = EnfError::UnsupportedMediaType;
        let r = Refusal::of(&serde_json::to_vec(&e.body()).unwrap());
        assert_eq!((r.message, r.fields.len()), (e.message(), 0));
        // A single event's field, and an element that is not an object.
        assert_eq!(FieldProblem::of("dstDomain", String::new()).index, None);
        let whole = FieldProblem::of("[4]", String::new());
        assert_eq!((whole.index, whole.field.as_str()), (Some(4), ""));
    }
}
