//! The memory budget: one pool of bytes, shared by every connection, that a request must be
//! granted before the server reads a large body, and that covers what parsing that body will
//! take. Without it the memory held by requests in flight grew with the number of connections
//! (a thousand clients each sending 1 MiB held over a gigabyte); with it, it is bounded by the
//! budget whatever the number of connections.
//!
//! - A request is charged its estimated cost before its body is read: the declared length times
//!   its route's factor ([`cost`]). A body of unknown length (chunked) is charged as it arrives.
//! - A request that cannot be granted its charge waits, up to `Limits::budget_wait`, with its
//!   body left unread in the kernel's buffers (TCP pushes back on the client); past that it is
//!   refused with 503 and `Retry-After`, before any of its body is read.
//! - Small requests (a charge up to [`FREE_BYTES`]) are never charged: they never wait behind a
//!   large one, and what they hold is bounded by the connection limit times [`FREE_BYTES`].
//! - A charge is held until the answer has been handed to the kernel: an answer is shrunk to the
//!   size of its body first (a refused batch's list of errors can be hundreds of KiB, held for as
//!   long as a client does not read it).
//! - Memory is handed back to the system after load: once enough charged bytes have been
//!   released (or enough connections closed) and the budget is mostly idle again, glibc's free
//!   memory is trimmed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The budget counts in units of this many bytes (a semaphore takes at most 2^32 permits at
/// once; KiB allow budgets and charges up to 4 TiB).
const UNIT: usize = 1024;

/// Charges up to this size are not taken from the budget.
pub const FREE_BYTES: usize = 16 * 1024;

/// After this many bytes of charges (or their equivalent in closed connections) have been
/// released, the next moment the budget is mostly idle trims the allocator's free memory.
const TRIM_AFTER: usize = 16 * 1024 * 1024;

/// What a closed connection is taken to have freed, for trimming (TLS and HTTP buffers, the
/// task: measured at a few tens of KiB a connection).
pub const CONNECTION_BYTES: usize = 48 * 1024;

/// Factor of the declared length charged for a body that is read but not parsed.
pub const PLAIN_FACTOR: usize = 1;

/// The pool.
pub struct MemoryBudget {
    units: Arc<Semaphore>,
    total_units: usize,
    wait: Duration,
    /// Bytes released (charges dropped, connections closed) since the last trim.
    released: Arc<AtomicUsize>,
}

/// A grant from the budget; released when dropped.
pub struct Charge {
    permit: Option<OwnedSemaphorePermit>,
    released: Arc<AtomicUsize>,
    units: Arc<Semaphore>,
    total_units: usize,
}

impl std::fmt::Debug for Charge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Charge({} bytes)", self.bytes())
    }
}

/// Why a charge was not granted.
#[derive(Debug, PartialEq, Eq)]
pub struct Spent;

fn units_for(bytes: usize) -> usize {
    bytes.div_ceil(UNIT)
}

