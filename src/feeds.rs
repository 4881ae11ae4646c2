//! What the feeds did, kept in memory for the console's overview: each organization's RPZ serial
//! and since when, the secondaries that transferred its zone (the last transfer of each) and the
//! requests for it that were refused, the last NOTIFY sent to each target and how it ended, when
//! each organization's export files were last written, and the exporter's last round.
//!
//! Recording sits on the primary's answer path and in the exporter's rounds, so it is cheap: a
//! fixed-size record (no string, no allocation once a zone's few slots exist) put in place under
//! one short lock. Bounded: per zone, the last transfer of at most `SECONDARIES_PER_ZONE`
//! secondaries (the one heard from the longest ago goes) and the last `REFUSED_PER_ZONE`
//! refusals; for the whole server, the last `REFUSED_PER_SERVER` refusals; one NOTIFY per
//! target. A zone's records are kept only while the zone exists (a refused request naming a
//! zone not known here is kept among the server's refusals alone, and transfers are served of
//! existing zones only), so no request can make the records grow. Everything starts empty when the server starts, and on several nodes each node
//! keeps what it did itself.

use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

/// Secondaries whose last transfer of a zone is kept.
pub const SECONDARIES_PER_ZONE: usize = 8;
/// Refused requests kept per zone.
pub const REFUSED_PER_ZONE: usize = 4;
/// Refused requests kept for the whole server (any zone, or none).
pub const REFUSED_PER_SERVER: usize = 16;

/// What a secondary asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Axfr,
    Ixfr,
    /// The zone's SOA (what a secondary asks first, to learn the serial).
    Soa,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Axfr => "AXFR",
            Kind::Ixfr => "IXFR",
            Kind::Soa => "SOA",
        }
    }
}

/// How a request was signed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Signed {
    /// Not signed (admitted, if at all, by its address).
    #[default]
    No,
    /// With the server's key (`RpzFacts::key`).
    Key,
    /// With another key, or with a signature that does not hold.
    Other,
}

/// What a request got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The whole zone.
    Whole,
    /// The differences since the secondary's serial, over this many versions.
    Differences(usize),
    /// The secondary was current: the SOA alone.
    Current,
    /// Refused, and why.
    Refused(&'static str),
}

/// One request for a zone, as answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pull {
    /// Unix seconds.
    pub at: i64,
    pub from: IpAddr,
    pub kind: Kind,
    /// The zone's organization, if the request named one.
    pub org: Option<i64>,
    /// The serial an IXFR said the secondary had.
    pub had: Option<u32>,
    /// The serial it was sent.
    pub got: Option<u32>,
    pub signed: Signed,
    pub answer: Answer,
}

/// A secondary's last transfer of a zone, and how many it made since the server started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Secondary {
    pub last: Pull,
    pub transfers: u64,
}

/// What the feeds did for one organization.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OrgFeed {
    /// Its zone's serial and since when (Unix seconds); `None` without a zone.
    pub serial: Option<(u32, i64)>,
    /// When its export files were last written (Unix seconds).
    pub files_written: Option<i64>,
    /// The secondaries that transferred its zone, the latest first.
    pub secondaries: Vec<Secondary>,
    /// The latest refusals of requests for its zone, the latest first.
    pub refused: VecDeque<Pull>,
}

/// How a NOTIFY ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotifyOutcome {
    /// Sent, no answer yet.
    Waiting,
    /// Answered with this RCODE (0: NOERROR).
    Answered(u8),
    /// No answer after this many tries.
    NoAnswer(u32),
    /// It could not be sent.
    Failed(String),
}

/// The last NOTIFY sent to a target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notify {
    pub at: i64,
    pub org: i64,
    pub serial: u32,
    pub outcome: NotifyOutcome,
}

/// The RPZ primary's configuration, as it serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpzFacts {
    /// The address it answers on (the port it got, when asked for port 0).
    pub listen: SocketAddr,
    /// The zones' suffix, without the final dot.
    pub suffix: String,
    /// The TSIG key's name, if transfers may be signed.
    pub key: Option<String>,
    /// The address ranges that may transfer without a key.
    pub allow: Vec<String>,
    pub notify: Vec<SocketAddr>,
}

