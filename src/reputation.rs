//! Reputation data: the local reputation file (`domain,score`, score -1, 0 or 1) and the
//! known-good file (`domain` or `rank,domain`), their parsing, the acceptance checks that use them,
//! and reloading on SIGHUP (a bad file is refused whole and the old data stays in force).

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use crate::enforcement::domain::normalize;
use crate::names::self_and_parents;

/// A set of domain names, each with a small value, laid out for a million entries in a few tens
/// of MiB: every name lives in one byte arena (`[len][name][value]`), and an open-addressing
/// table of 32-bit arena offsets (with a byte of each name's hash beside them) finds them. A
/// `HashMap<Box<str>, i8>` spends about 80 bytes an entry on slots, pointers and allocator
/// overhead; this spends the name, two bytes and about 10 bytes of table.
#[derive(Debug, Default)]
pub struct NameTable {
    arena: Vec<u8>,
    /// 0 is empty; otherwise the entry's arena offset + 1. Length is 0 or a power of two.
    slots: Vec<u32>,
    /// One byte of each occupied slot's hash (never 0), 0 for an empty slot. A probe reads these
    /// first (consecutive bytes, mostly one cache line) and looks at a name in the arena (a cache
    /// miss in a table of millions) only when the byte matches: a name not in the table, the
    /// usual case, costs one miss instead of one per occupied slot passed.
    tags: Vec<u8>,
    len: usize,
}

