//! The console's sessions: kept in this process's memory only, each under a random 256-bit id
//! (the cookie's value) with its own CSRF token, the credential's scope, and two clocks: a
//! lifetime from sign-in and an idle time since the last request. The number of sessions is
//! bounded; when it is reached, signing in again removes the session idle the longest.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ring::rand::{SecureRandom, SystemRandom};
use subtle::ConstantTimeEq;

use crate::store::Scope;

/// How long sessions last and how many there may be (`ServerConfig::console`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    /// From sign-in, however active the session.
    pub lifetime: Duration,
    /// Since the session's last request.
    pub idle: Duration,
    /// Sessions kept at once.
    pub max: usize,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            lifetime: Duration::from_secs(8 * 3600),
            idle: Duration::from_secs(30 * 60),
            max: 1000,
        }
    }
}

/// What a live session gives a request.
#[derive(Debug, Clone)]
pub struct Session {
    pub scope: Scope,
    /// The token every form of the session carries, checked on every POST.
    pub csrf: String,
    /// The API key signed in with (shown, never the secret).
    pub api_key: String,
}

struct Entry {
    session: Session,
    started: Instant,
    seen: Instant,
}

/// The sessions of the process.
pub struct Sessions {
    limits: SessionLimits,
    map: Mutex<HashMap<String, Entry>>,
    random: SystemRandom,
}

/// 32 random bytes in lower-case hex; `None` if the system gave no randomness.
fn token(random: &SystemRandom) -> Option<String> {
    let mut bytes = [0u8; 32];
    random.fill(&mut bytes).ok()?;
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

impl Sessions {
    pub fn new(limits: SessionLimits) -> Sessions {
        Sessions {
            limits,
            map: Mutex::new(HashMap::new()),
            random: SystemRandom::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn live(&self, e: &Entry, now: Instant) -> bool {
        now.duration_since(e.started) < self.limits.lifetime
            && now.duration_since(e.seen) < self.limits.idle
    }

    /// Starts a session for a credential that verified; its id, or `None` without randomness.
    pub fn start(&self, scope: Scope, api_key: String) -> Option<String> {
        let id = token(&self.random)?;
        let csrf = token(&self.random)?;
        let now = Instant::now();
        let mut map = self.lock();
        map.retain(|_, e| self.live(e, now));
        if map.len() >= self.limits.max {
            let oldest = map
                .iter()
                .min_by_key(|(_, e)| e.seen)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                map.remove(&k);
            }
        }
        map.insert(
            id.clone(),
            Entry {
                session: Session {
                    scope,
                    csrf,
                    api_key,
                },
                started: now,
                seen: now,
            },
        );
        Some(id)
    }

    /// The live session with this id, its idle clock restarted; an expired one is removed.
    pub fn get(&self, id: &str) -> Option<Session> {
        let now = Instant::now();
        let mut map = self.lock();
        let e = map.get_mut(id)?;
        if !self.live(e, now) {
            map.remove(id);
            return None;
        }
        e.seen = now;
        Some(e.session.clone())
    }

    /// Ends a session (sign-out).
    pub fn end(&self, id: &str) {
        self.lock().remove(id);
    }

    /// Sessions held (expired ones included until they are next looked at).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Whether a form's token is the session's, compared in constant time.
pub fn csrf_matches(session: &Session, offered: &str) -> bool {
    offered.len() == session.csrf.len()
        && bool::from(offered.as_bytes().ct_eq(session.csrf.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_expire_are_bounded_and_end() {
        let s = Sessions::new(SessionLimits {
            lifetime: Duration::from_secs(3600),
            idle: Duration::from_secs(3600),
            max: 2,
        });
        let a = s.start(Scope::Organization(1), "a".into()).unwrap();
        assert_eq!(a.len(), 64);
        let b = s.start(Scope::Organization(2), "b".into()).unwrap();
        assert_ne!(a, b);
        // `b` is the more recently seen: a third session removes `a`.
        s.get(&b).unwrap();
        let c = s.start(Scope::Msp(3), "c".into()).unwrap();
        assert!(s.get(&a).is_none());
        assert!(s.get(&b).is_some() && s.get(&c).is_some());
        let session = s.get(&c).unwrap();
        assert!(csrf_matches(&session, &session.csrf.clone()));
        assert!(!csrf_matches(&session, ""));
        assert!(!csrf_matches(&session, &"0".repeat(64)));
        s.end(&c);
        assert!(s.get(&c).is_none());
        let zero = Sessions::new(SessionLimits {
            idle: Duration::ZERO,
            ..SessionLimits::default()
        });
        let d = zero.start(Scope::Organization(1), "d".into()).unwrap();
        assert!(zero.get(&d).is_none());
        assert!(zero.is_empty());
    }
}
