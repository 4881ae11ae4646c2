//! The zones' journals on disk (`DATA_DIR/rpz-journal/org-<id>.journal`), so that a secondary
//! that was current before a restart still gets IXFR after it.
//!
//! One file per zone, text, in records:
//! - `start <serial> <digest>|-`: the zone at `serial` (its digest known when no delta follows);
//! - `delta <from> <to> <digest> <removed> <added>`, then that many lines `-B name` / `-P name`
//!   and `+B name` / `+P name` (B blocks, P lets through), then `end`: the difference from one
//!   version to the next and the digest (SHA-256 of the triggers) of the version it leads to.
//!
//! A round appends the records of the versions it made; the file is rewritten whole (to a
//! temporary file renamed over it) when it holds about twice what the journal keeps, so that it
//! stays bounded without rewriting a large journal at every change. The files of a round are
//! synced together at its end (`files::Batch`: one pass of syncs, then the renames, then the
//! directory), so a round of every zone (the first) does not sync each file apart. A record cut
//! short by a crash is ignored (with what follows): the file then ends at the version before, and
//! is rewritten at the next change.
//!
//! After a restart the exporter's first round reads every list again: a zone whose triggers have
//! the digest of the last version on disk is that version, with its serial and its journal; any
//! other zone (its list changed while the server was down, on PostgreSQL by another node) gets a
//! new serial and an empty journal, and secondaries transfer it whole once.

use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::triggers::{Action, Delta, Entry, Triggers};
use crate::export::files;

/// A SHA-256 of a zone's triggers.
pub type Digest = [u8; 32];

/// The digest of a zone's triggers (sorted, as the zone holds them): each name and `\nB\n` or
/// `\nP\n`, gathered into blocks of `DIGEST_BLOCK` bytes before they are hashed (a call for each
/// piece of a million names cost more than the hashing).
pub fn digest(triggers: &Triggers) -> Digest {
    const DIGEST_BLOCK: usize = 64 * 1024;
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    let mut block = Vec::with_capacity(DIGEST_BLOCK + 256);
    for (name, action) in triggers.iter() {
        block.extend_from_slice(name.as_bytes());
        block.extend_from_slice(match action {
            Action::Block => b"\nB\n",
            Action::Passthru => b"\nP\n",
        });
        if block.len() >= DIGEST_BLOCK {
            ctx.update(&block);
            block.clear();
        }
    }
    ctx.update(&block);
    let mut d = [0u8; 32];
    d.copy_from_slice(ctx.finish().as_ref());
    d
}

fn hex(d: &Digest) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Digest> {
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    let mut d = [0u8; 32];
    for (i, b) in d.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(d)
}

/// A zone as its file left it.
#[derive(Debug)]
pub struct Restored {
    pub serial: u32,
    pub digest: Digest,
    /// Oldest first, each delta's `to` the next one's `from`, the last one's `serial`.
    pub journal: VecDeque<Arc<Delta>>,
    /// What the file holds, if it ends cleanly (no record cut short): a file that does not is
    /// rewritten at the next change.
    pub on_disk: Option<OnDisk>,
}

const HEADER: &str = "parasol rpz journal 1";

pub fn path(dir: &Path, org: i64) -> PathBuf {
    dir.join(format!("org-{org}.journal"))
}

fn org_of(name: &str) -> Option<i64> {
    name.strip_prefix("org-")?
        .strip_suffix(".journal")?
        .parse()
        .ok()
}

/// Every zone's file in `dir` (none if it does not exist); a file that cannot be read or does
/// not start with a complete record is left out (and logged).
pub fn load_all(dir: &Path) -> BTreeMap<i64, Restored> {
    let mut found = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(org) = org_of(&name) else {
            continue;
        };
        match std::fs::File::open(entry.path()).map(std::io::BufReader::new) {
            Ok(r) => match read(r) {
                Some(z) => {
                    found.insert(org, z);
                }
                None => log::warn!(
                    "rpz: {}: not a journal, ignored (the zone is transferred whole once)",
                    entry.path().display()
                ),
            },
            Err(e) => log::warn!("rpz: {}: {e}", entry.path().display()),
        }
    }
    found
}

