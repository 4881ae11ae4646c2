//! Reputation data: the local reputation file (`domain,score`, score -1, 0 or 1) and the
//! known-good file (`domain` or `rank,domain`), their parsing, the acceptance checks that use them,
//! and reloading on SIGHUP (a bad file is refused whole and the old data stays in force).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use crate::enforcement::domain::{normalize, self_and_parents};

/// One loaded set of reputation data. Immutable; replaced whole on reload.
#[derive(Debug, Default)]
pub struct Reputation {
    scores: HashMap<Box<str>, i8>,
    known_good: HashSet<Box<str>>,
}

impl Reputation {
    /// Builds from file contents (used by tests and `load`).
    pub fn from_texts(reputation: Option<&str>, known_good: Option<&str>) -> Result<Self, String> {
        let mut rep = Reputation::default();
        if let Some(text) = reputation {
            rep.scores = parse_reputation(text)?;
        }
        if let Some(text) = known_good {
            rep.known_good = parse_known_good(text)?;
        }
        Ok(rep)
    }

    /// Reads and parses the given files. The error names the file and line.
    pub fn load(reputation: Option<&Path>, known_good: Option<&Path>) -> Result<Self, String> {
        let read =
            |p: &Path| std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()));
        let rep_text = reputation.map(read).transpose()?;
        let good_text = known_good.map(read).transpose()?;
        let mut rep = Reputation::default();
        if let (Some(p), Some(t)) = (reputation, &rep_text) {
            rep.scores = parse_reputation(t).map_err(|e| format!("{}: {e}", p.display()))?;
        }
        if let (Some(p), Some(t)) = (known_good, &good_text) {
            rep.known_good = parse_known_good(t).map_err(|e| format!("{}: {e}", p.display()))?;
        }
        Ok(rep)
    }

    /// Sizes, for the log.
    pub fn counts(&self) -> (usize, usize) {
        (self.scores.len(), self.known_good.len())
    }

    /// The acceptance checks of decisions.md, in order: does this (normalised) domain join the
    /// customer's domain list?
    pub fn accepts(&self, domain: &str, disable_safeguards: bool) -> bool {
        // 1. Safeguards off: no known-good comparison, no reputation lookup.
        if disable_safeguards {
            return true;
        }
        // 2. Known good: the name or a parent (not a bare TLD).
        if !self.known_good.is_empty()
            && self_and_parents(domain).any(|n| self.known_good.contains(n))
        {
            return false;
        }
        // 2/3. Reputation: the nearest entry wins; +1 is known safe, -1 and 0 (or none) are added.
        let score = self_and_parents(domain).find_map(|n| self.scores.get(n).copied());
        score != Some(1)
    }
}

/// Strips a `#` comment and surrounding white space.
fn content(line: &str) -> &str {
    line.split('#').next().unwrap_or("").trim()
}

fn parse_domain(s: &str, lineno: usize) -> Result<Box<str>, String> {
    normalize(s.trim())
        .map(String::into_boxed_str)
        .map_err(|_| format!("line {lineno}: {:?} is not a valid domain name", s.trim()))
}

/// Parses `domain,score` lines.
pub fn parse_reputation(text: &str) -> Result<HashMap<Box<str>, i8>, String> {
    let mut map = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let lineno = i + 1;
        let line = content(line);
        if line.is_empty() {
            continue;
        }
        let (name, score) = line
            .split_once(',')
            .ok_or_else(|| format!("line {lineno}: expected domain,score"))?;
        let score: i8 = match score.trim() {
            "-1" => -1,
            "0" => 0,
            "1" | "+1" => 1,
            other => return Err(format!("line {lineno}: score {other:?} is not -1, 0 or 1")),
        };
        map.insert(parse_domain(name, lineno)?, score);
    }
    Ok(map)
}

/// Parses `domain` or `rank,domain` lines.
pub fn parse_known_good(text: &str) -> Result<HashSet<Box<str>>, String> {
    let mut set = HashSet::new();
    for (i, line) in text.lines().enumerate() {
        let lineno = i + 1;
        let line = content(line);
        if line.is_empty() {
            continue;
        }
        let name = match line.split_once(',') {
            Some((rank, name)) => {
                if rank.trim().parse::<u64>().is_err() {
                    return Err(format!(
                        "line {lineno}: rank {:?} is not a number",
                        rank.trim()
                    ));
                }
                name
            }
            None => line,
        };
        set.insert(parse_domain(name, lineno)?);
    }
    Ok(set)
}

