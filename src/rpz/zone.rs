//! The zones in memory: each organization's effective block list as sorted triggers, its serial, and a journal of the differences between its recent versions (what IXFR sends), kept on disk too (`super::journal`) so that IXFR works across restarts.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::journal::{self, Digest, OnDisk, Restored};
pub use super::triggers::{Action, Delta, Entry, Triggers};
use crate::export::formats::{next_serial, serial_after};

/// A journal reaches back at most this many versions, and holds at most this many changed
/// triggers in all (or the zone's size, when larger): beyond that a full transfer is as cheap.
const JOURNAL_VERSIONS: usize = 256;
const JOURNAL_ENTRIES: usize = 100_000;

/// One organization's zone.
#[derive(Debug)]
pub struct Zone {
    pub serial: u32,
    /// Sorted by name, each name once.
    pub entries: Arc<Triggers>,
    /// Oldest first; each delta's `to` is the next one's `from`, the last one's the serial.
    journal: VecDeque<Arc<Delta>>,
    journal_entries: usize,
    /// The triggers' digest (`journal::digest`).
    digest: Digest,
    /// What its file holds, if it is current up to some version.
    on_disk: Option<OnDisk>,
}

/// What an IXFR from a secondary's serial gets.
pub enum Transfer {
    /// The secondary is current (or ahead): the SOA alone.
    Current,
    /// The differences since its serial, oldest first.
    Deltas(Vec<Arc<Delta>>),
    /// The whole zone (the journal does not reach back that far).
    Full,
}

impl Zone {
    /// The versions from `serial` to the current one, if the journal reaches back to it.
    fn since(&self, serial: u32) -> Transfer {
        if !serial_after(self.serial, serial) {
            return Transfer::Current;
        }
        let Some(start) = self.journal.iter().position(|d| d.from == serial) else {
            return Transfer::Full;
        };
        let deltas = self.journal.iter().skip(start).cloned().collect();
        Transfer::Deltas(deltas)
    }
}

/// Every organization's zone, and the serial of the last change.
pub struct Zones {
    inner: Mutex<State>,
    /// Where the last serial handed out is kept, so that serials keep growing across restarts.
    serial_file: Option<PathBuf>,
    /// Where the zones' journals are kept (`None`: in memory only).
    journal_dir: Option<PathBuf>,
}

struct State {
    zones: BTreeMap<i64, Zone>,
    /// The last serial handed out (to any zone).
    last: u32,
    /// The serial of the round in progress, once one of its zones changed.
    round: Option<u32>,
    /// The zones as their files left them at start, until the first round has seen them.
    restored: BTreeMap<i64, Restored>,
    /// Zones whose files are behind (changed, new) or to be removed (gone).
    dirty: BTreeSet<i64>,
}

impl Zones {
    /// No zones yet, none kept on disk; serials start above the clock.
    pub fn in_memory() -> Zones {
        Zones::with_files(None, None)
    }

    /// No zones yet; serials start above the one kept in `DATA_DIR/rpz-serial` and above the
    /// clock, and the journals of `DATA_DIR/rpz-journal/` are taken back by the first round for
    /// the zones that have not changed since.
    pub fn in_data_dir(data_dir: &Path) -> Zones {
        Zones::with_files(
            Some(data_dir.join("rpz-serial")),
            Some(data_dir.join("rpz-journal")),
        )
    }