fn parse_entry(line: &str) -> Option<(char, Entry)> {
    let mut chars = line.chars();
    let sign = chars.next()?;
    let action = match chars.next()? {
        'B' => Action::Block,
        'P' => Action::Passthru,
        _ => return None,
    };
    let name = chars.as_str().strip_prefix(' ')?;
    if name.is_empty() || name.contains(char::is_whitespace) {
        return None;
    }
    Some((sign, (Box::from(name), action)))
}

/// Reads one zone's file: `None` unless it starts with the header and a `start` record whose
/// digest is known or followed by a complete delta.
pub fn read(r: impl BufRead) -> Option<Restored> {
    let mut lines = r.lines();
    if lines.next()?.ok()? != HEADER {
        return None;
    }
    let start = lines.next()?.ok()?;
    let mut f = start.split(' ');
    if f.next()? != "start" {
        return None;
    }
    let serial: u32 = f.next()?.parse().ok()?;
    let digest = match f.next()? {
        "-" => None,
        d => Some(unhex(d)?),
    };
    let mut z = Restored {
        serial,
        digest: digest.unwrap_or_default(),
        journal: VecDeque::new(),
        on_disk: None,
    };
    let (mut records, mut entries, mut clean) = (1, 0, true);
    let mut known = digest.is_some();
    // A delta record, or None (and the file not clean) if it is cut short or malformed.
    let record = |head: &str, lines: &mut dyn Iterator<Item = std::io::Result<String>>| {
        let mut f = head.split(' ');
        if f.next()? != "delta" {
            return None;
        }
        let from: u32 = f.next()?.parse().ok()?;
        let to: u32 = f.next()?.parse().ok()?;
        let digest = unhex(f.next()?)?;
        let removed: usize = f.next()?.parse().ok()?;
        let added: usize = f.next()?.parse().ok()?;
        let mut delta = Delta {
            from,
            to,
            removed: Vec::with_capacity(removed.min(1 << 16)),
            added: Vec::with_capacity(added.min(1 << 16)),
        };
        for i in 0..removed + added {
            let line = lines.next()?.ok()?;
            let (sign, e) = parse_entry(&line)?;
            match (sign, i < removed) {
                ('-', true) => delta.removed.push(e),
                ('+', false) => delta.added.push(e),
                _ => return None,
            }
        }
        if lines.next()?.ok()? != "end" {
            return None;
        }
        Some((delta, digest))
    };
    while let Some(Ok(head)) = lines.next() {
        match record(&head, &mut lines) {
            Some((delta, digest)) if delta.from == z.serial => {
                z.serial = delta.to;
                z.digest = digest;
                records += 1;
                entries += size(&delta);
                z.journal.push_back(Arc::new(delta));
                known = true;
            }
            _ => {
                clean = false;
                break;
            }
        }
    }
    z.on_disk = clean.then_some(OnDisk {
        serial: z.serial,
        records,
        entries,
    });
    known.then_some(z)
}

fn write_delta(w: &mut impl Write, d: &Delta, digest: &Digest) -> std::io::Result<()> {
    writeln!(
        w,
        "delta {} {} {} {} {}",
        d.from,
        d.to,
        hex(digest),
        d.removed.len(),
        d.added.len()
    )?;
    for (sign, list) in [('-', &d.removed), ('+', &d.added)] {
        for (name, action) in list {
            let a = match action {
                Action::Block => 'B',
                Action::Passthru => 'P',
            };
            writeln!(w, "{sign}{a} {name}")?;
        }
    }
    writeln!(w, "end")
}

/// What is to be written of one zone after a round.
pub struct Save {
    pub serial: u32,
    pub digest: Digest,
    pub journal: Vec<Arc<Delta>>,
    /// What the file holds, cleanly: only the later versions are appended. `None`: the file is
    /// written whole.
    pub on_disk: Option<OnDisk>,
    /// The most the file may hold before it is rewritten whole.
    pub most: OnDisk,
}