/// The live reputation data and where it came from; `reload` swaps it atomically.
pub struct ReputationHandle {
    current: RwLock<Arc<Reputation>>,
    reputation_path: Option<PathBuf>,
    known_good_path: Option<PathBuf>,
}

impl ReputationHandle {
    /// Loads the files once; an error here stops start-up.
    pub fn open(reputation: Option<PathBuf>, known_good: Option<PathBuf>) -> Result<Self, String> {
        let rep = Reputation::load(reputation.as_deref(), known_good.as_deref())?;
        Ok(ReputationHandle {
            current: RwLock::new(Arc::new(rep)),
            reputation_path: reputation,
            known_good_path: known_good,
        })
    }

    /// The data in force now.
    pub fn get(&self) -> Arc<Reputation> {
        match self.current.read() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Re-reads the files; on any error the old data stays and the error is returned.
    pub fn reload(&self) -> Result<(usize, usize), String> {
        let rep = Reputation::load(
            self.reputation_path.as_deref(),
            self.known_good_path.as_deref(),
        )?;
        let counts = rep.counts();
        match self.current.write() {
            Ok(mut g) => *g = Arc::new(rep),
            Err(poisoned) => *poisoned.into_inner() = Arc::new(rep),
        }
        Ok(counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_in_order() {
        let rep = Reputation::from_texts(
            Some("# scores\nbad.example,-1\nsafe.example,1\nunknown.example,0\nsub.safe.example,-1\n"),
            Some("1,popular.example\n2,cdn.example  # trailing comment\nlisted.test\n"),
        )
        .unwrap();
        assert!(rep.accepts("bad.example", false), "-1 is added");
        assert!(rep.accepts("unknown.example", false), "0 is added");
        assert!(rep.accepts("never.seen.example", false), "absent is added");
        assert!(!rep.accepts("safe.example", false), "+1 is not added");
        assert!(!rep.accepts("www.safe.example", false), "+1 of the parent");
        assert!(
            rep.accepts("x.sub.safe.example", false),
            "nearest entry (-1) wins over the +1 parent"
        );
        assert!(!rep.accepts("popular.example", false), "known good");
        assert!(!rep.accepts("img.cdn.example", false), "known-good parent");
        assert!(!rep.accepts("listed.test", false));
        assert!(
            rep.accepts("a.example", false),
            "a bare TLD entry is never consulted"
        );
        assert!(rep.accepts("safe.example", true), "safeguards off");
        assert!(rep.accepts("popular.example", true), "safeguards off");
    }

    #[test]
    fn bad_lines_are_named() {
        assert_eq!(
            parse_reputation("a.example,1\nb.example,2\n").unwrap_err(),
            "line 2: score \"2\" is not -1, 0 or 1"
        );
        assert!(parse_reputation("a.example\n")
            .unwrap_err()
            .starts_with("line 1"));
        assert!(parse_reputation("\n\nnot a domain,1\n")
            .unwrap_err()
            .starts_with("line 3"));
        assert!(
            parse_reputation("example,1\n")
                .unwrap_err()
                .starts_with("line 1"),
            "a bare TLD is no entry"
        );
        assert!(parse_known_good("x,a.example\n")
            .unwrap_err()
            .starts_with("line 1"));
        assert!(parse_known_good("1,http://a\n")
            .unwrap_err()
            .starts_with("line 1"));
        assert_eq!(parse_known_good("A.Example.\n").unwrap().len(), 1);
    }

    #[test]
    fn reload_keeps_old_data_on_error() {
        let dir = std::env::temp_dir().join(format!("parasol-rep-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("rep.csv");
        std::fs::write(&path, "safe.example,1\n").unwrap();
        let h = ReputationHandle::open(Some(path.clone()), None).unwrap();
        assert!(!h.get().accepts("safe.example", false));
        std::fs::write(&path, "safe.example,7\n").unwrap();
        assert!(h.reload().is_err());
        assert!(!h.get().accepts("safe.example", false), "old data in force");
        std::fs::write(&path, "safe.example,0\n").unwrap();
        assert_eq!(h.reload().unwrap(), (1, 0));
        assert!(h.get().accepts("safe.example", false));
        let _ = std::fs::remove_dir_all(dir);
    }
}