    fn with_files(serial_file: Option<PathBuf>, journal_dir: Option<PathBuf>) -> Zones {
        let kept = serial_file
            .as_ref()
            .and_then(|f| std::fs::read_to_string(f).ok())
            .and_then(|t| t.trim().parse::<u32>().ok());
        let restored = journal_dir
            .as_deref()
            .map(journal::load_all)
            .unwrap_or_default();
        Zones {
            inner: Mutex::new(State {
                zones: BTreeMap::new(),
                last: kept.unwrap_or(0),
                round: None,
                restored,
                dirty: BTreeSet::new(),
            }),
            serial_file,
            journal_dir,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The serial of the changes of the round in progress: one more than the last, or the clock
    /// when later; kept on disk before any secondary can see it.
    fn round_serial(&self, state: &mut State) -> Result<u32, String> {
        if let Some(s) = state.round {
            return Ok(s);
        }
        let serial = next_serial(
            (state.last != 0).then_some(state.last),
            crate::timefmt::now(),
        );
        if let Some(f) = &self.serial_file {
            crate::export::files::write_atomically(f, format!("{serial}\n").as_bytes())?;
        }
        state.last = serial;
        state.round = Some(serial);
        Ok(serial)
    }

    /// The organization's effective block list is now this: returns whether its zone changed
    /// (a new zone counts as changed).
    pub fn update(&self, org: i64, entries: Triggers) -> Result<bool, String> {
        let mut state = self.state();
        let (removed, added) = match state.zones.get(&org) {
            Some(z) => z.entries.diff(&entries),
            None => (Vec::new(), Vec::new()),
        };
        let exists = state.zones.contains_key(&org);
        if exists && removed.is_empty() && added.is_empty() {
            return Ok(false);
        }
        let digest = journal::digest(&entries);
        if !exists {
            // The version its file left, if the list has not changed since: same serial, same
            // journal.
            if let Some(r) = state.restored.remove(&org).filter(|r| r.digest == digest) {
                let journal_entries = r.journal.iter().map(|d| d.removed.len() + d.added.len());
                let zone = Zone {
                    serial: r.serial,
                    entries: Arc::new(entries),
                    journal_entries: journal_entries.sum(),
                    journal: r.journal,
                    digest,
                    on_disk: r.on_disk,
                };
                if zone.on_disk.is_none() {
                    state.dirty.insert(org);
                }
                state.zones.insert(org, zone);
                return Ok(true);
            }
        }
        self.change(&mut state, org, removed, added, entries, digest)?;
        Ok(true)
    }

    /// The organization's effective block list changed by this: `removed` triggers taken out
    /// (each one in the zone) and `added` ones put in (each name not in the zone, or in it with
    /// the other action and among `removed`). The zone's triggers are merged with the change
    /// rather than compared with a whole new list, so a round costs the change and one pass over
    /// the zone. Returns whether the zone changed; `false` for an organization without a zone
    /// (`update` makes it).
    pub fn apply(
        &self,
        org: i64,
        mut removed: Vec<Entry>,
        mut added: Vec<Entry>,
    ) -> Result<bool, String> {
        if removed.is_empty() && added.is_empty() {
            return Ok(false);
        }
        removed.sort();
        added.sort();
        // Merged outside the lock: transfers keep reading the zone meanwhile (only the
        // exporter's task changes zones, one round at a time).
        let Some((_, old)) = self.snapshot(org) else {
            return Ok(false);
        };
        let entries = old.merged(&removed, &added)?;
        drop(old);
        let digest = journal::digest(&entries);
        let mut state = self.state();
        self.change(&mut state, org, removed, added, entries, digest)?;
        Ok(true)
    }

    /// Records a zone's new version: a new serial for the round, the difference journaled.
    fn change(
        &self,
        state: &mut State,
        org: i64,
        removed: Vec<Entry>,
        added: Vec<Entry>,
        entries: Triggers,
        digest: Digest,
    ) -> Result<(), String> {
        let serial = self.round_serial(state)?;
        let entries = Arc::new(entries);
        state.dirty.insert(org);
        match state.zones.get_mut(&org) {
            Some(zone) => {
                let size = removed.len() + added.len();
                zone.journal.push_back(Arc::new(Delta {
                    from: zone.serial,
                    to: serial,
                    removed,
                    added,
                }));
                zone.journal_entries += size;
                let cap = JOURNAL_ENTRIES.max(entries.len());
                while zone.journal.len() > JOURNAL_VERSIONS
                    || (zone.journal_entries > cap && zone.journal.len() > 1)
                {
                    if let Some(d) = zone.journal.pop_front() {
                        zone.journal_entries -= d.removed.len() + d.added.len();
                    }
                }
                zone.serial = serial;
                zone.entries = entries;
                zone.digest = digest;
            }
            None => {
                state.zones.insert(
                    org,
                    Zone {
                        serial,
                        entries,
                        journal: VecDeque::new(),
                        journal_entries: 0,
                        digest,
                        on_disk: None,
                    },
                );
            }
        }
        Ok(())
    }

    /// The organization no longer exists: its zone goes (its file at the end of the round).
    pub fn remove(&self, org: i64) -> bool {
        let mut state = self.state();
        state.dirty.insert(org);
        state.zones.remove(&org).is_some()
    }

    /// The round of changes is over: the next change gets a new serial, and the files of the
    /// zones it changed are brought up to date (appended to, written, removed) and synced. Once
    /// every organization has been seen since start (`seen_all`: the exporter's first pass is
    /// over), the files of zones that did not come back (or changed while the server was down)
    /// are rewritten or removed too; until then they wait for their organizations' turn.
    pub fn end_round(&self, seen_all: bool) -> Result<(), String> {
        let (saves, gone) = {
            let mut state = self.state();
            state.round = None;
            if seen_all {
                let restored = std::mem::take(&mut state.restored);
                state.dirty.extend(restored.into_keys());
            }
            let dirty = std::mem::take(&mut state.dirty);
            let mut saves = Vec::new();
            let mut gone = Vec::new();
            for org in dirty {
                match state.zones.get(&org) {
                    Some(z) => saves.push((
                        org,
                        journal::Save {
                            serial: z.serial,
                            digest: z.digest,
                            journal: z.journal.iter().cloned().collect(),
                            on_disk: z.on_disk,
                            most: OnDisk {
                                serial: 0,
                                records: 2 * (JOURNAL_VERSIONS + 1),
                                entries: 2 * JOURNAL_ENTRIES.max(z.entries.len()),
                            },
                        },
                    )),
                    None => gone.push(org),
                }
            }
            (saves, gone)
        };
        let Some(dir) = &self.journal_dir else {
            return Ok(());
        };
        if saves.is_empty() && gone.is_empty() {
            return Ok(());
        }
        let failed = |e: std::io::Error| format!("{}: {e}", dir.display());
        std::fs::create_dir_all(dir).map_err(failed)?;
        // Every file written first, then synced and put in place together (`files::Batch`):
        // a file's new size is taken as what it holds only once the batch is durable.
        let mut batch = crate::export::files::Batch::default();
        let mut failure = None;
        let mut written = Vec::new();
        for (org, save) in saves {
            match journal::save(dir, org, &save, &mut batch) {
                Ok(disk) => written.push((org, disk)),
                Err(e) => {
                    // Written whole at the next round.
                    self.forget_on_disk(org);
                    failure.get_or_insert(format!("{}: {e}", journal::path(dir, org).display()));
                }
            }
        }
        for org in gone {
            let path = journal::path(dir, org);
            batch.discard(&path);
            if let Err(e) = crate::export::files::remove(&path) {
                self.state().dirty.insert(org);
                failure.get_or_insert(format!("{}: {e}", path.display()));
            }
        }
        match batch.commit(&[dir]) {
            Ok(_) => {
                let mut state = self.state();
                for (org, disk) in written {
                    if let Some(z) = state.zones.get_mut(&org) {
                        z.on_disk = Some(disk).filter(|d| d.serial == z.serial);
                    }
                }
            }
            Err(e) => {
                // Not known to be durable: each of them written whole at the next round.
                batch.clear();
                for (org, _) in written {
                    self.forget_on_disk(org);
                }
                failure.get_or_insert(format!("{}: {e}", dir.display()));
            }
        }
        match failure {
            Some(e) => Err(format!("keeping the zones' journals: {e}")),
            None => Ok(()),
        }
    }

    /// The zone's file is not known to hold any version: it is written whole at the next round.
    fn forget_on_disk(&self, org: i64) {
        let mut state = self.state();
        if let Some(z) = state.zones.get_mut(&org) {
            z.on_disk = None;
        }
        state.dirty.insert(org);
    }

    /// The zone's serial and triggers now.
    pub fn snapshot(&self, org: i64) -> Option<(u32, Arc<Triggers>)> {
        let state = self.state();
        let z = state.zones.get(&org)?;
        Some((z.serial, z.entries.clone()))
    }

    /// The zone's serial, and what an IXFR from `serial` sends.
    pub fn since(&self, org: i64, serial: u32) -> Option<(u32, Transfer)> {
        let state = self.state();
        let z = state.zones.get(&org)?;
        Some((z.serial, z.since(serial)))
    }

    /// The zone's serial.
    pub fn serial(&self, org: i64) -> Option<u32> {
        self.state().zones.get(&org).map(|z| z.serial)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(v: &[(&str, Action)]) -> Vec<Entry> {
        v.iter().map(|(n, a)| (Box::from(*n), *a)).collect()
    }

    fn t(v: &[(&str, Action)]) -> Triggers {
        Triggers::of_entries(&e(v))
    }

    #[test]
    fn differences_are_journaled_and_serials_only_grow() {
        let zones = Zones::in_memory();
        assert!(zones.update(1, t(&[("a.test", Action::Block)])).unwrap());
        zones.end_round(true).unwrap();
        let (s1, _) = zones.snapshot(1).unwrap();
        assert!(!zones.update(1, t(&[("a.test", Action::Block)])).unwrap());
        let next = t(&[("a.test", Action::Passthru), ("b.test", Action::Block)]);
        assert!(zones.update(1, next).unwrap());
        zones.end_round(true).unwrap();
        let (s2, entries) = zones.snapshot(1).unwrap();
        assert!(serial_after(s2, s1));
        assert_eq!(entries.len(), 2);
        let Some((_, Transfer::Deltas(d))) = zones.since(1, s1) else {
            panic!("no deltas")
        };
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].removed, e(&[("a.test", Action::Block)]));
        assert_eq!(
            d[0].added,
            e(&[("a.test", Action::Passthru), ("b.test", Action::Block)])
        );
        assert!(matches!(zones.since(1, s2), Some((_, Transfer::Current))));
        assert!(matches!(
            zones.since(1, s1.wrapping_sub(5)),
            Some((_, Transfer::Full))
        ));
        assert!(zones.remove(1));
        assert!(zones.snapshot(1).is_none());
    }

    /// Merging a change gives the zone a whole new list would: the same triggers, the same
    /// journaled difference.
    #[test]
    fn a_change_merged_is_the_same_as_the_list_compared_whole() {
        let before = t(&[
            ("a.test", Action::Block),
            ("b.test", Action::Passthru),
            ("d.test", Action::Block),
        ]);
        let after = t(&[
            ("0.test", Action::Block),
            ("a.test", Action::Block),
            ("c.test", Action::Block),
            ("d.test", Action::Passthru),
            ("z.test", Action::Block),
        ]);
        let (removed, added) = before.diff(&after);
        assert_eq!(before.merged(&removed, &added).unwrap(), after);
        let (merged, whole) = (Zones::in_memory(), Zones::in_memory());
        for z in [&merged, &whole] {
            z.update(1, before.clone()).unwrap();
            z.end_round(true).unwrap();
        }
        let s1 = merged.serial(1).unwrap();
        // Unsorted, as the exporter hands them over.
        let (mut r, mut a) = (removed.clone(), added.clone());
        r.reverse();
        a.reverse();
        assert!(merged.apply(1, r, a).unwrap());
        assert!(whole.update(1, after.clone()).unwrap());
        assert!(!merged.apply(1, Vec::new(), Vec::new()).unwrap());
        assert!(!merged.apply(2, Vec::new(), added.clone()).unwrap());
        let (m, w) = (merged.state(), whole.state());
        let (m, w) = (&m.zones[&1], &w.zones[&1]);
        assert_eq!(*m.entries, after);
        assert_eq!(m.digest, w.digest);
        let (Transfer::Deltas(dm), Transfer::Deltas(dw)) = (m.since(s1), w.since(s1)) else {
            panic!("no deltas")
        };
        assert_eq!(
            (&dm[0].removed, &dm[0].added),
            (&dw[0].removed, &dw[0].added)
        );
    }

    /// While the exporter's first pass has not reached a zone, the rounds before leave its
    /// journal and serial from before the restart alone: the zone comes back unchanged when its
    /// turn comes (a secondary's IXFR still works), and only a zone that did not come back by
    /// the end of the pass loses its file.
    #[test]
    fn a_first_pass_in_slices_keeps_the_zones_it_has_not_reached() {
        let dir = crate::testdir::TempDir::new("rpz-slices");
        let list = |n: &str| t(&[(n, Action::Block)]);
        let before = Zones::in_data_dir(&dir);
        for org in [1, 2, 3] {
            before.update(org, list(&format!("{org}.test"))).unwrap();
        }
        before.end_round(true).unwrap();
        let serials: Vec<u32> = [1, 2, 3].map(|o| before.serial(o).unwrap()).into();
        drop(before);

        let after = Zones::in_data_dir(&dir);
        after.update(1, list("1.test")).unwrap();
        after.end_round(false).unwrap();
        after.update(2, list("2.test")).unwrap();
        after.end_round(false).unwrap();
        assert_eq!(after.serial(1), Some(serials[0]));
        assert_eq!(
            after.serial(2),
            Some(serials[1]),
            "zone 2 restored in a later slice"
        );
        // Zone 3 never comes back (its organization is gone): its file goes once all were seen.
        let journal = dir.join("rpz-journal");
        let files = || std::fs::read_dir(&journal).unwrap().count();
        assert_eq!(files(), 3);
        after.end_round(true).unwrap();
        assert_eq!(files(), 2);
    }

    #[test]
    fn the_serial_is_kept_across_restarts() {
        let dir = crate::testdir::TempDir::new("rpz-serial");
        let file = dir.join("rpz-serial");
        // A serial ahead of the clock (more than a change a second for a while).
        let ahead = u32::try_from(crate::timefmt::now()).unwrap() + 100_000;
        std::fs::write(&file, format!("{ahead}\n")).unwrap();
        let zones = Zones::with_files(Some(file.clone()), None);
        zones.update(3, Triggers::default()).unwrap();
        assert_eq!(zones.serial(3), Some(ahead + 1));
        let again = Zones::with_files(Some(file), None);
        again.update(3, Triggers::default()).unwrap();
        assert_eq!(again.serial(3), Some(ahead + 2));
    }
}
