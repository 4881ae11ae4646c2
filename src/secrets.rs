//! Secrets: management API secrets and user passwords are stored only as argon2id hashes
//! (salted, slow) and verified in constant time.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;

/// Hashes a secret into a PHC string with a fresh random salt.
pub fn hash(secret: &str) -> String {
    let salt_bytes = *uuid::Uuid::new_v4().as_bytes();
    // A SaltString from 16 random bytes cannot fail to encode.
    let salt = SaltString::encode_b64(&salt_bytes)
        .unwrap_or_else(|_| SaltString::from_b64("c2FsdHNhbHRzYWx0").expect("static salt"));
    Argon2::default()
        .hash_password(secret.as_bytes(), &salt)
        .map(|h| h.to_string())
        .unwrap_or_default()
}

/// Verifies a secret against a stored PHC string. Argon2's comparison is constant-time.
pub fn verify(secret: &str, phc: &str) -> bool {
    match PasswordHash::new(phc) {
        Ok(parsed) => Argon2::default()
            .verify_password(secret.as_bytes(), &parsed)
            .is_ok(),
        Err(_) => false,
    }
}

/// A hash of a random secret with the same parameters as real ones. Verifying against it when a
/// key does not exist costs the same time as a real verification.
// SECURITY: without this, a wrong password for a missing key would answer faster than for a real
// key, telling an attacker which API keys exist.
pub fn dummy_hash() -> &'static str {
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DUMMY.get_or_init(|| hash(&uuid::Uuid::new_v4().to_string()))
}

/// Runs a hash computation or verification off the async runtime, at most as many at once as the
/// machine has cores.
// SECURITY: each argon2 run holds about 19 MiB for tens of milliseconds. Unbounded, a flood of
// requests with wrong Basic credentials would run hundreds at once and exhaust memory; bounded,
// it only queues.
pub async fn run_limited<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    static LIMIT: std::sync::OnceLock<tokio::sync::Semaphore> = std::sync::OnceLock::new();
    let limit = LIMIT.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        tokio::sync::Semaphore::new(cores)
    });
    let _permit = limit.acquire().await.ok()?;
    tokio::task::spawn_blocking(f).await.ok()
}

/// A new random API key (32 hex digits) and secret (64 hex digits).
pub fn new_key_pair() -> (String, String) {
    let key = uuid::Uuid::new_v4().simple().to_string();
    let secret = format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    (key, secret)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_verifies_only_the_right_secret() {
        let h = hash("s3cret");
        assert!(h.starts_with("$argon2id$"));
        assert!(verify("s3cret", &h));
        assert!(!verify("s3cre", &h));
        assert!(!verify("s3cret", "not a hash"));
        assert_ne!(hash("s3cret"), h, "salts differ");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn at_most_one_hash_per_core_at_once() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        let now = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..24)
            .map(|_| {
                let (now, peak) = (now.clone(), peak.clone());
                tokio::spawn(run_limited(move || {
                    let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(n, Ordering::SeqCst);
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    now.fetch_sub(1, Ordering::SeqCst);
                }))
            })
            .collect();
        for t in tasks {
            assert!(t.await.unwrap().is_some());
        }
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let peak = peak.load(Ordering::SeqCst);
        assert!(peak >= 1 && peak <= cores, "peak {peak} with {cores} cores");
    }
}