impl MemoryBudget {
    /// A budget of `total` bytes (at least one unit); a request waits up to `wait` for its charge.
    pub fn new(total: usize, wait: Duration) -> MemoryBudget {
        let total_units = units_for(total).clamp(1, u32::MAX as usize);
        MemoryBudget {
            units: Arc::new(Semaphore::new(total_units)),
            total_units,
            wait,
            released: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Bytes granted at the moment.
    pub fn in_use(&self) -> usize {
        (self.total_units - self.units.available_permits().min(self.total_units)) * UNIT
    }

    /// An empty charge, to be grown with [`MemoryBudget::grow`].
    pub fn none(&self) -> Charge {
        Charge {
            permit: None,
            released: self.released.clone(),
            units: self.units.clone(),
            total_units: self.total_units,
        }
    }

    /// Grants `bytes`, waiting up to the budget's wait for them. Charges up to [`FREE_BYTES`]
    /// are granted at once without taking anything. A charge larger than the whole budget is
    /// taken as the whole budget: such a request runs alone.
    pub async fn charge(&self, bytes: usize) -> Result<Charge, Spent> {
        let mut c = self.none();
        self.grow(&mut c, bytes).await?;
        Ok(c)
    }

    /// Adds `bytes` to `charge` (see [`MemoryBudget::charge`]); waits up to the budget's wait.
    /// On failure the charge keeps what it had.
    pub async fn grow(&self, charge: &mut Charge, bytes: usize) -> Result<(), Spent> {
        if bytes <= FREE_BYTES && charge.permit.is_none() {
            return Ok(());
        }
        let held = charge.permit.as_ref().map_or(0, |p| p.num_permits());
        let want = units_for(bytes).min(self.total_units.saturating_sub(held));
        if want == 0 {
            return Ok(());
        }
        let n = want as u32;
        // Without waiting when the units are there (the common case: no timer is armed).
        let permit = match self.units.clone().try_acquire_many_owned(n) {
            Ok(p) => p,
            Err(_) => {
                match tokio::time::timeout(self.wait, self.units.clone().acquire_many_owned(n))
                    .await
                {
                    Ok(Ok(p)) => p,
                    _ => return Err(Spent),
                }
            }
        };
        match &mut charge.permit {
            Some(p) => p.merge(permit),
            None => charge.permit = Some(permit),
        }
        Ok(())
    }

    /// Grants `bytes` if the budget has them now, without waiting (for code that cannot wait).
    pub fn try_charge(&self, bytes: usize) -> Option<Charge> {
        let mut c = self.none();
        let want = units_for(bytes).min(self.total_units);
        if bytes > FREE_BYTES {
            c.permit = Some(
                self.units
                    .clone()
                    .try_acquire_many_owned(want as u32)
                    .ok()?,
            );
        }
        Some(c)
    }

    /// Notes that about `bytes` were freed outside the budget (a connection closed), for
    /// trimming.
    pub fn note_freed(&self, bytes: usize) {
        note_released(&self.released, &self.units, self.total_units, bytes);
    }
}

impl Charge {
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.permit.as_ref().map_or(0, |p| p.num_permits() * UNIT)
    }

    /// Keeps only what `bytes` need (nothing at or below [`FREE_BYTES`]), releasing the rest.
    pub fn shrink_to(&mut self, bytes: usize) {
        let Some(p) = self.permit.as_mut() else {
            return;
        };
        let keep = if bytes <= FREE_BYTES {
            0
        } else {
            units_for(bytes)
        };
        let held = p.num_permits();
        if keep >= held {
            return;
        }
        let freed = if keep == 0 {
            self.permit.take()
        } else {
            p.split(held - keep)
        };
        if let Some(freed) = freed {
            let bytes = freed.num_permits() * UNIT;
            drop(freed);
            note_released(&self.released, &self.units, self.total_units, bytes);
        }
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        if let Some(p) = self.permit.take() {
            let bytes = p.num_permits() * UNIT;
            drop(p);
            note_released(&self.released, &self.units, self.total_units, bytes);
        }
    }
}

/// Counts `bytes` as released and, once [`TRIM_AFTER`] have been and the budget is at most a
/// quarter used, hands free memory back to the system.
fn note_released(released: &AtomicUsize, units: &Semaphore, total_units: usize, bytes: usize) {
    let before = released.fetch_add(bytes, Ordering::Relaxed);
    if before + bytes < TRIM_AFTER {
        return;
    }
    let idle = units.available_permits() >= total_units - total_units / 4;
    if idle && released.swap(0, Ordering::Relaxed) >= TRIM_AFTER {
        trim();
    }
}

/// `malloc_trim` on a blocking thread, when there is a runtime to run it (a charge may be
/// dropped after the runtime is gone, at exit).
fn trim() {
    crate::trim::in_background();
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1024 * 1024;

    #[tokio::test]
    async fn charges_are_granted_up_to_the_total_then_wait_then_fail() {
        let b = MemoryBudget::new(4 * MIB, Duration::from_millis(50));
        let a = b.charge(3 * MIB).await.unwrap();
        assert_eq!(b.in_use(), 3 * MIB);
        assert_eq!(b.charge(2 * MIB).await.unwrap_err(), Spent);
        // Small charges take nothing and never wait.
        let small = b.charge(FREE_BYTES).await.unwrap();
        assert_eq!(small.bytes(), 0);
        let c = b.charge(MIB).await.unwrap();
        assert_eq!(b.in_use(), 4 * MIB);
        drop(a);
        assert_eq!(b.in_use(), MIB);
        drop(c);
        assert_eq!(b.in_use(), 0);
        // Larger than the whole budget: granted as the whole budget.
        let all = b.charge(100 * MIB).await.unwrap();
        assert_eq!(all.bytes(), 4 * MIB);
        assert!(b.try_charge(MIB).is_none());
        drop(all);
        assert_eq!(b.try_charge(MIB).unwrap().bytes(), MIB);
    }

    #[tokio::test]
    async fn a_waiting_charge_is_granted_when_another_is_released() {
        let b = Arc::new(MemoryBudget::new(2 * MIB, Duration::from_secs(20)));
        let a = b.charge(2 * MIB).await.unwrap();
        let b2 = b.clone();
        let waiting = tokio::spawn(async move { b2.charge(MIB).await.map(|c| c.bytes()) });
        drop(a);
        assert_eq!(waiting.await.unwrap(), Ok(MIB));
    }

    #[tokio::test]
    async fn a_charge_grows_and_shrinks() {
        let b = MemoryBudget::new(8 * MIB, Duration::from_millis(50));
        let mut c = b.none();
        b.grow(&mut c, MIB).await.unwrap();
        b.grow(&mut c, MIB).await.unwrap();
        assert_eq!(c.bytes(), 2 * MIB);
        c.shrink_to(300 * 1024);
        assert_eq!(c.bytes(), 300 * 1024);
        assert_eq!(b.in_use(), 300 * 1024);
        c.shrink_to(FREE_BYTES);
        assert_eq!(c.bytes(), 0);
        assert_eq!(b.in_use(), 0);
    }
}
