//! HTTP Basic authentication of the management interface.
//!
//! Secrets are stored only as argon2id hashes. Verifying one costs tens of milliseconds by design,
//! so a successful verification is remembered in memory (per key and stored hash) and later
//! requests with the same secret compare in constant time instead. The credential row is read on
//! every request, so a revoked credential stops working at once.

use std::collections::HashMap;
use std::sync::Mutex;

use hyper::header::AUTHORIZATION;

use crate::error::MgmtError;
use crate::state::{AppState, RequestCtx};
use crate::store::Scope;

/// Remembered verifications: api key -> (stored hash, secret that verified against it).
type Remembered = HashMap<String, (String, Vec<u8>)>;
static VERIFIED: Mutex<Option<Remembered>> = Mutex::new(None);
/// Bound on remembered credentials; the map is cleared when it would grow past this.
const MAX_REMEMBERED: usize = 10_000;

/// Decodes standard base64 (with or without padding). `None` on any invalid character.
pub fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let s = s.trim_end_matches('=');
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for c in s.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | v as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    // A lone leftover sextet cannot come from whole bytes.
    if bits >= 6 {
        return None;
    }
    Some(out)
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

/// Compares two byte strings in time that depends only on their lengths.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Authenticates the request and returns the credential's scope, or 401.
pub async fn authenticate(state: &AppState, ctx: &RequestCtx) -> Result<Scope, MgmtError> {
    let Some((key, secret)) = basic_credentials(ctx) else {
        return Err(MgmtError::Unauthorized);
    };
    let stored = state.store.find_credential(key.clone()).await?;
    if let Some(cred) = &stored {
        let remembered = VERIFIED
            .lock()
            .ok()
            .and_then(|m| m.as_ref().and_then(|m| m.get(&key).cloned()));
        if let Some((hash, known)) = remembered {
            if hash == cred.secret_hash && constant_time_eq(&known, secret.as_bytes()) {
                return Ok(cred.scope);
            }
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
            if let Ok(mut guard) = VERIFIED.lock() {
                let map = guard.get_or_insert_with(HashMap::new);
                if map.len() >= MAX_REMEMBERED {
                    map.clear();
                }
                map.insert(key, (cred.secret_hash.clone(), secret.into_bytes()));
            }
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

    #[test]
    fn constant_time() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