/// The size of a zone's file: its last version, its records (the `start` one included), and
/// the triggers its deltas hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OnDisk {
    pub serial: u32,
    pub records: usize,
    pub entries: usize,
}

fn size(d: &Delta) -> usize {
    d.removed.len() + d.added.len()
}

/// Brings one zone's file up to date in `batch`; returns what it holds once the batch is
/// committed. Appends what is newer than the file's last version (synced by the commit), or
/// writes it whole (to a temporary file the commit renames over it) when it has no usable last
/// version, when the journal no longer reaches back to it, or when the file would grow past
/// `most`. Digests of the versions before the last are not kept: only the last one's counts
/// after a restart.
pub fn save(dir: &Path, org: i64, s: &Save, batch: &mut files::Batch) -> std::io::Result<OnDisk> {
    let path = path(dir, org);
    let append_from = s.on_disk.and_then(|disk| {
        let start = if disk.serial == s.serial {
            s.journal.len()
        } else {
            s.journal.iter().position(|d| d.from == disk.serial)?
        };
        let after = OnDisk {
            serial: s.serial,
            records: disk.records + s.journal.len() - start,
            entries: disk.entries + s.journal[start..].iter().map(|d| size(d)).sum::<usize>(),
        };
        (after.records <= s.most.records && after.entries <= s.most.entries)
            .then_some((start, after))
    });
    match append_from {
        Some((start, after)) => {
            if start < s.journal.len() {
                let f = std::fs::OpenOptions::new().append(true).open(&path)?;
                let mut w = std::io::BufWriter::with_capacity(256 * 1024, f);
                let last = s.journal.len() - 1;
                for (i, d) in s.journal.iter().enumerate().skip(start) {
                    // Only the last version's digest is known (and needed).
                    let digest = if i == last { s.digest } else { [0u8; 32] };
                    write_delta(&mut w, d, &digest)?;
                }
                w.into_inner().map_err(|e| e.into_error())?;
                batch.appended(&path);
            }
            Ok(after)
        }
        None => {
            batch.stage_with(&path, |w| {
                writeln!(w, "{HEADER}")?;
                match s.journal.first() {
                    None => writeln!(w, "start {} {}", s.serial, hex(&s.digest))?,
                    Some(first) => {
                        writeln!(w, "start {} -", first.from)?;
                        let last = s.journal.len() - 1;
                        for (i, d) in s.journal.iter().enumerate() {
                            let digest = if i == last { s.digest } else { [0u8; 32] };
                            write_delta(w, d, &digest)?;
                        }
                    }
                }
                Ok(())
            })?;
            Ok(OnDisk {
                serial: s.serial,
                records: 1 + s.journal.len(),
                entries: s.journal.iter().map(|d| size(d)).sum(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(v: &[(&str, Action)]) -> Vec<Entry> {
        v.iter().map(|(n, a)| (Box::from(*n), *a)).collect()
    }

    fn delta(from: u32, to: u32, removed: &[(&str, Action)], added: &[(&str, Action)]) -> Delta {
        Delta {
            from,
            to,
            removed: e(removed),
            added: e(added),
        }
    }

    /// `save`, committed at once.
    fn saved(dir: &Path, org: i64, s: &Save) -> std::io::Result<OnDisk> {
        let mut batch = files::Batch::default();
        let disk = save(dir, org, s, &mut batch)?;
        batch.commit(&[dir])?;
        Ok(disk)
    }

    const MOST: OnDisk = OnDisk {
        serial: 0,
        records: 8,
        entries: 100,
    };

    fn disk(serial: u32, records: usize, entries: usize) -> Option<OnDisk> {
        Some(OnDisk {
            serial,
            records,
            entries,
        })
    }

    #[test]
    fn a_journal_written_appended_and_read_back_is_the_same() {
        let dir = crate::testdir::TempDir::new("rpz-journal");
        let d1 = Arc::new(delta(10, 11, &[], &[("a.test", Action::Block)]));
        let d2 = Arc::new(delta(
            11,
            12,
            &[("a.test", Action::Block)],
            &[("a.test", Action::Passthru)],
        ));
        let first = Save {
            serial: 11,
            digest: digest(&Triggers::of_entries(&e(&[("a.test", Action::Block)]))),
            journal: vec![d1.clone()],
            on_disk: None,
            most: MOST,
        };
        assert_eq!(saved(&dir, 4, &first).unwrap(), disk(11, 2, 1).unwrap());
        let last = digest(&Triggers::of_entries(&e(&[("a.test", Action::Passthru)])));
        let second = Save {
            serial: 12,
            digest: last,
            journal: vec![d1, d2],
            on_disk: disk(11, 2, 1),
            most: MOST,
        };
        let size = std::fs::metadata(path(&dir, 4)).unwrap().len();
        assert_eq!(saved(&dir, 4, &second).unwrap(), disk(12, 3, 3).unwrap());
        // Appended: the file grew, its beginning kept.
        assert!(std::fs::metadata(path(&dir, 4)).unwrap().len() > size);
        let all = load_all(&dir);
        let z = &all[&4];
        assert_eq!((z.serial, z.digest, z.on_disk), (12, last, disk(12, 3, 3)));
        let serials: Vec<(u32, u32)> = z.journal.iter().map(|d| (d.from, d.to)).collect();
        assert_eq!(serials, vec![(10, 11), (11, 12)]);
        assert_eq!(z.journal[1].added, e(&[("a.test", Action::Passthru)]));
        // Past `most` records, written whole again: only what the journal holds.
        let third = Save {
            serial: 12,
            digest: last,
            journal: vec![second.journal[1].clone()],
            on_disk: disk(11, 8, 3),
            most: MOST,
        };
        assert_eq!(saved(&dir, 4, &third).unwrap(), disk(12, 2, 2).unwrap());
        let z = &load_all(&dir)[&4];
        assert_eq!((z.serial, z.journal.len(), z.journal[0].from), (12, 1, 11));
    }

    #[test]
    fn a_record_cut_short_ends_the_journal_at_the_version_before() {
        let dir = crate::testdir::TempDir::new("rpz-journal-torn");
        let one = Triggers::of_entries(&e(&[("a.test", Action::Block)]));
        let s = Save {
            serial: 11,
            digest: digest(&one),
            journal: vec![Arc::new(delta(10, 11, &[], &[("a.test", Action::Block)]))],
            on_disk: None,
            most: MOST,
        };
        saved(&dir, 9, &s).unwrap();
        let mut text = std::fs::read_to_string(path(&dir, 9)).unwrap();
        text.push_str(&format!(
            "delta 11 12 {} 0 2\n+B b.test\n",
            hex(&digest(&Triggers::default()))
        ));
        std::fs::write(path(&dir, 9), &text).unwrap();
        let z = &load_all(&dir)[&9];
        assert_eq!((z.serial, z.digest, z.on_disk), (11, digest(&one), None));
        // A start record without a digest and nothing after it tells nothing.
        std::fs::write(path(&dir, 9), format!("{HEADER}\nstart 5 -\n")).unwrap();
        assert!(load_all(&dir).is_empty());
        std::fs::write(path(&dir, 9), "something else\n").unwrap();
        assert!(load_all(&dir).is_empty());
    }

    /// The digest is that of the triggers' text, whatever the blocks it is hashed in: the same
    /// as the journals already on disk hold.
    #[test]
    fn the_digest_is_the_hash_of_the_triggers_text() {
        let two = Triggers::of_entries(&e(&[
            ("a.test", Action::Block),
            ("b.test", Action::Passthru),
        ]));
        assert_eq!(
            hex(&digest(&two)),
            "e4305259cd9b54f1f22fde011240bd64ed6c12afe68a3cea30726514999a92a2"
        );
        // Past several blocks.
        let names: Vec<String> = (0..20_000).map(|i| format!("n{i:05}.example")).collect();
        let many = Triggers::of_lists(names.iter().map(String::as_str), &[]).unwrap();
        let text: String = names.iter().map(|n| format!("{n}\nB\n")).collect();
        let whole = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
        assert_eq!(digest(&many).as_slice(), whole.as_ref());
    }
}
