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
}
