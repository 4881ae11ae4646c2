//! The request journal: the latest `POST /1.0/events` requests of each customer key, in memory,
//! for the console (what an integrator's product sent, and why a request was refused).
//!
//! Recording sits on the enforcement path, so it is cheap: a fixed-size record pushed into the
//! key's ring under one short lock, with strings only for a refusal (its message and each field
//! and reason the answer named). Bounded twice: `PER_KEY` records per key (the oldest goes) and
//! `MAX_KEYS` keys (a key past them is not journaled until the process restarts). A refusal for
//! the customer key itself (403) is not journaled: it belongs to no organization, and recording
//! made-up keys would let anyone fill the journal.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;

use crate::error::EnfError;
use crate::store::CustomerKey;

/// Records kept per customer key.
pub const PER_KEY: usize = 100;
/// Customer keys journaled at most.
pub const MAX_KEYS: usize = 10_000;
/// The message of a refusal naming fields (`EnfError::message` of `Validation`).
const VALIDATION_MESSAGE: &str = "There were one or more missing or required fields";

/// Field errors kept of one refusal.
const MAX_FIELDS: usize = 20;

/// One field the refusal named, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldProblem {
    /// The event's position in an array body.
    pub index: Option<u32>,
    pub field: Cow<'static, str>,
    pub problem: &'static str,
}

/// What a refusal's answer said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub message: Cow<'static, str>,
    pub fields: Vec<FieldProblem>,
}

/// One journaled request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Unix seconds.
    pub at: i64,
    pub client: Option<IpAddr>,
    pub status: u16,
    /// Events in the batch (accepted requests; a refused body was not counted).
    pub events: u32,
    pub refusal: Option<Box<Refusal>>,
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

struct Inner {
    rings: HashMap<CustomerKey, VecDeque<Record>>,
    /// Indexed by the minute modulo `MINUTES`; a slot of an older minute is stale.
    minutes: [Minute; MINUTES],
}

pub struct Journal {
    inner: Mutex<Inner>,
}

impl Default for Journal {
    fn default() -> Self {
        Journal {
            inner: Mutex::new(Inner {
                rings: HashMap::new(),
                minutes: [Minute::default(); MINUTES],
            }),
        }
    }
}

impl Journal {
    /// Journals one answered `POST /1.0/events`: `events` in the batch when it was accepted.
    pub fn record(
        &self,
        key: Option<CustomerKey>,
        client: Option<IpAddr>,
        answer: Result<usize, &EnfError>,
    ) {
        let at = crate::timefmt::now();
        let (status, events, refusal) = match answer {
            Ok(n) => (202, u32::try_from(n).unwrap_or(u32::MAX), None),
            Err(EnfError::InvalidCredentials) => (403, 0, None),
            Err(e) => (e.status().as_u16(), 0, Some(Box::new(refusal(e)))),
        };
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let minute = at.div_euclid(60);
        let slot = &mut inner.minutes[minute.rem_euclid(MINUTES as i64) as usize];
        if slot.minute != minute {
            *slot = Minute {
                minute,
                ..Minute::default()
            };
        }
        if status == 202 {
            slot.accepted += u64::from(events);
        } else {
            slot.refused += 1;
        }
        let Some(key) = key.filter(|_| status != 403) else {
            return;
        };
        let record = Record {
            at,
            client,
            status,
            events,
            refusal,
        };
        let rings = &mut inner.rings;
        let len = rings.len();
        let ring = match rings.get_mut(&key) {
            Some(r) => r,
            None if len < MAX_KEYS => rings
                .entry(key)
                .or_insert_with(|| VecDeque::with_capacity(PER_KEY)),
            None => return,
        };
        if ring.len() == PER_KEY {
            ring.pop_front();
        }
        ring.push_back(record);
    }

    /// The records of these keys, newest first, with `status` only if given.
    pub fn latest(&self, keys: &[CustomerKey], status: Option<u16>) -> Vec<Record> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<Record> = keys
            .iter()
            .filter_map(|k| inner.rings.get(k))
            .flat_map(|r| r.iter())
            .filter(|r| status.is_none_or(|s| r.status == s))
            .cloned()
            .collect();
        drop(inner);
        out.sort_by_key(|r| std::cmp::Reverse(r.at));
        out
    }

    /// The last `MINUTES` minutes up to `now` (Unix seconds), oldest first, each with its counts
    /// (zero for a minute with no request).
    pub fn last_hour(&self, now: i64) -> Vec<Minute> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let current = now.div_euclid(60);
        (current - MINUTES as i64 + 1..=current)
            .map(|minute| {
                let slot = inner.minutes[minute.rem_euclid(MINUTES as i64) as usize];
                if slot.minute == minute {
                    slot
                } else {
                    Minute {
                        minute,
                        ..Minute::default()
                    }
                }
            })
            .collect()
    }
}

fn refusal(e: &EnfError) -> Refusal {
    let fields = match e {
        EnfError::Validation(f) => f
            .iter()
            .take(MAX_FIELDS)
            .map(|f| FieldProblem {
                index: f.index,
                field: f.field.clone(),
                problem: f.problem,
            })
            .collect(),
        _ => Vec::new(),
    };
    Refusal {
        // The validation's words are fixed: no copy of them per refusal.
        message: match e {
            EnfError::Validation(_) => Cow::Borrowed(VALIDATION_MESSAGE),
            _ => Cow::Owned(e.message()),
        },
        fields,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minutes_count_the_last_hour_only() {
        let j = Journal::default();
        let key = CustomerKey::parse("ba6a59f4-e692-4724-ba36-c28132c761de");
        j.record(key, None, Ok(3));
        j.record(key, None, Err(&EnfError::InvalidCredentials));
        j.record(None, None, Err(&EnfError::UnsupportedMediaType));
        let now = crate::timefmt::now();
        let hour = j.last_hour(now);
        assert_eq!(hour.len(), MINUTES);
        let last = hour[MINUTES - 1];
        // The clock may have turned a minute between recording and reading.
        let total: (u64, u64) = hour
            .iter()
            .fold((0, 0), |t, m| (t.0 + m.accepted, t.1 + m.refused));
        assert_eq!(total, (3, 2));
        assert_eq!(last.minute, now / 60);
        // An hour later, nothing of it is left.
        assert!(j
            .last_hour(now + 3600)
            .iter()
            .all(|m| m.accepted == 0 && m.refused == 0));
        // The fixed words kept for a refusal naming fields are the answer's.
        assert_eq!(EnfError::Validation(vec![]).message(), VALIDATION_MESSAGE);
        // A 403 is counted, never journaled.
        assert_eq!(j.latest(&[key.unwrap()], None).len(), 1);
    }
}
