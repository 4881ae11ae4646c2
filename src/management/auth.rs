//! HTTP Basic authentication of the management interface.
//!
//! Secrets are stored only as argon2id hashes. Verifying one costs tens of milliseconds by design,
//! so a successful verification is remembered in memory (per key and stored hash) and later
//! requests with the same secret compare in constant time instead. The credential row is read on
//! every request, so a revoked credential stops working at once.
//!
//! What is remembered is not the secret but an HMAC-SHA256 tag of it, under a random key made
//! once per process and never written anywhere: a copy of the process's memory (a core dump, a
//! swapped page) shows no secret, and the tags are worthless to anyone without the key.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine as _;
use hyper::header::AUTHORIZATION;
use ring::hmac;
use subtle::ConstantTimeEq;

use crate::error::MgmtError;
use crate::state::{AppState, RequestCtx};
use crate::store::Scope;

/// Remembered verifications: api key -> (stored hash, tag of the secret that verified).
type Remembered = HashMap<String, (String, hmac::Tag)>;
static VERIFIED: Mutex<Option<Remembered>> = Mutex::new(None);
/// Bound on remembered credentials; the map is cleared when it would grow past this.
const MAX_REMEMBERED: usize = 10_000;

/// The process's key for the tags; `None` if the system gave no randomness for one, and then
/// nothing is remembered (every request pays for argon2).
fn tag_key() -> Option<&'static hmac::Key> {
    static KEY: OnceLock<Option<hmac::Key>> = OnceLock::new();
    KEY.get_or_init(|| {
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &ring::rand::SystemRandom::new());
        if key.is_err() {
            log::warn!("no randomness for the credential cache's key: every request is verified with argon2");
        }
        key.ok()
    })
    .as_ref()
}

/// The tag remembered for a secret (keyed by the process's key), if there is a key.
fn tag(secret: &[u8]) -> Option<hmac::Tag> {
    tag_key().map(|k| hmac::sign(k, secret))
}

/// Whether `secret` is the one remembered for `api_key` with this stored hash. The tags are
/// compared in constant time.
fn recall(api_key: &str, stored_hash: &str, secret: &[u8]) -> bool {
    let Some(offered) = tag(secret) else {
        return false;
    };
    let Ok(guard) = VERIFIED.lock() else {
        return false;
    };
    match guard.as_ref().and_then(|m| m.get(api_key)) {
        Some((hash, known)) => {
            hash == stored_hash && bool::from(known.as_ref().ct_eq(offered.as_ref()))
        }
        None => false,
    }
}

/// Remembers that `secret` verified against `stored_hash` for `api_key`.
fn remember(api_key: String, stored_hash: String, secret: &[u8]) {
    let Some(t) = tag(secret) else {
        return;
    };
    if let Ok(mut guard) = VERIFIED.lock() {
        let map = guard.get_or_insert_with(HashMap::new);
        if map.len() >= MAX_REMEMBERED {
            map.clear();
        }
        map.insert(api_key, (stored_hash, t));
    }
}

/// Standard base64, with or without padding, as clients send it in `Authorization: Basic`.
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true),
);

/// Decodes standard base64 (with or without padding). `None` on any invalid character.
pub fn base64_decode(s: &str) -> Option<Vec<u8>> {
    BASE64.decode(s).ok()
}

/// Splits `Authorization: Basic ...` into key and secret.
pub fn basic_credentials(ctx: &RequestCtx) -> Option<(String, String)> {
    let value = ctx.headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, rest) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = String::from_utf8(base64_decode(rest.trim())?).ok()?;
    let (key, secret) = decoded.split_once(':')?;
    Some((key.to_string(), secret.to_string()))
}

/// Authenticates the request and returns the credential's scope, or 401.
pub async fn authenticate(state: &AppState, ctx: &RequestCtx) -> Result<Scope, MgmtError> {
    let Some((key, secret)) = basic_credentials(ctx) else {
        return Err(MgmtError::Unauthorized);
    };
    verify(state, key, secret).await
}

/// Checks an API key and secret (from HTTP Basic, or the console's sign-in form) and returns the
/// credential's scope, or 401.
pub async fn verify(state: &AppState, key: String, secret: String) -> Result<Scope, MgmtError> {
    let stored = state.store.find_credential(key.clone()).await?;
    if let Some(cred) = &stored {
        if recall(&key, &cred.secret_hash, secret.as_bytes()) {
            return Ok(cred.scope);
        }
    }
    // SECURITY: a missing key is verified against a dummy hash, so that a wrong password costs the
    // same time whether or not the key exists.
    let hash = stored
        .as_ref()
        .map(|c| c.secret_hash.clone())
        .unwrap_or_else(|| crate::secrets::dummy_hash().to_string());
    let check_secret = secret.clone();
    let ok = crate::secrets::run_limited(move || crate::secrets::verify(&check_secret, &hash))
        .await
        .unwrap_or(false);
    match stored {
        Some(cred) if ok => {
            remember(key, cred.secret_hash.clone(), secret.as_bytes());
            Ok(cred.scope)
        }
        _ => Err(MgmtError::Unauthorized),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64() {
        assert_eq!(base64_decode("a2V5OnNlY3JldA==").unwrap(), b"key:secret");
        assert_eq!(base64_decode("a2V5OnNlY3JldA").unwrap(), b"key:secret");
        assert_eq!(base64_decode("").unwrap(), b"");
        assert!(base64_decode("a2V5$").is_none());
        assert!(base64_decode("a").is_none());
    }

    /// Only the secret that verified is recalled, only with the same stored hash, and the map
    /// holds a keyed tag, never the secret.
    #[test]
    fn remembered_credentials_hold_no_secret() {
        let key = format!("k-{}", uuid::Uuid::new_v4());
        let secret = b"0123456789abcdef0123456789abcdef";
        assert!(!recall(&key, "h1", secret));
        remember(key.clone(), "h1".into(), secret);
        assert!(recall(&key, "h1", secret));
        assert!(!recall(&key, "h1", b"0123456789abcdef0123456789abcdeF"));
        assert!(!recall(&key, "h1", b""));
        assert!(
            !recall(&key, "h2", secret),
            "a rotated secret is verified anew"
        );
        assert!(!recall("another key", "h1", secret));
        let guard = VERIFIED.lock().unwrap();
        let (hash, t) = guard.as_ref().unwrap().get(&key).unwrap();
        assert_eq!(hash, "h1");
        let stored = t.as_ref();
        assert_eq!(stored.len(), 32);
        assert!(!stored.windows(8).any(|w| secret.windows(8).any(|s| s == w)));
        // The tag is keyed: not a plain digest of the secret.
        let plain = ring::digest::digest(&ring::digest::SHA256, secret);
        assert_ne!(stored, plain.as_ref());
    }
}
