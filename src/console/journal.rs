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

use crate::error::EnfError;
use crate::store::CustomerKey;

/// Records kept per customer key.
pub const PER_KEY: usize = 100;
/// Customer keys journaled at most.
pub const MAX_KEYS: usize = 10_000;
/// Field errors kept of one refusal.
const MAX_FIELDS: usize = 20;

/// One field the refusal named, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldProblem {
    /// The event's position in an array body.
    pub index: Option<u32>,
    pub field: String,
    pub problem: &'static str,
}

/// What a refusal's answer said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub message: String,
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

#[derive(Default)]
pub struct Journal {
    rings: Mutex<HashMap<CustomerKey, VecDeque<Record>>>,
}

impl Journal {
    /// Journals one answered `POST /1.0/events`: `events` in the batch when it was accepted.
    pub fn record(
        &self,
        key: Option<CustomerKey>,
        client: Option<IpAddr>,
        answer: Result<usize, &EnfError>,
    ) {
        let Some(key) = key else { return };
        let (status, events, refusal) = match answer {
            Ok(n) => (202, u32::try_from(n).unwrap_or(u32::MAX), None),
            Err(EnfError::InvalidCredentials) => return,
            Err(e) => (e.status().as_u16(), 0, Some(Box::new(refusal(e)))),
        };
        let record = Record {
            at: crate::timefmt::now(),
            client,
            status,
            events,
            refusal,
        };
        let mut rings = self.rings.lock().unwrap_or_else(|p| p.into_inner());
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
        let rings = self.rings.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<Record> = keys
            .iter()
            .filter_map(|k| rings.get(k))
            .flat_map(|r| r.iter())
            .filter(|r| status.is_none_or(|s| r.status == s))
            .cloned()
            .collect();
        drop(rings);
        out.sort_by_key(|r| std::cmp::Reverse(r.at));
        out
    }
}

fn refusal(e: &EnfError) -> Refusal {
    let fields = match e {
        EnfError::Validation(f) => f
            .iter()
            .take(MAX_FIELDS)
            .map(|f| FieldProblem {
                index: f.index,
                field: f.field.to_string(),
                problem: f.problem,
            })
            .collect(),
        _ => Vec::new(),
    };
    Refusal {
        message: e.message(),
        fields,
    }
}
