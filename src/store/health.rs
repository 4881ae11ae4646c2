//! Whether the storage takes writes, as every engine keeps it for `/readyz` and the metrics:
//! written once, for both engines. A storage fault (an `Unavailable` error of a write) makes it
//! false; a write that succeeds, or the engine's background probe finding the storage writable
//! again, makes it true. The probe is what makes readiness follow the storage by itself, with no
//! client write: SQLite's checkpointer probes after a fault; PostgreSQL's probe asks the database
//! every second whether it takes a commit.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::store::{FaultKind, StorageHealth, StoreError};

/// The state of the storage as the engine's writes and its probe see it.
#[derive(Default)]
pub(crate) struct Health {
    /// Set by a storage fault, cleared by the next successful write or probe.
    faulty: AtomicBool,
    faults: AtomicU64,
    last: Mutex<Option<(FaultKind, String)>>,
}

impl Health {
    /// Records a storage fault (`Unavailable`); other errors are not the storage's.
    pub(crate) fn fault(&self, e: &StoreError) {
        let StoreError::Unavailable(f) = e else {
            return;
        };
        self.faults.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut last) = self.last.lock() {
            *last = Some((f.kind, f.detail.clone()));
        }
        if !self.faulty.swap(true, Ordering::Relaxed) {
            log::error!(
                "storage fault ({}): {}; writes are refused with 503 until the storage takes them again",
                f.kind.name(),
                f.detail
            );
        }
    }

    /// Records a successful write (or probe).
    pub(crate) fn written(&self) {
        if self.faulty.swap(false, Ordering::Relaxed) {
            log::warn!("the storage takes writes again");
        }
    }

    pub(crate) fn writable(&self) -> bool {
        !self.faulty.load(Ordering::Relaxed)
    }

    pub(crate) fn snapshot(&self) -> StorageHealth {
        StorageHealth {
            writable: self.writable(),
            last_fault: self
                .last
                .lock()
                .ok()
                .and_then(|l| l.clone())
                .map(|(k, d)| (k.name().to_string(), d)),
            faults: self.faults.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_makes_the_storage_unwritable_until_a_write_or_probe_succeeds() {
        let h = Health::default();
        assert!(h.snapshot().writable);
        h.fault(&StoreError::NotFound);
        assert!(h.writable(), "not a storage fault");
        h.fault(&StoreError::fault(FaultKind::Disconnected, "gone"));
        let s = h.snapshot();
        assert!(!s.writable);
        assert_eq!(s.faults, 1);
        assert_eq!(
            s.last_fault,
            Some(("disconnected".to_string(), "gone".to_string()))
        );
        h.written();
        let s = h.snapshot();
        assert!(s.writable);
        assert_eq!(s.faults, 1, "the count of faults stays");
    }
}