impl NameTable {
    /// A table whose arena is pre-sized for about `bytes` of names.
    fn with_arena(bytes: usize) -> Self {
        NameTable {
            arena: Vec::with_capacity(bytes),
            ..Default::default()
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn hash(name: &[u8]) -> u64 {
        // FNV-1a, finished with a multiply so that the low bits (the slot) mix well. The names
        // come from the operator's files, not from clients, so a keyed hash is not needed.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in name {
            h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
        }
        (h ^ (h >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9)
    }

    fn name_at(&self, off: usize) -> &[u8] {
        let len = self.arena[off] as usize;
        &self.arena[off + 1..off + 1 + len]
    }

    /// The slot holding `name`, or the empty slot where it would go, and the name's tag.
    fn find(&self, name: &[u8]) -> (usize, u8) {
        let mask = self.slots.len() - 1;
        let h = Self::hash(name);
        // The top bits: the slot comes from the low ones.
        let tag = (h >> 57) as u8 | 0x80;
        let mut i = h as usize & mask;
        loop {
            match self.tags[i] {
                0 => return (i, tag),
                t if t == tag && self.name_at(self.slots[i] as usize - 1) == name => {
                    return (i, tag)
                }
                _ => i = (i + 1) & mask,
            }
        }
    }

    /// Adds `name` (a normalised name of at most 253 bytes) or replaces its value.
    pub fn insert(&mut self, name: &str, value: i8) {
        let name = name.as_bytes();
        debug_assert!(name.len() <= 255);
        if (self.len + 1) * 10 > self.slots.len() * 7 {
            self.grow();
        }
        let (i, tag) = self.find(name);
        if self.tags[i] != 0 {
            let off = self.slots[i] as usize - 1;
            let v = off + 1 + name.len();
            self.arena[v] = value as u8;
            return;
        }
        let off = self.arena.len();
        self.arena.push(name.len() as u8);
        self.arena.extend_from_slice(name);
        self.arena.push(value as u8);
        self.slots[i] = (off + 1) as u32;
        self.tags[i] = tag;
        self.len += 1;
    }

    fn grow(&mut self) {
        let size = (self.slots.len() * 2).max(1024);
        let old = std::mem::replace(&mut self.slots, vec![0; size]);
        self.tags = vec![0; size];
        for s in old.into_iter().filter(|&s| s != 0) {
            let (i, tag) = self.find(self.name_at(s as usize - 1));
            self.slots[i] = s;
            self.tags[i] = tag;
        }
    }

    /// The value stored for `name`.
    pub fn get(&self, name: &str) -> Option<i8> {
        if self.len == 0 {
            return None;
        }
        let name = name.as_bytes();
        let (i, _) = self.find(name);
        match self.tags[i] {
            0 => None,
            _ => Some(self.arena[self.slots[i] as usize + name.len()] as i8),
        }
    }

    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Returns unused capacity once loading is done.
    fn shrink(&mut self) {
        self.arena.shrink_to_fit();
    }
}

/// One loaded set of reputation data. Immutable; replaced whole on reload.
#[derive(Debug, Default)]
pub struct Reputation {
    scores: NameTable,
    known_good: NameTable,
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

    /// Reads and parses the given files, a line at a time (a million-line file is never held in
    /// memory whole). The error names the file and line.
    pub fn load(reputation: Option<&Path>, known_good: Option<&Path>) -> Result<Self, String> {
        // Errors name the flag that gave the file, so an operator knows which one to fix.
        let open = |flag: &str, p: &Path| {
            let f = std::fs::File::open(p).map_err(|e| format!("{flag} {}: {e}", p.display()))?;
            let size = f.metadata().map_or(0, |m| m.len() as usize);
            Ok::<_, String>((std::io::BufReader::with_capacity(64 * 1024, f), size))
        };
        let mut rep = Reputation::default();
        if let Some(p) = reputation {
            let (r, size) = open("--reputation", p)?;
            rep.scores = parse_lines(r, size, reputation_line)
                .map_err(|e| format!("--reputation {}: {e}", p.display()))?;
        }
        if let Some(p) = known_good {
            let (r, size) = open("--known-good", p)?;
            rep.known_good = parse_lines(r, size, known_good_line)
                .map_err(|e| format!("--known-good {}: {e}", p.display()))?;
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
        if self.scores.is_empty() {
            return true;
        }
        let score = self_and_parents(domain).find_map(|n| self.scores.get(n));
        score != Some(1)
    }
}

/// Strips a `#` comment and surrounding white space.
fn content(line: &str) -> &str {
    line.split('#').next().unwrap_or("").trim()
}

fn parse_domain(s: &str, lineno: usize) -> Result<String, String> {
    normalize(s.trim())
        .map_err(|_| format!("line {lineno}: {:?} is not a valid domain name", s.trim()))
}

/// Parses one line (without its comment) into a name and its value; the error names the line.
type LineParser = fn(&str, usize) -> Result<(String, i8), String>;

/// Parses the lines of `reader` with `line_fn` (which gets a line without its comment and
/// returns the name and its value) into a table.
fn parse_lines(
    mut reader: impl BufRead,
    size_hint: usize,
    line_fn: LineParser,
) -> Result<NameTable, String> {
    let mut table = NameTable::with_arena(size_hint);
    let mut line = String::new();
    let mut lineno = 0;
    loop {
        line.clear();
        lineno += 1;
        match reader.read_line(&mut line) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => return Err(format!("line {lineno}: {e}")),
        }
        let text = content(&line);
        if text.is_empty() {
            continue;
        }
        let (name, value) = line_fn(text, lineno)?;
        table.insert(&name, value);
    }
    table.shrink();
    Ok(table)
}

/// `domain,score`.
fn reputation_line(line: &str, lineno: usize) -> Result<(String, i8), String> {
    let (name, score) = line
        .split_once(',')
        .ok_or_else(|| format!("line {lineno}: expected domain,score"))?;
    let score: i8 = match score.trim() {
        "-1" => -1,
        "0" => 0,
        "1" | "+1" => 1,
        other => return Err(format!("line {lineno}: score {other:?} is not -1, 0 or 1")),
    };
    Ok((parse_domain(name, lineno)?, score))
}

/// `domain` or `rank,domain`.
fn known_good_line(line: &str, lineno: usize) -> Result<(String, i8), String> {
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
    Ok((parse_domain(name, lineno)?, 1))
}

/// Parses `domain,score` lines.
pub fn parse_reputation(text: &str) -> Result<NameTable, String> {
    parse_lines(text.as_bytes(), text.len(), reputation_line)
}

/// Parses `domain` or `rank,domain` lines.
pub fn parse_known_good(text: &str) -> Result<NameTable, String> {
    parse_lines(text.as_bytes(), text.len(), known_good_line)
}

/// The live reputation data and where it came from; `reload` swaps it atomically.
pub struct ReputationHandle {
    current: RwLock<Arc<Reputation>>,
    reputation_path: Option<PathBuf>,
    known_good_path: Option<PathBuf>,
    /// When the data in force was loaded (Unix seconds), and reloads refused since start: for
    /// the metrics, so that a reload that failed unnoticed shows.
    loaded_at: std::sync::atomic::AtomicU64,
    refused: std::sync::atomic::AtomicU64,
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl ReputationHandle {
    /// Loads the files once; an error here stops start-up.
    pub fn open(reputation: Option<PathBuf>, known_good: Option<PathBuf>) -> Result<Self, String> {
        let rep = Reputation::load(reputation.as_deref(), known_good.as_deref())?;
        Ok(ReputationHandle {
            current: RwLock::new(Arc::new(rep)),
            reputation_path: reputation,
            known_good_path: known_good,
            loaded_at: unix_now().into(),
            refused: 0.into(),
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
        use std::sync::atomic::Ordering;
        let rep = Reputation::load(
            self.reputation_path.as_deref(),
            self.known_good_path.as_deref(),
        )
        .inspect_err(|_| {
            self.refused.fetch_add(1, Ordering::Relaxed);
        })?;
        let counts = rep.counts();
        match self.current.write() {
            Ok(mut g) => *g = Arc::new(rep),
            Err(poisoned) => *poisoned.into_inner() = Arc::new(rep),
        }
        self.loaded_at.store(unix_now(), Ordering::Relaxed);
        Ok(counts)
    }

    /// When the data in force was loaded, Unix seconds.
    pub fn loaded_at(&self) -> u64 {
        self.loaded_at.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Reloads refused (a file with a bad line, or unreadable) since start.
    pub fn reloads_refused(&self) -> u64 {
        self.refused.load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_in_order() {
        let rep = Reputation::from_texts(
            Some("# scores\nbad.example,-1\nsafe.example,1\nunknown.example,0\nsub.safe.example,-1\npopular.example,-1\nx.cdn.example,-1\n"),
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
        assert!(
            !rep.accepts("popular.example", false),
            "known good (step 2) comes before its -1 score (step 3)"
        );
        assert!(!rep.accepts("img.cdn.example", false), "known-good parent");
        assert!(
            !rep.accepts("x.cdn.example", false),
            "a known-good parent comes before the name's own -1"
        );
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
    fn name_table_matches_a_hash_map() {
        let mut t = NameTable::default();
        let mut m = std::collections::HashMap::new();
        for i in 0..20_000u32 {
            let name = format!("n{}.example", i.wrapping_mul(2_654_435_761) % 5000);
            let v = (i % 3) as i8 - 1;
            t.insert(&name, v);
            m.insert(name, v);
        }
        assert_eq!(t.len(), m.len());
        for (k, v) in &m {
            assert_eq!(t.get(k), Some(*v), "{k}");
        }
        assert_eq!(t.get("absent.example"), None);
        assert_eq!(NameTable::default().get("a.example"), None);
    }

    #[test]
    fn reload_keeps_old_data_on_error() {
        let dir = crate::testdir::TempDir::new("rep");
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
    }

    #[test]
    fn reload_is_all_or_nothing() {
        let dir = crate::testdir::TempDir::new("rep-both");
        let (rep, good) = (dir.join("rep.csv"), dir.join("good.txt"));
        std::fs::write(&rep, "safe.example,1\n").unwrap();
        std::fs::write(&good, "popular.example\n").unwrap();
        let h = ReputationHandle::open(Some(rep.clone()), Some(good.clone())).unwrap();
        assert!(!h.get().accepts("safe.example", false));
        // A good reputation file with a bad known-good file: neither changes.
        std::fs::write(&rep, "safe.example,-1\n").unwrap();
        std::fs::write(&good, "1,popular.example,extra,\n").unwrap();
        assert!(h.reload().is_err());
        assert!(
            !h.get().accepts("safe.example", false),
            "old scores in force"
        );
        assert!(
            !h.get().accepts("popular.example", false),
            "old known-good in force"
        );
        std::fs::write(&good, "other.example\n").unwrap();
        assert_eq!(h.reload().unwrap(), (1, 1));
        assert!(h.get().accepts("safe.example", false));
        assert!(h.get().accepts("popular.example", false));
    }
}
