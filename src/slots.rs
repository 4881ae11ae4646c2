//! Connection slots: at most `Limits::max_connections` connections are served at once, and when
//! they are all taken and another client is waiting, the connection that has gone longest
//! without sending a request is closed to make room for it.
//!
//! Without eviction a slow client holds its slot until the header timeout (30 s): a thousand
//! connections that each send a request head a few bytes at a time (`slowhttptest -H`) held every
//! slot, and every other client was refused for as long as the attack went on. A connection is
//! only closed for another one when it is not in the middle of a request (its phase is
//! [`Phase::Handshake`], [`Phase::AwaitingHead`] or [`Phase::Idle`]) and has been so for longer
//! than `Limits::eviction_grace`; of those, one that has never completed a request goes first,
//! then idle keep-alive ones, each the longest-waiting first. A request being read, handled or
//! answered is never cut short for another client: its own timeouts bound it.
//!
//! Per-source limits were not chosen: appliances and the products that report to them often sit
//! behind one address (a NAT, a proxy), and a limit by address would refuse them together, while
//! what a slow client does is visible whatever its address.

use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Where a connection is in its life, for eviction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    /// Accepted; the TLS handshake is under way.
    Handshake = 0,
    /// Waiting for its first request head.
    AwaitingHead = 1,
    /// A request is being read, handled or answered.
    Active = 2,
    /// Answered; waiting for the next request head (keep-alive).
    Idle = 3,
    /// Told to close.
    Evicted = 4,
    /// A request whose body waits, unread, for its share of the memory budget: it would be
    /// refused with 503 if the wait ran out, so it yields its slot like a connection that has
    /// not sent a request.
    Waiting = 5,
}

impl Phase {
    fn from_u8(v: u8) -> Phase {
        match v {
            0 => Phase::Handshake,
            1 => Phase::AwaitingHead,
            2 => Phase::Active,
            3 => Phase::Idle,
            5 => Phase::Waiting,
            _ => Phase::Evicted,
        }
    }
}

/// One connection's entry: its phase, since when, and how to tell it to close.
pub struct Conn {
    phase: AtomicU8,
    /// Milliseconds from the table's epoch to the phase's start.
    since: AtomicU64,
    epoch: Instant,
    evict: Notify,
}

impl Conn {
    /// Enters `phase` now. A connection told to close stays so.
    pub fn set_phase(&self, phase: Phase) {
        let since = self.epoch.elapsed().as_millis() as u64;
        self.since.store(since, Ordering::Relaxed);
        let _ = self
            .phase
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |p| {
                (p != Phase::Evicted as u8).then_some(phase as u8)
            });
    }

    pub fn phase(&self) -> Phase {
        Phase::from_u8(self.phase.load(Ordering::Acquire))
    }

    /// Resolves once the connection has been chosen to make room for another.
    pub async fn evicted(&self) {
        self.evict.notified().await
    }
}

struct Table {
    entries: Vec<Option<Arc<Conn>>>,
    free: Vec<usize>,
}

/// The slots of a server.
pub struct Slots {
    max: usize,
    grace: Duration,
    epoch: Instant,
    table: Mutex<Table>,
    used: AtomicUsize,
    freed: Notify,
    evictions: AtomicU64,
    /// Called with each closed connection (for the memory budget's trimming).
    on_release: Box<dyn Fn() + Send + Sync>,
}

/// A slot held by a connection; released when dropped.
pub struct SlotGuard {
    slots: Arc<Slots>,
    index: usize,
    conn: Arc<Conn>,
}

impl SlotGuard {
    pub fn conn(&self) -> &Arc<Conn> {
        &self.conn
    }
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        if let Ok(mut t) = self.slots.table.lock() {
            t.entries[self.index] = None;
            t.free.push(self.index);
        }
        self.slots.used.fetch_sub(1, Ordering::AcqRel);
        self.slots.freed.notify_waiters();
        (self.slots.on_release)();
    }
}

/// Which connection to close for a new one, if any.
enum Victim {
    Now(Arc<Conn>),
    /// None yet; the first to pass its grace does so at this instant.
    At(Instant),
    None,
}

impl Slots {
    pub fn new(
        max: usize,
        grace: Duration,
        on_release: impl Fn() + Send + Sync + 'static,
    ) -> Arc<Slots> {
        let max = max.max(1);
        Arc::new(Slots {
            max,
            grace,
            epoch: Instant::now(),
            table: Mutex::new(Table {
                entries: (0..max).map(|_| None).collect(),
                free: (0..max).rev().collect(),
            }),
            used: AtomicUsize::new(0),
            freed: Notify::new(),
            evictions: AtomicU64::new(0),
            on_release: Box::new(on_release),
        })
    }

