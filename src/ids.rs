//! Random ids handed out per request (a batch's id, a management response's txId), without a
//! system call each.
//!
//! `Uuid::new_v4` asks the kernel for 16 random bytes every time: a `getrandom(2)` call per
//! accepted event request, about 1.4% of the server's CPU in the single-event benchmark. These
//! ids need the kernel's randomness (unpredictable, never repeating) but not a call per id, so
//! each thread draws 4 KiB at a time and hands it out 16 bytes per id. Secrets (API keys,
//! salts) keep calling `Uuid::new_v4` directly.

use std::cell::RefCell;

/// Bytes drawn from the kernel per refill: 256 ids.
const POOL_BYTES: usize = 4096;

struct Pool {
    bytes: Box<[u8; POOL_BYTES]>,
    /// Bytes of `bytes` already handed out.
    used: usize,
}

thread_local! {
    static POOL: RefCell<Pool> = RefCell::new(Pool {
        bytes: Box::new([0; POOL_BYTES]),
        used: POOL_BYTES,
    });
}

/// Fills `buf` from the kernel's random source; false if it cannot.
fn fill(buf: &mut [u8]) -> bool {
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        // SAFETY: the pointer and length describe `rest`, which getrandom only writes into.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n > 0 {
            done += n as usize;
        } else if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
        {
            continue;
        } else {
            return false;
        }
    }
    true
}

/// A random (version 4) UUID.
pub fn request_id() -> uuid::Uuid {
    POOL.with(|pool| {
        let mut pool = pool.borrow_mut();
        if pool.used == POOL_BYTES {
            if !fill(&mut pool.bytes[..]) {
                return uuid::Uuid::new_v4();
            }
            pool.used = 0;
        }
        let mut b = [0u8; 16];
        let at = pool.used;
        b.copy_from_slice(&pool.bytes[at..at + 16]);
        pool.used += 16;
        uuid::Builder::from_random_bytes(b).into_uuid()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_version_4_and_distinct_across_refills() {
        let mut seen = std::collections::HashSet::new();
        // Three pools' worth, so that refills happen in between.
        for _ in 0..3 * POOL_BYTES / 16 {
            let id = request_id();
            assert_eq!(id.get_version_num(), 4);
            assert_eq!(id.get_variant(), uuid::Variant::RFC4122);
            assert!(seen.insert(id), "repeated id {id}");
        }
    }

    #[test]
    fn threads_draw_different_ids() {
        let a: Vec<_> = (0..64).map(|_| request_id()).collect();
        let b = std::thread::spawn(|| (0..64).map(|_| request_id()).collect::<Vec<_>>())
            .join()
            .unwrap();
        assert!(a.iter().all(|x| !b.contains(x)));
    }
}
