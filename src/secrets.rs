//! Secrets: management API secrets and user passwords are stored only as argon2id hashes
//! (salted, slow) and verified in constant time.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use ring::rand::{SecureRandom, SystemRandom};

/// A secret could not be hashed: the system gave no random salt, or argon2 refused. The
/// operation that wanted the hash must fail; there is no hash to store in its place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HashError(String);

impl std::fmt::Display for HashError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot hash a secret: {}", self.0)
    }
}

impl std::error::Error for HashError {}

/// Hashes a secret into a PHC string (argon2id, default parameters) with a fresh random salt
/// from the operating system.
pub fn try_hash(secret: &str) -> Result<String, HashError> {
    hash_salted(secret, |salt| {
        SystemRandom::new()
            .fill(salt)
            .map_err(|_| HashError("the system's random number generator failed".into()))
    })
}

/// [`try_hash`] with the salt's 16 bytes filled by `fill`.
fn hash_salted(
    secret: &str,
    fill: impl FnOnce(&mut [u8]) -> Result<(), HashError>,
) -> Result<String, HashError> {
    let mut salt = [0u8; 16];
    fill(&mut salt)?;
    let salt = SaltString::encode_b64(&salt).map_err(|e| HashError(e.to_string()))?;
    Argon2::default()
        .hash_password(secret.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| HashError(e.to_string()))
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
    DUMMY.get_or_init(|| {
        let secret = uuid::Uuid::new_v4().to_string();
        // Without randomness for a salt a fixed one serves: the dummy's secret is known to no
        // one either way. Argon2 refusing its default parameters (which it does not) would leave
        // unknown keys answered faster, never a secret accepted.
        try_hash(&secret)
            .or_else(|_| {
                hash_salted(&secret, |salt| {
                    salt.fill(0x5a);
                    Ok(())
                })
            })
            .unwrap_or_else(|e| {
                log::error!("{e}: unknown API keys are refused without the cost of a hash");
                String::new()
            })
    })
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
        let h = try_hash("s3cret").unwrap();
        assert!(h.starts_with("$argon2id$"));
        assert!(verify("s3cret", &h));
        assert!(!verify("s3cre", &h));
        assert!(!verify("s3cret", "not a hash"));
        assert_ne!(try_hash("s3cret").unwrap(), h, "salts differ");
        assert!(verify("x", &try_hash("x").unwrap()));
    }

    /// A failure to get a salt fails the hashing: no hash (empty or otherwise) comes out.
    #[test]
    fn no_salt_no_hash() {
        let failed = hash_salted("s3cret", |_| Err(HashError("no randomness".into())));
        assert_eq!(failed, Err(HashError("no randomness".into())));
        assert_eq!(
            failed.unwrap_err().to_string(),
            "cannot hash a secret: no randomness"
        );
        // The salt is what `fill` gave.
        let h = hash_salted("s3cret", |s| {
            s.fill(7);
            Ok(())
        })
        .unwrap();
        assert!(h.contains("$BwcHBwcHBwcHBwcHBwcHBw$"), "{h}");
        assert!(verify("s3cret", &h));
    }

    #[test]
    fn the_dummy_hash_is_a_real_hash_of_the_same_cost() {
        let dummy = PasswordHash::new(dummy_hash()).unwrap();
        let fresh = try_hash("x").unwrap();
        let fresh = PasswordHash::new(&fresh).unwrap();
        assert_eq!(dummy.algorithm, fresh.algorithm);
        assert_eq!(dummy.params, fresh.params);
        assert!(!verify("", dummy_hash()));
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