/// The exporter's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportFacts {
    pub dir: PathBuf,
    pub formats: Vec<&'static str>,
}

/// A round of the exporter that wrote files or changed zones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Round {
    /// When it started, Unix seconds.
    pub at: i64,
    pub took: Duration,
    /// Organizations whose files or zones it wrote or removed.
    pub organizations: usize,
}

/// The server-wide part, for the operator.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerFeeds {
    pub rpz: Option<RpzFacts>,
    pub export: Option<ExportFacts>,
    /// Per `--rpz-notify` target, in the order given: the last NOTIFY sent to it.
    pub notifies: Vec<(SocketAddr, Option<Notify>)>,
    pub last_round: Option<Round>,
    /// The last round that failed: when, and why.
    pub last_failure: Option<(i64, String)>,
    /// The latest refusals, of any zone or none, the latest first.
    pub refused: Vec<Pull>,
}

#[derive(Default)]
struct State {
    server: ServerFeeds,
    notifies: BTreeMap<SocketAddr, Notify>,
    refused: VecDeque<Pull>,
    orgs: BTreeMap<i64, OrgFeed>,
}

/// The records; see the module's comment.
#[derive(Default)]
pub struct Feeds {
    inner: Mutex<State>,
}

impl Feeds {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The RPZ primary serves.
    pub fn serving_zones(&self, facts: RpzFacts) {
        self.state().server.rpz = Some(facts);
    }

    /// The exporter keeps files.
    pub fn writing_files(&self, facts: ExportFacts) {
        self.state().server.export = Some(facts);
    }

    /// The organization's zone has this serial (from `at`, unless it had it already).
    pub fn zone_serial(&self, org: i64, serial: u32, at: i64) {
        let mut state = self.state();
        let feed = state.orgs.entry(org).or_default();
        if feed.serial.is_none_or(|(s, _)| s != serial) {
            feed.serial = Some((serial, at));
        }
    }

    /// These organizations' files were written (and are in place) at `at`.
    pub fn files_written(&self, orgs: &[i64], at: i64) {
        let mut state = self.state();
        for &org in orgs {
            state.orgs.entry(org).or_default().files_written = Some(at);
        }
    }

    /// The organization no longer exists: its records go.
    pub fn forget(&self, org: i64) {
        self.state().orgs.remove(&org);
    }

    /// A request for a zone was answered: a transfer (served only of a zone that exists: kept
    /// even if the round that made the zone has not recorded its serial yet), or a refusal
    /// (kept under its zone only if the zone is known here).
    pub fn pulled(&self, pull: Pull) {
        let mut state = self.state();
        if let Answer::Refused(_) = pull.answer {
            if let Some(feed) = pull.org.and_then(|org| state.orgs.get_mut(&org)) {
                push_bounded(&mut feed.refused, pull, REFUSED_PER_ZONE);
            }
            push_bounded(&mut state.refused, pull, REFUSED_PER_SERVER);
            return;
        }
        let Some(org) = pull.org else {
            return;
        };
        let secondaries = &mut state.orgs.entry(org).or_default().secondaries;
        let transfers = match secondaries.iter().position(|s| s.last.from == pull.from) {
            Some(i) => secondaries.remove(i).transfers,
            None => {
                secondaries.truncate(SECONDARIES_PER_ZONE - 1);
                0
            }
        };
        secondaries.insert(
            0,
            Secondary {
                last: pull,
                transfers: transfers + 1,
            },
        );
    }

    /// A NOTIFY of the zone at `serial` was sent to `to`.
    pub fn notify_sent(&self, to: SocketAddr, org: i64, serial: u32, at: i64) {
        let notify = Notify {
            at,
            org,
            serial,
            outcome: NotifyOutcome::Waiting,
        };
        self.state().notifies.insert(to, notify);
    }

    /// How the NOTIFY of the zone at `serial` to `to` ended (not recorded if another NOTIFY was
    /// sent to `to` since).
    pub fn notify_ended(&self, to: SocketAddr, org: i64, serial: u32, outcome: NotifyOutcome) {
        let mut state = self.state();
        if let Some(n) = state.notifies.get_mut(&to) {
            if n.org == org && n.serial == serial {
                n.outcome = outcome;
            }
        }
    }