    /// Connections holding a slot.
    pub fn in_use(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    /// Connections closed to make room for others so far.
    pub fn evictions(&self) -> u64 {
        self.evictions.load(Ordering::Relaxed)
    }

    /// A free slot, if there is one.
    pub fn try_claim(self: &Arc<Self>) -> Option<SlotGuard> {
        let mut t = self.table.lock().ok()?;
        let index = t.free.pop()?;
        let conn = Arc::new(Conn {
            phase: AtomicU8::new(Phase::Handshake as u8),
            since: AtomicU64::new(self.epoch.elapsed().as_millis() as u64),
            epoch: self.epoch,
            evict: Notify::new(),
        });
        t.entries[index] = Some(conn.clone());
        drop(t);
        self.used.fetch_add(1, Ordering::AcqRel);
        Some(SlotGuard {
            slots: self.clone(),
            index,
            conn,
        })
    }

    /// A slot for a client that is waiting: a free one, or one freed by closing the connection
    /// that has waited longest without a request (past the grace); waits until there is one.
    pub async fn claim(self: &Arc<Self>) -> SlotGuard {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if let Some(g) = self.try_claim() {
                return g;
            }
            match self.victim() {
                Victim::Now(conn) => {
                    let n = self.evictions.fetch_add(1, Ordering::Relaxed);
                    if n == 0 {
                        log::warn!(
                            "all {} connection slots taken: closing connections that send no \
                             request to make room for new clients",
                            self.max
                        );
                    } else {
                        log::debug!("connection slots full: closing an idle connection");
                    }
                    conn.evict.notify_one();
                    freed.await;
                }
                Victim::At(when) => {
                    tokio::select! {
                        _ = freed => {}
                        _ = tokio::time::sleep_until(when) => {}
                    }
                }
                Victim::None => freed.await,
            }
        }
    }

    /// Waits until every slot is free.
    pub async fn all_released(&self) {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if self.in_use() == 0 {
                return;
            }
            freed.await;
        }
    }

    /// The connection to close for a new one: past its grace and not in a request; one that never
    /// completed a request before an idle one, the longest-waiting first. It is marked
    /// [`Phase::Evicted`] so that it is chosen once.
    fn victim(&self) -> Victim {
        let Ok(t) = self.table.lock() else {
            return Victim::None;
        };
        let now = self.epoch.elapsed().as_millis() as u64;
        let grace = self.grace.as_millis() as u64;
        // (tier, since): lower is evicted first.
        let mut best: Option<((u8, u64), &Arc<Conn>)> = None;
        let mut soonest: Option<u64> = None;
        for c in t.entries.iter().flatten() {
            // The grace protects only a connection that has not had its chance to send a
            // request yet; a served, idle one costs its client a reconnection, and a request
            // waiting for the memory budget would be refused with 503 anyway.
            let (tier, graced) = match c.phase() {
                Phase::Handshake | Phase::AwaitingHead => (0, true),
                Phase::Idle => (1, false),
                Phase::Waiting => (2, false),
                Phase::Active | Phase::Evicted => continue,
            };
            let since = c.since.load(Ordering::Relaxed);
            if graced && now.saturating_sub(since) < grace {
                let due = since + grace;
                soonest = Some(soonest.map_or(due, |s| s.min(due)));
                continue;
            }
            if best.is_none_or(|(k, _)| (tier, since) < k) {
                best = Some(((tier, since), c));
            }
        }
        if let Some((_, c)) = best {
            c.phase.store(Phase::Evicted as u8, Ordering::Release);
            return Victim::Now(c.clone());
        }
        match soonest {
            Some(ms) => Victim::At(self.epoch + Duration::from_millis(ms)),
            None => Victim::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn full_slots_evict_the_longest_silent_connection_past_its_grace() {
        let slots = Slots::new(3, Duration::ZERO, || {});
        let a = slots.try_claim().unwrap();
        let b = slots.try_claim().unwrap();
        let c = slots.try_claim().unwrap();
        assert!(slots.try_claim().is_none());
        // a is in a request, b idle after one, c has not sent one: c goes first, then b, never a.
        // (Grace zero: the order does not depend on it.)
        a.conn().set_phase(Phase::Active);
        b.conn().set_phase(Phase::Idle);
        c.conn().set_phase(Phase::AwaitingHead);
        let s = slots.clone();
        let claim = tokio::spawn(async move { s.claim().await });
        tokio::time::timeout(Duration::from_secs(20), c.conn().evicted())
            .await
            .unwrap();
        assert_eq!(c.conn().phase(), Phase::Evicted);
        c.conn().set_phase(Phase::Active);
        assert_eq!(c.conn().phase(), Phase::Evicted, "an eviction stands");
        drop(c);
        let d = claim.await.unwrap();
        assert_eq!(slots.in_use(), 3);
        d.conn().set_phase(Phase::Active);
        let s = slots.clone();
        let claim = tokio::spawn(async move { s.claim().await });
        tokio::time::timeout(Duration::from_secs(20), b.conn().evicted())
            .await
            .unwrap();
        drop(b);
        let _e = claim.await.unwrap();
        assert_eq!(slots.evictions(), 2);
        assert_eq!(a.conn().phase(), Phase::Active);
        drop((a, d));
    }

    #[tokio::test]
    async fn connections_within_their_grace_are_kept() {
        let slots = Slots::new(1, Duration::from_secs(3600), || {});
        let a = slots.try_claim().unwrap();
        a.conn().set_phase(Phase::AwaitingHead);
        assert!(matches!(slots.victim(), Victim::At(_)));
        a.conn().set_phase(Phase::Active);
        assert!(matches!(slots.victim(), Victim::None));
        // Served and idle, or waiting for the memory budget: no grace.
        for phase in [Phase::Waiting, Phase::Idle] {
            a.conn().set_phase(phase);
            assert!(matches!(slots.victim(), Victim::Now(_)), "{phase:?}");
            a.conn().phase.store(phase as u8, Ordering::Release);
        }
        a.conn().set_phase(Phase::Active);
        // A slot freed by the connection itself is taken by a waiting claim.
        let s = slots.clone();
        let claim = tokio::spawn(async move { s.claim().await });
        drop(a);
        let _b = tokio::time::timeout(Duration::from_secs(20), claim)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(slots.evictions(), 0);
    }
}
