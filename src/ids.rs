//! Ids handed out per request: random ones (a batch's id) without a system call each, and the
//! request id of every response (`X-Request-Id`, the management errors' `txId`).
//!
//! `Uuid::new_v4` asks the kernel for 16 random bytes every time: a `getrandom(2)` call per
//! accepted event request, about 1.4% of the server's CPU in the single-event benchmark. These
//! ids need the kernel's randomness (unpredictable, never repeating) but not a call per id, so
//! each thread draws 4 KiB at a time and hands it out 16 bytes per id. Secrets (API keys,
//! salts) keep calling `Uuid::new_v4` directly.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

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

/// The id of one request, in the hyphenated form of a UUID (the management interface's `txId`
/// is documented as one, and clients may check that): the process's random prefix, then a
/// counter.
///
/// Request ids need to be unique, not unpredictable: they are echoed to the client and written
/// to the log, and nothing is authorised by them. So instead of random bytes per request (a
/// `getrandom` call every 256 ids on the enforcement interface's fast path), the first 64 bits
/// are drawn once per process and the last 64 count the process's requests. Within a process the
/// counter never repeats; across restarts the prefix differs except with probability 2^-64 per
/// pair of processes (a time stamp would repeat after a clock step back, or for two processes
/// started in the same tick), so an id found in an old log names one request of one run.
#[derive(Clone, Copy)]
pub struct RequestId([u8; uuid::fmt::Hyphenated::LENGTH]);

static PREFIX: OnceLock<u64> = OnceLock::new();
static NEXT: AtomicU64 = AtomicU64::new(1);

impl RequestId {
    /// The next request id of this process.
    pub fn next() -> RequestId {
        let prefix = *PREFIX.get_or_init(|| request_id().as_u64_pair().0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
        uuid::Uuid::from_u64_pair(prefix, n)
            .hyphenated()
            .encode_lower(&mut text);
        RequestId(text)
    }

    pub fn as_str(&self) -> &str {
        // Hex digits and hyphens only (written by `encode_lower`).
        std::str::from_utf8(&self.0).unwrap_or_default()
    }

    /// The `X-Request-Id` header's value.
    pub fn header_value(&self) -> hyper::header::HeaderValue {
        hyper::header::HeaderValue::from_bytes(&self.0)
            .unwrap_or_else(|_| hyper::header::HeaderValue::from_static("-"))
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The header that carries a response's request id.
pub const X_REQUEST_ID: &str = "x-request-id";

/// `X_REQUEST_ID` as a header name made once: inserting the text would parse and check it again
/// for every answer.
pub const X_REQUEST_ID_NAME: hyper::header::HeaderName =
    hyper::header::HeaderName::from_static(X_REQUEST_ID);

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

    #[test]
    fn request_ids_are_uuid_shaped_unique_and_share_the_process_prefix() {
        let ids: Vec<String> = (0..1000).map(|_| RequestId::next().to_string()).collect();
        let other = std::thread::spawn(|| RequestId::next().to_string())
            .join()
            .unwrap();
        let mut seen = std::collections::HashSet::new();
        for id in ids.iter().chain([&other]) {
            let u = uuid::Uuid::parse_str(id).unwrap();
            assert_eq!(&u.hyphenated().to_string(), id);
            assert!(seen.insert(id.clone()), "repeated id {id}");
            assert_eq!(id[..18], ids[0][..18], "one prefix per process");
        }
        assert!(RequestId::next().header_value().to_str().is_ok());
    }
}