    /// A round of the exporter that wrote files or changed zones ended.
    pub fn round_done(&self, round: Round) {
        self.state().server.last_round = Some(round);
    }

    /// A round of the exporter failed.
    pub fn round_failed(&self, at: i64, why: String) {
        self.state().server.last_failure = Some((at, why));
    }

    /// What the feeds did for these organizations (those without any record are left out).
    pub fn of(&self, orgs: &[i64]) -> BTreeMap<i64, OrgFeed> {
        let state = self.state();
        orgs.iter()
            .filter_map(|org| Some((*org, state.orgs.get(org)?.clone())))
            .collect()
    }

    /// The server-wide part (the operator's).
    pub fn server(&self) -> ServerFeeds {
        let state = self.state();
        let mut server = state.server.clone();
        if let Some(rpz) = &server.rpz {
            server.notifies = rpz
                .notify
                .iter()
                .map(|to| (*to, state.notifies.get(to).cloned()))
                .collect();
        }
        server.refused = state.refused.iter().copied().collect();
        server
    }
}

/// Puts `item` first, the oldest going beyond `bound`.
fn push_bounded<T>(ring: &mut VecDeque<T>, item: T, bound: usize) {
    ring.push_front(item);
    ring.truncate(bound);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pull(from: &str, org: i64, answer: Answer) -> Pull {
        Pull {
            at: 1,
            from: from.parse().unwrap(),
            kind: Kind::Axfr,
            org: Some(org),
            had: None,
            got: Some(5),
            signed: Signed::Key,
            answer,
        }
    }

    #[test]
    fn records_are_bounded_and_kept_for_existing_zones_only() {
        let feeds = Feeds::default();
        // No zone 7 known: a refusal goes to the server's alone.
        feeds.pulled(pull("127.0.0.1", 7, Answer::Refused("no")));
        assert!(feeds.of(&[7]).is_empty());
        assert_eq!(feeds.server().refused.len(), 1);
        feeds.zone_serial(7, 5, 10);
        feeds.zone_serial(7, 5, 20);
        assert_eq!(feeds.of(&[7])[&7].serial, Some((5, 10)), "since it changed");
        for i in 0..(SECONDARIES_PER_ZONE as u8 + 3) {
            feeds.pulled(pull(&format!("127.0.0.{i}"), 7, Answer::Whole));
        }
        feeds.pulled(pull("127.0.0.5", 7, Answer::Current));
        let feed = &feeds.of(&[7])[&7];
        assert_eq!(feed.secondaries.len(), SECONDARIES_PER_ZONE);
        assert_eq!(feed.secondaries[0].last.from.to_string(), "127.0.0.5");
        assert_eq!(feed.secondaries[0].transfers, 2);
        assert_eq!(feed.secondaries[0].last.answer, Answer::Current);
        for _ in 0..REFUSED_PER_SERVER + 2 {
            feeds.pulled(pull("127.0.0.9", 7, Answer::Refused("no")));
        }
        assert_eq!(feeds.of(&[7])[&7].refused.len(), REFUSED_PER_ZONE);
        assert_eq!(feeds.server().refused.len(), REFUSED_PER_SERVER);
        feeds.forget(7);
        assert!(feeds.of(&[7]).is_empty());
    }

    #[test]
    fn a_notify_outcome_is_that_of_the_last_notify_sent() {
        let feeds = Feeds::default();
        let to: SocketAddr = "127.0.0.1:53".parse().unwrap();
        feeds.serving_zones(RpzFacts {
            listen: to,
            suffix: "rpz.parasol".into(),
            key: None,
            allow: Vec::new(),
            notify: vec![to],
        });
        feeds.notify_sent(to, 1, 5, 10);
        feeds.notify_sent(to, 2, 6, 11);
        feeds.notify_ended(to, 1, 5, NotifyOutcome::Answered(0));
        let last = feeds.server().notifies[0].1.clone();
        assert_eq!(last.map(|n| n.outcome), Some(NotifyOutcome::Waiting));
        feeds.notify_ended(to, 2, 6, NotifyOutcome::NoAnswer(5));
        let last = feeds.server().notifies[0].1.clone();
        assert_eq!(last.map(|n| n.outcome), Some(NotifyOutcome::NoAnswer(5)));
    }
}
