//! The resolver exporter (`parasol serve --export-dir DIR`): keeps every organization's effective
//! block list (its domain list minus what its allow list covers) in the files a local DNS resolver
//! reads, `DIR/org-<id>.rpz`, `.unbound.conf`, `.dnsmasq.conf` and `.hosts`, so that an appliance
//! blocks what its domain lists hold without an operator exporting anything by hand. The same
//! rounds keep the RPZ primary's zones (`crate::rpz`, `--rpz-listen`), with or without files.
//!
//! How it keeps them current without slowing the write path:
//! - The store records which organizations' lists may have changed (`Store::take_list_changes`:
//!   events that add names, deletes, allow-list edits, deleted organizations), in the same
//!   transaction as the change. The exporter takes that set at most every `INTERVAL` (only when
//!   the database changed at all: `Store::version` is a few microseconds), so any number of
//!   changes in between cost one rewrite: a million-domain ingest rewrites the files a few times
//!   a second at most, not a million times.
//! - A round works on the change, not the whole list: the exporter holds each organization's
//!   effective list as last written (`Held`) and asks the store only for what was listed after
//!   its end (`Store::block_list_since`), with the list's length and check, which tell whether
//!   anything else changed (a removal, an entry another node committed behind it); the store sums
//!   both from its paging counts, which keep each block's residue sums beside its count (a few
//!   dozen rows for a million names, not a scan of the list). The allow list comes along to be
//!   compared. Names only added: appended to the held list, their triggers
//!   merged into the zone (`Zones::apply`), and each file made of the one in place, copied by the
//!   kernel, with the new names' lines (`Files::write`), the zone and the files at once. Anything
//!   else: the whole list is read again, as at start, and the files rendered from memory.
//! - The check is a sum of a non-linear function of each id (`crate::store::entry_check`), so
//!   that names committed late behind the cursor while others are removed do not pass for an
//!   unchanged list by coincidence of their ids. As a safety net all the same, every held list
//!   is read whole again at least every `REVIEW` (at most `REVIEW_BATCH` of them a round, the
//!   longest unread first), and its files and zone rewritten only if they differ: no divergence,
//!   whatever its cause, outlasts `REVIEW`.
//! - A round waits while the server is taking writes (commits, large request bodies in flight),
//!   for as long as the change can still reach the files within `FRESH` (`Pace`): a burst of
//!   batches is not slowed by a rewrite in its middle, and writes that never pause still see
//!   their changes in the files in time.
//! - After a round of rewrites that took `d`, the next round starts early (as soon as the write
//!   path is quiet) no sooner than `BUSY_SHARE * d` later, so that a server taking changes now
//!   and then spends at most a twentieth of its time rewriting large lists. That spacing never
//!   holds a change back past its deadline: a round goes when the change would otherwise miss
//!   `FRESH`, whatever the last round took.
//! - Its work runs at the priority of the bulk threads of `crate::bulk` (nice +5), below the
//!   threads that answer requests and commit writes, but high enough to meet its deadline when
//!   other processes keep every core busy (at nice +19 a round of a few milliseconds took tens of
//!   seconds on such a machine). The store reads a list for it on a thread of its own, and the
//!   files are written on another.
//! - At start every organization's files and zone are written once (the first pass), some
//!   `FIRST_PASS_SLICE` organizations a round, rounds following each other at once; each round
//!   takes the changes made since the last one first, so a change made while the pass goes on
//!   is not held back until the pass is over. Stray files are swept when the pass is complete.
//! - Each file is replaced whole: a resolver reads the old list or the new one. A round writes
//!   its files to temporary files, then syncs them in one pass, renames them over the old ones and
//!   syncs the directory once (`files::Batch`), before the reload command runs: a round of many
//!   organizations (the first) costs one sync of the file system, not one per file.
//! - The reload command (`--export-reload-cmd`) runs after each round that changed files, in a
//!   child process the exporter does not wait for: never two at once; rewrites made while one
//!   runs are followed by one more run when it ends.

pub mod files;
pub mod formats;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};

pub use formats::Format;

use crate::arena::Names;
use crate::feeds::Feeds;
use crate::rpz::zone::{Triggers, Zones};
use crate::store::{ListCursor, ListRead, Store, StoreError};

/// What `--export-dir`, `--export-formats` and `--export-reload-cmd` ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportConfig {
    pub dir: PathBuf,
    pub formats: Vec<Format>,
    /// Run by `/bin/sh -c` after each round of rewrites.
    pub reload_cmd: Option<String>,
}

impl ExportConfig {
    /// Every resolver format into `dir`, no reload command.
    pub fn new(dir: impl Into<PathBuf>) -> ExportConfig {
        ExportConfig {
            dir: dir.into(),
            formats: Format::RESOLVERS.to_vec(),
            reload_cmd: None,
        }
    }
}

/// The shortest time from the end of one round of rewrites to the start of the next (see `Pace`
/// for when a round starts within that bound).
pub const INTERVAL: Duration = Duration::from_millis(200);
/// After a round of rewrites that took `d`, the next one starts before its deadline (see `Pace`)
/// no sooner than this many `d` later (see the module's comment). Measured with `parasol-bench --compare-exports`: at 4 (a
/// fifth of the time), an ingest of new names rewriting a list of a hundred thousand names
/// several times a second cost the ingest about 10% of its rate on a server held to one core;
/// at 19 the exporter's share is bounded by 5%. Rounds under `INTERVAL / BUSY_SHARE` (lists of
/// some ten thousand names) still run every `INTERVAL`.
pub const BUSY_SHARE: u32 = 19;
/// The first pass over every organization (at start) writes at most this many organizations'
/// files a round besides those whose lists changed: a change made while the pass is under way
/// (10,000 organizations take seconds) is written by the next round, not after the whole pass.
/// About 0.1 s of rounds at ~1 ms an organization of a hundred names.
const FIRST_PASS_SLICE: usize = 64;
/// After a failed round (disk full, say), the next try waits this long.
const RETRY: Duration = Duration::from_secs(2);
/// A reload command still running after this long is killed.
const RELOAD_TIMEOUT: Duration = Duration::from_secs(120);
/// A failure of the reload command the same as the one before is logged again only after this
/// long (a command that always fails would otherwise log several lines a second under load).
const QUIET: Duration = Duration::from_secs(60);

/// Whether the server is busy with writes right now (large request bodies in flight, say).
pub type Busy = Box<dyn Fn() -> bool + Send + Sync>;

/// The running exporter: a task that finds changes and a thread that writes files.
pub struct Exporter {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Exporter {
    /// Checks that the directory can be written (creating it if needed), turns on the store's
    /// recording of list changes, and starts the exporter, whose first round writes every
    /// organization's files and removes those of organizations that no longer exist. `busy`
    /// tells whether the server is taking writes at the moment (the store's commits tell the
    /// rest, see `Pace`). Rounds and the files written are recorded in `feeds`, if given.
    pub fn start(
        store: Store,
        config: Option<ExportConfig>,
        rpz: Option<crate::rpz::Primary>,
        busy: Busy,
        feeds: Option<Arc<Feeds>>,
    ) -> Result<Exporter, String> {
        let writer = match &config {
            Some(config) => Some(FileWriter::check_and_start(config)?),
            None => None,
        };
        store.track_list_changes(true);
        if let Some(config) = &config {
            let names: Vec<&str> = config.formats.iter().map(|f| f.name()).collect();
            log::info!(
                "export: keeping the block lists in {} ({}){}",
                config.dir.display(),
                names.join(", "),
                match &config.reload_cmd {
                    Some(c) => format!(", then running {c:?}"),
                    None => String::new(),
                }
            );
        }
        if let (Some(feeds), Some(config)) = (&feeds, &config) {
            feeds.writing_files(crate::feeds::ExportFacts {
                dir: config.dir.clone(),
                formats: config.formats.iter().map(|f| f.name()).collect(),
            });
        }
        let reload_cmd = config.and_then(|c| c.reload_cmd);
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(run(store, reload_cmd, writer, rpz, busy, feeds, stopped));
        Ok(Exporter { stop, task })
    }

    /// Stops after the round in progress, if any (a reload command still running is killed).
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// The exporter's task: one round of rewrites now for everything, then rounds for what changed
/// as `Pace` allows, until stopped.
async fn run(
    store: Store,
    reload_cmd: Option<String>,
    writer: Option<FileWriter>,
    rpz: Option<crate::rpz::Primary>,
    busy: Busy,
    feeds: Option<Arc<Feeds>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut pace = Pace::new(Instant::now(), store.version().is_none());
    let mut rounds = Rounds {
        store,
        writer,
        zones: rpz.as_ref().map(|p| p.zones()),
        changed_zones: Vec::new(),
        lists: HashMap::new(),
        known: BTreeSet::new(),
        pending: BTreeSet::new(),
        reviewing: BTreeSet::new(),
        version: None,
        first: true,
        first_pass: FirstPass {
            started: Instant::now(),
            backlog: None,
            written: 0,
        },
        unsynced: false,
        feeds: feeds.clone(),
        written: Vec::new(),
    };
    let mut reloader = Reloader::new(reload_cmd.map(Arc::from));
    let mut tick = tokio::time::Instant::now();
    loop {
        tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => break,
            () = reloader.finished() => {
                reloader.done();
                continue;
            }
            () = tokio::time::sleep_until(tick) => {}
        }
        tick = tokio::time::Instant::now() + TICK;
        let now = Instant::now();
        let store = &rounds.store;
        pace.observe(now, busy(), store.commit_count(), store.version());
        if rounds.review_due(now) {
            pace.review(now);
        }
        // The first pass goes on round after round (unless a round failed: then as `Pace`
        // says, like any other).
        let passing = rounds.first && !pace.retrying(now);
        if !passing && !pace.due(now) {
            continue;
        }
        pace.round_starts(now);
        let started = crate::timefmt::now();
        let first = rounds.first;
        match rounds.round().await {
            Ok(written) => {
                let took = now.elapsed();
                if first && !rounds.first {
                    log::info!(
                        "export: wrote the files of {} organizations in {} ms",
                        rounds.first_pass.written,
                        rounds.first_pass.started.elapsed().as_millis()
                    );
                } else if written > 0 {
                    log::debug!(
                        "export: rewrote the files of {written} organizations in {} ms",
                        took.as_millis()
                    );
                }
                if written > 0 || first {
                    reloader.request();
                    if let Some(f) = &feeds {
                        f.round_done(crate::feeds::Round {
                            at: started,
                            took,
                            organizations: written,
                        });
                    }
                }
                if let Some(p) = &rpz {
                    p.changed(&std::mem::take(&mut rounds.changed_zones));
                }
                pace.round_ended(Instant::now(), took, written > 0);
            }
            Err(e) => {
                log::error!("export: {e}; trying again in {} s", RETRY.as_secs());
                if let Some(f) = &feeds {
                    f.round_failed(started, e);
                }
                pace.round_failed(Instant::now());
            }
        }
    }
    if let Some(p) = rpz {
        p.stop();
    }
}

/// How long a held list is followed by its changes before it is read whole again (see the
/// module's comment).
const REVIEW: Duration = Duration::from_secs(600);
/// At most this many held lists are read whole again for `REVIEW` in a round: after the first
/// round, every list comes due at once, and a round of them all would take as long as the
/// first.
const REVIEW_BATCH: usize = 64;
/// A round of one organization that takes this long (half of `FRESH`) is logged with where its
/// time went: a list large enough for that is one whose changes may miss their second.
const SLOW: Duration = Duration::from_millis(500);

/// When the exporter looks at the store's counters (both are read from memory).
const TICK: Duration = Duration::from_millis(25);
/// The write path counts as quiet after this long without a commit or a look that found the
/// server busy.
const WRITES_QUIET: Duration = Duration::from_millis(50);
/// How soon a change should be in the files; a round put off while the write path is busy
/// starts no later than this after the change, less the time the last round took (and half as
/// much again, and `MARGIN`).
const FRESH: Duration = Duration::from_secs(1);
const MARGIN: Duration = Duration::from_millis(50);

/// When rounds run. A round is due once something may have changed and either
/// - the change has waited as long as `FRESH` allows (its deadline, less the time the last round
///   took and half as much again, and `MARGIN`), or
/// - the spacing after the previous round has passed (`INTERVAL`, or `BUSY_SHARE` times the time
///   the previous round took) and the write path has been quiet for `WRITES_QUIET`.
///
/// So a burst of writes (an ingest of a few seconds, a product posting a batch) is not slowed
/// by a rewrite in its middle: the rewrite follows it, at once, while a stream of writes that
/// never pauses still sees its changes in the files within `FRESH`. The spacing only decides
/// how early a round may go, never how late: a round of a large list (or the first round, which
/// writes every organization's files) does not hold the next change back past its deadline.
///
/// "Something may have changed": the store's version moved (SQLite: any commit, by this server
/// or a command run beside it) or this server committed; on an engine without a version
/// (PostgreSQL, where other nodes commit too) every `INTERVAL`.
#[derive(Debug)]
struct Pace {
    /// The spacing rule: no round before this.
    next: Instant,
    /// The earliest moment an untaken change may have been made; `None`: no change seen.
    since: Option<Instant>,
    /// The store's counters at the last look, and when that was.
    commits: u64,
    version: Option<i64>,
    looked: Instant,
    /// The last time the commit count was seen to move or the server busy.
    last_busy: Instant,
    /// How long the last round that wrote files took.
    took: Duration,
    /// The engine has no version: rounds run every `INTERVAL` whether or not a change was seen.
    blind: bool,
    /// A round failed: no round before this.
    retry: Instant,
}

impl Pace {
    fn new(now: Instant, blind: bool) -> Pace {
        Pace {
            next: now,
            since: None,
            commits: 0,
            version: None,
            looked: now,
            last_busy: now,
            took: Duration::ZERO,
            blind,
            retry: now,
        }
    }

    /// Whether a round failed less than `RETRY` ago.
    fn retrying(&self, now: Instant) -> bool {
        now < self.retry
    }

    /// Takes in whether the server is busy, and the store's commit count and version, read at
    /// `now`.
    fn observe(&mut self, now: Instant, busy: bool, commits: u64, version: Option<i64>) {
        let committed = commits != self.commits;
        if committed || busy {
            self.last_busy = now;
        }
        if (committed || version != self.version) && self.since.is_none() {
            // It happened after the last look.
            self.since = Some(self.looked);
        }
        if self.blind && self.since.is_none() {
            self.since = Some(self.looked);
        }
        (self.commits, self.version, self.looked) = (commits, version, now);
    }

    fn due(&self, now: Instant) -> bool {
        let Some(since) = self.since else {
            return false;
        };
        let late = since + FRESH.saturating_sub(self.took + self.took / 2 + MARGIN);
        if now >= late {
            return true;
        }
        let quiet = now.saturating_duration_since(self.last_busy) >= WRITES_QUIET;
        quiet && now >= self.next
    }

    /// A round starts: it takes every change made until now (those made while it runs are seen
    /// at the next look, as made since now).
    fn round_starts(&mut self, now: Instant) {
        self.since = None;
        self.looked = now;
    }

    fn round_ended(&mut self, now: Instant, took: Duration, wrote: bool) {
        if wrote {
            self.took = took;
        }
        self.next = now + INTERVAL.max(took * BUSY_SHARE);
    }

    /// Held lists are due to be read whole again (`REVIEW`): a round is due as for a change.
    fn review(&mut self, now: Instant) {
        self.since.get_or_insert(now);
    }

    /// The changes the failed round took are still to be written (the round keeps them), in
    /// `RETRY`.
    fn round_failed(&mut self, now: Instant) {
        self.since.get_or_insert(now);
        self.next = now + RETRY;
        self.retry = now + RETRY;
    }
}

/// The exporter's view of the organizations between rounds.
struct Rounds {
    store: Store,
    /// The files (`--export-dir`), if kept.
    writer: Option<FileWriter>,
    /// The RPZ primary's zones (`--rpz-listen`), if served.
    zones: Option<Arc<crate::rpz::Zones>>,
    /// Organizations whose zones changed in the last round (to be NOTIFYed).
    changed_zones: Vec<i64>,
    /// The effective block list of each organization whose files or zone were written, as
    /// written: a round reads only what was listed since, and rewrites from this.
    lists: HashMap<i64, Held>,
    /// Organizations whose files were written.
    known: BTreeSet<i64>,
    /// Organizations whose files are still to be written (or removed): a failed round's.
    pending: BTreeSet<i64>,
    /// Organizations of this round whose lists are read whole again for `REVIEW` alone, with
    /// no change recorded.
    reviewing: BTreeSet<i64>,
    /// `Store::version` when the changes were last taken.
    version: Option<i64>,
    /// The first pass is under way: every organization's files and zone are written once (a
    /// slice of them a round), then stray files removed.
    first: bool,
    first_pass: FirstPass,
    /// Files were written whose sync failed (they stay staged): the next round syncs them even
    /// with nothing else to do.
    unsynced: bool,
    /// Where the files written are recorded for the console, if they are.
    feeds: Option<Arc<Feeds>>,
    /// Organizations whose files the round wrote (to be recorded once they are in place).
    written: Vec<i64>,
}

impl Rounds {
    /// Writes the files of the organizations whose lists may have changed (and of new
    /// organizations), removes those of deleted ones; returns how many organizations' files
    /// were written or removed.
    async fn round(&mut self) -> Result<usize, String> {
        let version = self.store.version();
        let reviewed = reviews(&self.lists, Instant::now(), REVIEW);
        if !self.first
            && !self.unsynced
            && self.pending.is_empty()
            && reviewed.is_empty()
            && version.is_some()
            && version == self.version
        {
            return Ok(0);
        }
        // The version is read before the changes are taken: whatever commits after this point
        // changes it again, and the next round takes it.
        let changed = self
            .store
            .take_list_changes()
            .await
            .map_err(store_failure)?;
        self.version = version;
        self.pending.extend(changed);
        // Read whole again for `REVIEW` alone: rewritten only if found changed.
        self.reviewing = reviewed
            .into_iter()
            .filter(|org| !self.pending.contains(org))
            .collect();
        self.pending.extend(self.reviewing.iter().copied());
        let orgs: BTreeSet<i64> = self
            .store
            .list_organizations()
            .await
            .map_err(store_failure)?
            .into_iter()
            .map(|o| o.id)
            .collect();
        if self.first {
            if self.first_pass.backlog.is_none() {
                // Every organization is in the pass: none is new to the rounds.
                self.first_pass.backlog = Some(orgs.clone());
                self.known = orgs.clone();
            }
            let slice = self
                .first_pass
                .slice(&self.pending, &orgs, FIRST_PASS_SLICE);
            self.pending.extend(slice);
        }
        // Created since the last round (their lists are empty, but a resolver configured for
        // them needs the files), and deleted (the store records those too; this also covers an
        // organization created and deleted between two rounds).
        self.pending.extend(orgs.difference(&self.known).copied());
        self.pending.extend(self.known.difference(&orgs).copied());
        let mut done = 0;
        let mut failure = None;
        for org in std::mem::take(&mut self.pending) {
            let result = if orgs.contains(&org) {
                let started = Instant::now();
                match self.read(org).await {
                    Ok(change) => self.write(org, change, started).await,
                    Err(StoreError::NotFound) => self.remove(org).await.map(|()| true),
                    Err(e) => Err(store_failure(e)),
                }
            } else {
                self.remove(org).await.map(|()| true)
            };
            match result {
                Ok(true) => {
                    done += 1;
                    if self.writer.is_some() && orgs.contains(&org) {
                        self.written.push(org);
                    }
                }
                Ok(false) => {}
                Err(e) => {
                    self.pending.insert(org);
                    failure.get_or_insert(format!("organization {org}: {e}"));
                }
            }
        }
        let pass_over = self.first && self.pending.is_empty() && self.first_pass.is_over();
        if let Some(zones) = &self.zones {
            // Appends to the changed zones' journals on disk and syncs them: off the runtime's
            // threads.
            let zones = zones.clone();
            let seen_all = !self.first || pass_over;
            let kept = tokio::task::spawn_blocking(move || zones.end_round(seen_all))
                .await
                .map_err(|e| format!("keeping the zones' journals failed: {e}"))
                .and_then(|r| r);
            if let Err(e) = kept {
                failure.get_or_insert(e);
            }
        }
        if let Some(writer) = &self.writer {
            if pass_over {
                writer.sweep(orgs.clone()).await?;
                writer.release();
            }
            if done > 0 || self.unsynced {
                // Puts the round's files in place (see `files::Batch`); what a failed sync left
                // staged is put in place by the next round's.
                self.unsynced = true;
                writer.sync().await?;
                self.unsynced = false;
                if let Some(f) = &self.feeds {
                    // A failed sync's organizations are in place now too, unless deleted since.
                    self.written.retain(|org| orgs.contains(org));
                    f.files_written(&self.written, crate::timefmt::now());
                }
            }
            self.written.clear();
        }
        if self.first {
            self.first_pass.written += done;
            self.first = !pass_over;
        }
        self.known = orgs;
        match failure {
            Some(e) => Err(e),
            None => Ok(done),
        }
    }
}

/// The first pass over every organization at start (see the module's comment).
struct FirstPass {
    started: Instant,
    /// The organizations it has still to write (`None`: it has not started).
    backlog: Option<BTreeSet<i64>>,
    /// Organizations whose files it wrote or removed, the changed ones among them.
    written: usize,
}

impl FirstPass {
    /// Takes out of the backlog the next `most` organizations (lowest ids first) to write in a
    /// round, besides `pending` (the round's changed ones, which leave the backlog too: written
    /// now, they are not written again); organizations that no longer exist (`orgs`) leave it.
    fn slice(&mut self, pending: &BTreeSet<i64>, orgs: &BTreeSet<i64>, most: usize) -> Vec<i64> {
        let Some(backlog) = &mut self.backlog else {
            return Vec::new();
        };
        backlog.retain(|org| orgs.contains(org) && !pending.contains(org));
        let mut slice = Vec::with_capacity(most.min(backlog.len()));
        while slice.len() < most {
            let Some(org) = backlog.pop_first() else {
                break;
            };
            slice.push(org);
        }
        slice
    }

    /// Whether every organization was taken: the pass is over once the round that took the last
    /// ones has written them.
    fn is_over(&self) -> bool {
        self.backlog.as_ref().is_some_and(BTreeSet::is_empty)
    }
}

/// What the exporter holds of an organization's effective block list between rounds.
struct Held {
    /// The list's last entry read, and the list's length and sum of ids then (see `ListRead`).
    cursor: Option<ListCursor>,
    count: i64,
    check: i64,
    /// When the whole list was last read (see `REVIEW`).
    read_whole: Instant,
    /// The allow list it was read with.
    allowed: Vec<String>,
    /// Listed names the allow list does not cover, in list order (in one arena: a million names
    /// take their text and 4 MB); the exceptions, sorted.
    blocked: Arc<Names>,
    exceptions: Arc<Vec<String>>,
}

impl Held {
    /// Whether `read` (after this list's cursor) holds everything listed since: the list has as
    /// many entries with as many ids as this holds and `read` brings, and the allow list is the
    /// same. Anything else (a name removed, an entry committed behind the cursor by another
    /// node, an allow-list edit) needs the whole list, and so does a list last read whole
    /// `review` ago or longer.
    fn follows(&self, read: &ListRead, now: Instant, review: Duration) -> bool {
        now.saturating_duration_since(self.read_whole) < review
            && !read.whole
            && read.count == self.count + read.names.len() as i64
            && read.check == self.check.wrapping_add(read.names_check)
            && read.allowed == self.allowed
    }
}

/// The organizations whose lists were last read whole `review` ago or longer, the longest ago
/// first, at most `REVIEW_BATCH`.
fn reviews(lists: &HashMap<i64, Held>, now: Instant, review: Duration) -> Vec<i64> {
    let mut due: Vec<(Instant, i64)> = lists
        .iter()
        .filter(|(_, h)| now.saturating_duration_since(h.read_whole) >= review)
        .map(|(org, h)| (h.read_whole, *org))
        .collect();
    due.sort_unstable();
    due.into_iter().take(REVIEW_BATCH).map(|d| d.1).collect()
}

/// How a round changes an organization's list.
enum Change {
    /// The whole list, read anew: what is held of it but its listed names, and those names
    /// (not covered by the allow list, in list order), held once the round takes them.
    Whole(Held, Vec<String>),
    /// Names listed at its end, not covered by the allow list; the exceptions now; where the
    /// list ends now.
    Appended {
        blocked: Vec<String>,
        exceptions: Vec<String>,
        read: ListRead,
    },
}

/// The names of `names` the allow list does not cover.
fn not_covered(names: Vec<String>, allowed: &[String]) -> Vec<String> {
    if allowed.is_empty() {
        return names;
    }
    let allowed: std::collections::HashSet<&str> = allowed.iter().map(String::as_str).collect();
    names
        .into_iter()
        .filter(|n| !crate::names::self_and_parents(n).any(|p| allowed.contains(p)))
        .collect()
}

impl Rounds {
    /// Reads what changed in the organization's list since the last round: the names listed
    /// after the held list's end when that is all that changed, else the whole list.
    async fn read(&self, org: i64) -> Result<Change, StoreError> {
        if let Some(held) = self.lists.get(&org) {
            let read = self.store.block_list_since(org, held.cursor).await?;
            if held.follows(&read, Instant::now(), REVIEW) {
                let blocked = not_covered(read.names, &read.allowed);
                let exceptions = read.exceptions.clone();
                let read = ListRead {
                    names: Vec::new(),
                    ..read
                };
                return Ok(Change::Appended {
                    blocked,
                    exceptions,
                    read,
                });
            }
        }
        let read_whole = Instant::now();
        let read = self.store.block_list_since(org, None).await?;
        let blocked = not_covered(read.names, &read.allowed);
        let held = Held {
            read_whole,
            cursor: read.last,
            count: read.count,
            check: read.check,
            blocked: Arc::default(),
            exceptions: Arc::new(read.exceptions),
            allowed: read.allowed,
        };
        Ok(Change::Whole(held, blocked))
    }

    /// Brings the organization's files and zone to the list `change` leads to; whether it wrote
    /// anything (a list read whole again for `REVIEW` alone and found as held is not written;
    /// any recorded change rewrites the files, so that a resolver sees a new serial).
    /// `started`: when the round began to read the list (for `SLOW`'s log line).
    async fn write(&mut self, org: i64, change: Change, started: Instant) -> Result<bool, String> {
        let reading = started.elapsed();
        let (mut held, took) = match change {
            Change::Whole(mut held, blocked) => {
                let names = Names::from_names(blocked.iter().map(String::as_str));
                drop(blocked);
                held.blocked = Arc::new(names?);
                let before = self.lists.remove(&org);
                if self.writer.is_some()
                    && self.reviewing.contains(&org)
                    && before.is_some_and(|b| {
                        b.blocked == held.blocked && b.exceptions == held.exceptions
                    })
                {
                    // The files, and the zone made from the same lists, are as they should be.
                    self.lists.insert(org, held);
                    return Ok(false);
                }
                // Sorting a large list into triggers takes a while: off the runtime's threads.
                let lists = (held.blocked.clone(), held.exceptions.clone());
                let zone = move |zones: &Zones| {
                    let triggers = Triggers::of_lists(&*lists.0, &lists.1)?;
                    drop(lists);
                    zones.update(org, triggers)
                };
                let (blocked, exceptions) = (held.blocked.clone(), held.exceptions.clone());
                let took = self
                    .zone_and_files(org, zone, blocked, exceptions, None)
                    .await?;
                (held, took)
            }
            Change::Appended {
                blocked,
                exceptions,
                read,
            } => {
                let Some(mut held) = self.lists.remove(&org) else {
                    return Err("the list of the organization is not held".into());
                };
                let new_exceptions = exceptions != *held.exceptions;
                if blocked.is_empty() && !new_exceptions {
                    held.cursor = read.last;
                    self.lists.insert(org, held);
                    return Ok(true);
                }
                let (removed, added) = appended_triggers(&blocked, &held.exceptions, &exceptions);
                let zone = move |zones: &Zones| zones.apply(org, removed, added);
                // The files as last written, with lines for the new names: copied, not
                // rendered again (see `Files::write`).
                let appended = (!new_exceptions).then_some(held.blocked.len());
                Arc::make_mut(&mut held.blocked).extend(blocked.iter().map(String::as_str))?;
                if new_exceptions {
                    held.exceptions = Arc::new(exceptions);
                }
                (held.cursor, held.count, held.check) = (read.last, read.count, read.check);
                let (blocked, exceptions) = (held.blocked.clone(), held.exceptions.clone());
                let took = self
                    .zone_and_files(org, zone, blocked, exceptions, appended)
                    .await?;
                (held, took)
            }
        };
        let (zone, files) = took;
        if reading + zone.max(files) >= SLOW {
            log::info!(
                "export: organization {org} ({} names): its round took {} ms: reading the \
                 change {} ms, then at once the zone {} ms and the files {} ms",
                held.blocked.len(),
                (reading + zone.max(files)).as_millis(),
                reading.as_millis(),
                zone.as_millis(),
                files.as_millis()
            );
        }
        if self.writer.is_none() {
            // Only the files are written from the held names; the zone holds its own.
            held.blocked = Arc::default();
        }
        self.lists.insert(org, held);
        Ok(true)
    }

    /// Whether a held list is due to be read whole again (`REVIEW`).
    fn review_due(&self, now: Instant) -> bool {
        self.lists
            .values()
            .any(|h| now.saturating_duration_since(h.read_whole) >= REVIEW)
    }

    /// Brings the organization's zone (by `zone`, on a blocking thread, if zones are served)
    /// and its files (from `blocked` and `exceptions`, if written) up to date at once: a large
    /// list's files are rendered while its zone is sorted or merged, and the round takes the
    /// longer of the two rather than their sum. `appended`: the list is the one last written
    /// with names listed after its first `appended` (the same exceptions). Returns how long each
    /// took.
    async fn zone_and_files(
        &mut self,
        org: i64,
        zone: impl FnOnce(&Zones) -> Result<bool, String> + Send + 'static,
        blocked: Arc<Names>,
        exceptions: Arc<Vec<String>>,
        appended: Option<usize>,
    ) -> Result<(Duration, Duration), String> {
        let zone = async {
            let Some(zones) = self.zones.clone() else {
                return Ok((false, Duration::ZERO));
            };
            tokio::task::spawn_blocking(move || {
                let started = Instant::now();
                zone(&zones).map(|changed| (changed, started.elapsed()))
            })
            .await
            .map_err(|e| format!("the zone update failed: {e}"))?
        };
        let files = async {
            let started = Instant::now();
            match &self.writer {
                Some(w) => w.write(org, blocked, exceptions, appended).await,
                None => Ok(()),
            }
            .map(|()| started.elapsed())
        };
        let (zone, files) = tokio::join!(zone, files);
        let (changed, zone) = zone?;
        if changed {
            self.changed_zones.push(org);
        }
        Ok((zone, files?))
    }

    /// Removes the organization's files and zone.
    async fn remove(&mut self, org: i64) -> Result<(), String> {
        self.lists.remove(&org);
        if let Some(f) = &self.feeds {
            f.forget(org);
        }
        if let Some(zones) = &self.zones {
            zones.remove(org);
        }
        match &self.writer {
            Some(w) => w.remove(org).await,
            None => Ok(()),
        }
    }
}

/// The zone's change when `blocked` names are listed at the end of a list and its exceptions go
/// from `before` to `after` (both sorted): the new names' triggers, and the exceptions' that
/// came or went.
fn appended_triggers(
    blocked: &[String],
    before: &[String],
    after: &[String],
) -> (Vec<crate::rpz::zone::Entry>, Vec<crate::rpz::zone::Entry>) {
    use crate::rpz::zone::Action;
    let passthru = |n: &String| (Box::from(n.as_str()), Action::Passthru);
    let removed = before
        .iter()
        .filter(|n| after.binary_search(n).is_err())
        .map(passthru)
        .collect();
    let mut added: Vec<_> = after
        .iter()
        .filter(|n| before.binary_search(n).is_err())
        .map(passthru)
        .collect();
    added.extend(
        blocked
            .iter()
            .map(|n| (Box::from(n.as_str()), Action::Block)),
    );
    (removed, added)
}

fn store_failure(e: StoreError) -> String {
    format!("reading the lists: {e}")
}

// ------------------------------------------------------------------ the file thread

/// What the file thread is asked to do.
enum Job {
    Write {
        org: i64,
        blocked: Arc<Names>,
        exceptions: Arc<Vec<String>>,
        /// The list is the one last written with names listed after its first this many.
        appended: Option<usize>,
        reply: oneshot::Sender<Result<(), String>>,
    },
    Remove {
        org: i64,
        reply: oneshot::Sender<Result<(), String>>,
    },
    /// Removes every exported file of an organization not in `keep` or of a format not exported,
    /// and temporary files left by a process that died.
    Sweep {
        keep: BTreeSet<i64>,
        reply: oneshot::Sender<Result<(), String>>,
    },
    /// Makes the round's renames durable.
    Sync {
        reply: oneshot::Sender<Result<(), String>>,
    },
    /// Hands freed memory back to the system (`release_freed_memory`), after the first round.
    Release,
}

/// The thread that renders and writes the files, at the bulk threads' priority, below the threads
/// that answer requests and commit writes (rendering a large list takes a while; fsyncs wait for
/// the disk). Requests go to it one at a time and the task waits for each.
struct FileWriter {
    jobs: std::sync::mpsc::Sender<Job>,
}

impl FileWriter {
    /// Checks that the directory can be written (creating it if needed), then starts the thread.
    fn check_and_start(config: &ExportConfig) -> Result<FileWriter, String> {
        let dir = &config.dir;
        let shown = dir.display();
        std::fs::create_dir_all(dir).map_err(|e| format!("--export-dir {shown}: {e}"))?;
        let probe = dir.join(format!(".parasol-export-probe.tmp-{}", std::process::id()));
        files::replace(&probe, b"")
            .and_then(|()| std::fs::remove_file(&probe))
            .map_err(|e| format!("--export-dir {shown}: cannot write files there: {e}"))?;
        FileWriter::start(dir.clone(), config.formats.clone())
            .map_err(|e| format!("cannot start the exporter's thread: {e}"))
    }

    fn start(dir: PathBuf, formats: Vec<Format>) -> std::io::Result<FileWriter> {
        let (jobs, queue) = std::sync::mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("parasol-export".into())
            .spawn(move || {
                crate::bulk::lower_priority();
                let mut files = Files {
                    dir,
                    formats,
                    serials: HashMap::new(),
                    batch: files::Batch::default(),
                    layouts: HashMap::new(),
                    staged: HashMap::new(),
                };
                while let Ok(job) = queue.recv() {
                    files.run(job);
                }
            })?;
        Ok(FileWriter { jobs })
    }

    async fn call(
        &self,
        job: impl FnOnce(oneshot::Sender<Result<(), String>>) -> Job,
    ) -> Result<(), String> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(job(reply))
            .map_err(|_| "the exporter's thread stopped".to_string())?;
        answer
            .await
            .map_err(|_| "the exporter's thread failed".to_string())?
    }

    async fn write(
        &self,
        org: i64,
        blocked: Arc<Names>,
        exceptions: Arc<Vec<String>>,
        appended: Option<usize>,
    ) -> Result<(), String> {
        self.call(|reply| Job::Write {
            org,
            blocked,
            exceptions,
            appended,
            reply,
        })
        .await
    }

    async fn remove(&self, org: i64) -> Result<(), String> {
        self.call(|reply| Job::Remove { org, reply }).await
    }

    async fn sweep(&self, keep: BTreeSet<i64>) -> Result<(), String> {
        self.call(|reply| Job::Sweep { keep, reply }).await
    }

    async fn sync(&self) -> Result<(), String> {
        self.call(|reply| Job::Sync { reply }).await
    }

    fn release(&self) {
        let _ = self.jobs.send(Job::Release);
    }
}

/// Hands the memory of the first round's lists, freed, back to the system: glibc keeps freed
/// small blocks (a million names are a million of them) in its arenas, where they would otherwise
/// set the server's resident size from then on. Only after the first round, which writes every
/// organization's list at start: later rounds write the lists that changed, and the memory one
/// used is what the next takes again. Returned after every round of a large list, it cost the
/// next burst of requests 20-40% of its rate (`parasol-bench --compare-exports`: in windows of
/// 6 batches, once the list passed 100,000 names), spent faulting memory back in.
fn release_freed_memory() {
    crate::trim::malloc_trim();
}

/// The file thread's state.
struct Files {
    dir: PathBuf,
    formats: Vec<Format>,
    /// The RPZ serial last written for each organization (read from its file when first needed,
    /// so that serials keep increasing across restarts).
    serials: HashMap<i64, u32>,
    /// The round's files, written to temporary files, put in place together by `Job::Sync`.
    batch: files::Batch,
    /// The sections of the files in place (as this thread wrote them), and of the round's files
    /// staged (in place once `Job::Sync` commits them).
    layouts: HashMap<(i64, Format), Layout>,
    staged: HashMap<(i64, Format), Layout>,
}

/// Where a written file's sections end (see `formats::render_header`), and how many listed
/// names it holds: what a file with names appended to its list is copied from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layout {
    names: usize,
    header: u64,
    blocked_end: u64,
    len: u64,
}

/// A writer that counts what goes through it.
struct Counted<'a, W: std::io::Write> {
    inner: &'a mut W,
    written: u64,
}

impl<W: std::io::Write> std::io::Write for Counted<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

impl Files {
    fn run(&mut self, job: Job) {
        match job {
            Job::Write {
                org,
                blocked,
                exceptions,
                appended,
                reply,
            } => {
                let written = self.write(org, &blocked, &exceptions, appended);
                // Let go of the lists before answering: the exporter extends them in place
                // next round, which it can do only while it holds them alone.
                drop((blocked, exceptions));
                let _ = reply.send(written);
            }
            Job::Remove { org, reply } => {
                let _ = reply.send(self.remove(org));
            }
            Job::Sweep { keep, reply } => {
                let _ = reply.send(self.sweep(&keep));
            }
            Job::Sync { reply } => {
                // The round's files put in place, and the removals made durable.
                let dir = self.dir.clone();
                let committed = self.batch.commit(&[&dir]);
                let staged = std::mem::take(&mut self.staged);
                match committed {
                    Ok(_) => self.layouts.extend(staged),
                    // Whether each file was put in place is not known: written whole next time.
                    Err(_) => self.layouts.retain(|k, _| !staged.contains_key(k)),
                }
                let _ = reply.send(committed.map(|_| ()).map_err(|e| self.failed(&dir, e)));
            }
            Job::Release => release_freed_memory(),
        }
    }

    fn failed(&self, path: &Path, e: std::io::Error) -> String {
        format!("{}: {e}", path.display())
    }

    /// Writes the organization's files (staged, put in place by `Job::Sync`). With `appended`
    /// (names listed after the first `appended` of a list whose files this thread last wrote,
    /// its exceptions the same), each file is its version in place with a new header, the new
    /// names' lines inserted after the old ones, and its last section written again: the same
    /// bytes as written whole, but a list of a million names is copied (by the kernel) rather
    /// than rendered again.
    fn write(
        &mut self,
        org: i64,
        blocked: &Names,
        exceptions: &[String],
        appended: Option<usize>,
    ) -> Result<(), String> {
        for format in self.formats.clone() {
            let path = self.dir.join(format.file_name(org));
            let serial = match format {
                Format::Rpz => {
                    let previous = self.serials.get(&org).copied().or_else(|| {
                        std::fs::read_to_string(&path)
                            .ok()
                            .and_then(|t| formats::rpz_serial(&t))
                    });
                    formats::next_serial(previous, crate::timefmt::now())
                }
                _ => 0,
            };
            // The file in place, if it is the one last written for the list before the names
            // appended (its size tells it was not replaced by anything else).
            let from = appended.and_then(|n| {
                let l = self.layouts.get(&(org, format)).filter(|l| l.names == n)?;
                let file = std::fs::File::open(&path).ok()?;
                (file.metadata().ok()?.len() == l.len).then_some((*l, file))
            });
            let mut layout = None;
            self.batch
                .stage_with(&path, |w| {
                    let mut w = Counted {
                        inner: w,
                        written: 0,
                    };
                    formats::render_header(format, org, serial, &mut w)?;
                    let header = w.written;
                    match from {
                        Some((old, mut file)) => {
                            use std::io::{Read, Seek};
                            file.seek(std::io::SeekFrom::Start(old.header))?;
                            let want = old.blocked_end - old.header;
                            // Straight to the file's writer: the kernel copies (copy_file_range).
                            let copied = std::io::copy(&mut file.take(want), w.inner)?;
                            w.written += copied;
                            if copied != want {
                                return Err(std::io::Error::other("the file was cut short"));
                            }
                            formats::render_blocked(format, blocked.iter_from(old.names), &mut w)?;
                        }
                        None => {
                            formats::render_before(format, exceptions, &mut w)?;
                            formats::render_blocked(format, blocked, &mut w)?;
                        }
                    }
                    let blocked_end = w.written;
                    formats::render_after(format, blocked, exceptions, &mut w)?;
                    layout = Some(Layout {
                        names: blocked.len(),
                        header,
                        blocked_end,
                        len: w.written,
                    });
                    Ok(())
                })
                .map_err(|e| self.failed(&path, e))?;
            match layout {
                Some(l) => self.staged.insert((org, format), l),
                None => self.staged.remove(&(org, format)),
            };
            if format == Format::Rpz {
                self.serials.insert(org, serial);
            }
        }
        Ok(())
    }

    /// Removes every exported file of the organization, in any format (a format dropped from
    /// `--export-formats` included).
    fn remove(&mut self, org: i64) -> Result<(), String> {
        self.serials.remove(&org);
        self.layouts.retain(|k, _| k.0 != org);
        self.staged.retain(|k, _| k.0 != org);
        for format in Format::RESOLVERS {
            let path = self.dir.join(format.file_name(org));
            self.batch.discard(&path);
            files::remove(&path).map_err(|e| self.failed(&path, e))?;
        }
        Ok(())
    }

    /// A file that looks exported but would not be written now is stale: a resolver reading it
    /// would go on blocking a list that no longer exists. It is removed.
    fn sweep(&mut self, keep: &BTreeSet<i64>) -> Result<(), String> {
        let entries = std::fs::read_dir(&self.dir).map_err(|e| self.failed(&self.dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| self.failed(&self.dir, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let stale = if files::is_temporary(&name) {
                (name.starts_with(".org-") || name.starts_with(".parasol-export-probe"))
                    && !self.batch.holds_temporary(&entry.path())
            } else {
                match Format::of_file_name(&name) {
                    Some((org, format)) => !keep.contains(&org) || !self.formats.contains(&format),
                    None => false,
                }
            };
            if stale {
                let path = entry.path();
                files::remove(&path).map_err(|e| self.failed(&path, e))?;
                log::info!("export: removed stale file {}", path.display());
            }
        }
        Ok(())
    }
}

// ------------------------------------------------------------------ the reload command

/// Runs the reload command when asked, never two at once: a request while one runs is served by
/// one more run after it.
struct Reloader {
    cmd: Option<Arc<str>>,
    running: Option<tokio::task::JoinHandle<Option<String>>>,
    wanted: bool,
    /// The last failure and when it was last logged, with how many times it was not.
    last_failure: Option<(String, Instant, u64)>,
}

impl Reloader {
    fn new(cmd: Option<Arc<str>>) -> Reloader {
        Reloader {
            cmd,
            running: None,
            wanted: false,
            last_failure: None,
        }
    }

    fn request(&mut self) {
        if self.cmd.is_some() {
            self.wanted = true;
            self.kick();
        }
    }

    fn kick(&mut self) {
        if let (None, true, Some(cmd)) = (&self.running, self.wanted, &self.cmd) {
            self.wanted = false;
            self.running = Some(tokio::spawn(reload(cmd.clone())));
        }
    }

    /// Resolves when the running command has ended (never, if none runs).
    async fn finished(&mut self) {
        match &mut self.running {
            Some(handle) => {
                let failure = handle.await.ok().flatten();
                self.report(failure);
            }
            None => std::future::pending().await,
        }
    }

    /// After `finished`: runs the command again if asked meanwhile.
    fn done(&mut self) {
        self.running = None;
        self.kick();
    }

    fn report(&mut self, failure: Option<String>) {
        let Some(f) = failure else {
            if let Some((_, _, n)) = self.last_failure.take() {
                if n > 0 {
                    log::warn!("export: the reload command failed {n} more times, then succeeded");
                }
            }
            return;
        };
        match &mut self.last_failure {
            Some((last, at, n)) if *last == f && at.elapsed() < QUIET => *n += 1,
            other => {
                let more = match other {
                    Some((_, _, n)) if *n > 0 => format!(" (and {n} times the same before)"),
                    _ => String::new(),
                };
                log::warn!("export: {f}{more}");
                *other = Some((f, Instant::now(), 0));
            }
        }
    }
}

impl Drop for Reloader {
    fn drop(&mut self) {
        // The command's child process is killed with its task.
        if let Some(h) = self.running.take() {
            h.abort();
        }
    }
}

/// Kills a reload command's whole process group when dropped before the command ended (the
/// server stopping, or the command running too long): `sh -c` may have started other processes,
/// which would otherwise live on.
struct Group(Option<u32>);

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(pid) = self.0.and_then(|p| i32::try_from(p).ok()) {
            // SAFETY: sends a signal to the process group this exporter started (its leader's
            // pid is the group's id); no memory is passed.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
    }
}

/// Runs the reload command once; returns what went wrong, if anything.
async fn reload(cmd: Arc<str>) -> Option<String> {
    let started = Instant::now();
    let child = tokio::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(&*cmd)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        // A group of its own, so that all of it can be killed (see `Group`).
        .process_group(0)
        .kill_on_drop(true)
        .spawn();
    let child = match child {
        Ok(c) => c,
        Err(e) => return Some(format!("cannot run the reload command {cmd:?}: {e}")),
    };
    let mut group = Group(child.id());
    let outcome = tokio::time::timeout(RELOAD_TIMEOUT, child.wait_with_output()).await;
    if let Ok(Ok(_)) = &outcome {
        // Ended: its group id may be reused from now on.
        group.0 = None;
    }
    match outcome {
        Err(_) => Some(format!(
            "the reload command {cmd:?} still ran after {} s and was killed",
            RELOAD_TIMEOUT.as_secs()
        )),
        Ok(Err(e)) => Some(format!("the reload command {cmd:?}: {e}")),
        Ok(Ok(out)) if out.status.success() => {
            log::debug!(
                "export: the reload command took {} ms",
                started.elapsed().as_millis()
            );
            None
        }
        Ok(Ok(out)) => {
            let status = match out.status.code() {
                Some(c) => format!("exit status {c}"),
                None => format!("{}", out.status),
            };
            let said = String::from_utf8_lossy(if out.stderr.is_empty() {
                &out.stdout
            } else {
                &out.stderr
            })
            .trim()
            .chars()
            .take(500)
            .collect::<String>();
            Some(format!(
                "the reload command {cmd:?} failed ({status}){}",
                if said.is_empty() {
                    String::new()
                } else {
                    format!(": {said}")
                }
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// A held list is followed by what was read after it only when the list's length and
    /// check are what the held entries and the new ones make, the allow list is the same, and
    /// it was read whole less than `REVIEW` ago.
    #[test]
    fn a_held_list_is_followed_only_when_the_rest_is_unchanged() {
        let t0 = Instant::now();
        let held = Held {
            read_whole: t0,
            cursor: Some(ListCursor {
                position: 3,
                id: 30,
            }),
            count: 3,
            check: 60,
            allowed: vec!["ok.example".into()],
            blocked: Arc::default(),
            exceptions: Arc::default(),
        };
        let read = |count: i64, check: i64, names: &[(&str, i64)], allowed: &[&str]| ListRead {
            whole: false,
            names: names.iter().map(|n| n.0.to_string()).collect(),
            names_check: names.iter().map(|n| n.1).sum(),
            count,
            check,
            last: None,
            allowed: allowed.iter().map(|a| a.to_string()).collect(),
            exceptions: Vec::new(),
        };
        let ok = ["ok.example"];
        let review = Duration::from_secs(600);
        let follows_at = |read: &ListRead, at: Duration| held.follows(read, t0 + at, review);
        assert!(follows_at(&read(3, 60, &[], &ok), MS));
        assert!(follows_at(&read(4, 101, &[("new.example", 41)], &ok), MS));
        // One removed, one listed: as many entries, not the same ids.
        assert!(!follows_at(&read(3, 51, &[("new.example", 41)], &ok), MS));
        // One committed behind the cursor (another node), one removed: the ids tell.
        assert!(!follows_at(&read(3, 55, &[], &ok), MS));
        assert!(!follows_at(&read(4, 101, &[("new.example", 41)], &[]), MS));
        let mut whole = read(3, 60, &[], &ok);
        whole.whole = true;
        assert!(!follows_at(&whole, MS));
        // Read whole `REVIEW` ago: read whole again, however well the rest adds up.
        assert!(follows_at(&read(3, 60, &[], &ok), review - MS));
        assert!(!follows_at(&read(3, 60, &[], &ok), review));
    }

    /// The lists read whole `REVIEW` ago or longer are read again, the longest ago first, at
    /// most `REVIEW_BATCH` a round.
    #[test]
    fn lists_are_read_whole_again_after_the_review_interval_a_batch_a_round() {
        let t0 = Instant::now();
        let review = Duration::from_secs(600);
        let mut lists = HashMap::new();
        // Organization `org` was read whole `count - org` seconds after `t0`.
        let count = REVIEW_BATCH as i64 + 2;
        for org in 0..count {
            let held = Held {
                read_whole: t0 + Duration::from_secs((count - org) as u64),
                cursor: None,
                count: 0,
                check: 0,
                allowed: Vec::new(),
                blocked: Arc::default(),
                exceptions: Arc::default(),
            };
            lists.insert(org, held);
        }
        let last = t0 + Duration::from_secs(count as u64);
        assert!(reviews(&lists, t0 + review, review).is_empty());
        // Two lists' interval has passed: those two, the one read longer ago first.
        let at = t0 + review + Duration::from_secs(2);
        assert_eq!(reviews(&lists, at, review), [count - 1, count - 2]);
        // All of them: a batch, the longest unread first.
        let all = reviews(&lists, last + review, review);
        let oldest: Vec<i64> = (0..count).rev().take(REVIEW_BATCH).collect();
        assert_eq!(all, oldest);
    }

    /// The triggers of names listed at the end and of exceptions that came and went.
    #[test]
    fn appended_names_and_changed_exceptions_make_the_zones_change() {
        use crate::rpz::zone::Action;
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let (removed, added) = appended_triggers(
            &s(&["new.example"]),
            &s(&["a.x.example", "b.x.example"]),
            &s(&["b.x.example", "c.x.example"]),
        );
        assert_eq!(removed, vec![(Box::from("a.x.example"), Action::Passthru)]);
        assert_eq!(
            added,
            vec![
                (Box::from("c.x.example"), Action::Passthru),
                (Box::from("new.example"), Action::Block)
            ]
        );
    }

    /// The first pass writes a slice of the organizations a round, the changed ones besides
    /// (and never twice), lowest ids first, skipping deleted ones, until none is left.
    #[test]
    fn the_first_pass_goes_a_slice_a_round_beside_the_changes() {
        let all: BTreeSet<i64> = (1..=10).collect();
        let mut pass = FirstPass {
            started: Instant::now(),
            backlog: None,
            written: 0,
        };
        assert!(
            pass.slice(&BTreeSet::new(), &all, 4).is_empty(),
            "not started"
        );
        assert!(!pass.is_over());
        pass.backlog = Some(all.clone());
        // Organization 9 changed: written in this round, so not again in a later slice.
        assert_eq!(pass.slice(&BTreeSet::from([9]), &all, 4), [1, 2, 3, 4]);
        // Organization 6 was deleted meanwhile.
        let now: BTreeSet<i64> = all.iter().copied().filter(|&o| o != 6).collect();
        assert_eq!(pass.slice(&BTreeSet::new(), &now, 4), [5, 7, 8, 10]);
        assert!(pass.is_over());
        assert!(pass.slice(&BTreeSet::new(), &now, 4).is_empty());
    }

    /// Names appended to a list: each file is the one in place (its bytes copied: a name
    /// altered in it in place stays altered) with the new names' lines, byte for byte what the
    /// list written whole gives; a file of another size than written is written whole.
    #[test]
    fn files_of_a_list_with_names_appended_are_copied_and_extended() {
        let dir = crate::testdir::TempDir::new("export-append");
        let mut files = Files {
            dir: dir.to_path_buf(),
            formats: Format::RESOLVERS.to_vec(),
            serials: HashMap::new(),
            batch: files::Batch::default(),
            layouts: HashMap::new(),
            staged: HashMap::new(),
        };
        let sync = |files: &mut Files| {
            let (reply, _answer) = oneshot::channel();
            files.run(Job::Sync { reply });
        };
        let long = format!("{}.example", "x".repeat(240));
        let mut list: Vec<String> = vec!["a.example".into(), long.clone(), "b.example".into()];
        let exceptions = vec!["ok.a.example".to_string(), format!("ok.{long}")];
        let held = |l: &[String]| Names::from_names(l.iter().map(String::as_str)).unwrap();
        files.write(5, &held(&list), &exceptions, None).unwrap();
        sync(&mut files);
        let read = |f: Format| std::fs::read_to_string(dir.join(f.file_name(5))).unwrap();
        let expected = |f: Format, l: &[String], files: &Files| {
            formats::render_to_string(f, 5, l, &exceptions, files.serials[&5])
        };
        for f in Format::RESOLVERS {
            assert_eq!(read(f), expected(f, &list, &files), "{f:?}");
            // Altered in place, the same size.
            let altered = read(f).replace("b.example", "B.example");
            std::fs::write(dir.join(f.file_name(5)), altered).unwrap();
        }
        list.extend(["c.example".to_string(), format!("y{long}")]);
        files.write(5, &held(&list), &exceptions, Some(3)).unwrap();
        sync(&mut files);
        for f in Format::RESOLVERS {
            let whole = expected(f, &list, &files);
            assert_ne!(read(f), whole, "{f:?}");
            assert_eq!(read(f), whole.replace("b.example", "B.example"), "{f:?}");
            // Another size than written: written whole at the next append.
            let mut grown = read(f);
            grown.push('\n');
            std::fs::write(dir.join(f.file_name(5)), grown).unwrap();
        }
        list.push("d.example".into());
        files.write(5, &held(&list), &exceptions, Some(5)).unwrap();
        sync(&mut files);
        for f in Format::RESOLVERS {
            assert_eq!(read(f), expected(f, &list, &files), "{f:?}");
        }
        // Not the count last written: written whole.
        list.push("e.example".into());
        files.write(5, &held(&list), &exceptions, Some(2)).unwrap();
        sync(&mut files);
        for f in Format::RESOLVERS {
            assert_eq!(read(f), expected(f, &list, &files), "{f:?}");
        }
    }

    /// A pace as the exporter's first round, which took `took`, leaves it at `t0`.
    fn after_first_round(t0: Instant, took: Duration) -> Pace {
        after_first_round_on(t0, took, false)
    }

    /// The same on an engine without a version.
    fn after_first_round_blind(t0: Instant, took: Duration) -> Pace {
        after_first_round_on(t0, took, true)
    }

    fn after_first_round_on(t0: Instant, took: Duration, blind: bool) -> Pace {
        let mut pace = Pace::new(t0, blind);
        pace.observe(t0, false, 0, (!blind).then_some(0));
        pace.round_starts(t0);
        pace.round_ended(t0, took, true);
        pace
    }

    /// Looks every `TICK` from `from` for `span`, with a body in flight and a commit at each
    /// look as `activity` says, and returns how long after `from` the first due round would
    /// start.
    fn first_due(
        pace: &mut Pace,
        from: Instant,
        span: Duration,
        activity: impl Fn(Duration) -> (bool, bool),
    ) -> Option<Duration> {
        let mut at = Duration::ZERO;
        while at <= span {
            let (in_flight, commit) = activity(at);
            let c = pace.commits + u64::from(commit);
            let version = (!pace.blind).then_some(c as i64);
            pace.observe(from + at, in_flight, c, version);
            if pace.due(from + at) {
                return Some(at);
            }
            at += TICK;
        }
        None
    }

    #[test]
    fn a_round_waits_for_a_burst_to_end() {
        let t0 = Instant::now();
        let mut pace = after_first_round(t0, 10 * MS);
        // Nothing changed: never due.
        assert_eq!(
            first_due(&mut pace, t0, 2 * FRESH, |_| (false, false)),
            None
        );
        // A burst of 300 ms, whose commits end at 100 ms while its last body is still being read
        // and parsed: the round follows it once the write path is quiet.
        let t1 = t0 + 2 * FRESH + TICK;
        let due = first_due(&mut pace, t1, FRESH, |at| (at < 300 * MS, at < 100 * MS)).unwrap();
        let last_commit = 300 * MS - TICK;
        assert!(
            due >= last_commit + WRITES_QUIET && due < last_commit + WRITES_QUIET + TICK,
            "{due:?}"
        );
    }

    #[test]
    fn writes_that_never_pause_still_reach_the_files_in_time() {
        let t0 = Instant::now();
        let mut pace = after_first_round(t0, 40 * MS);
        assert_eq!(first_due(&mut pace, t0, FRESH, |_| (false, false)), None);
        let t1 = t0 + FRESH + TICK;
        let due = first_due(&mut pace, t1, 2 * FRESH, |_| (false, true)).unwrap();
        // The change was first seen at t1, made since the look before it: the round starts in
        // time to finish within FRESH of that look, at the pace of the last round.
        let latest = FRESH - (40 * MS + 20 * MS + MARGIN) - TICK;
        assert!(due >= latest && due < latest + TICK, "{due:?}");
    }

    /// The deadline of a change: how long after `from` the round must start for the change to
    /// be in the files within `FRESH` of the look before it was seen, if the round takes as
    /// long as the last one did (`first_due` looks every `TICK`, so within one of that).
    fn deadline(took: Duration) -> Duration {
        FRESH - (took + took / 2 + MARGIN)
    }

    #[test]
    fn the_first_change_after_start_is_not_held_back_by_the_first_round() {
        // The first round wrote every organization's files, which took 432 ms; the first change
        // comes two seconds after it, on a quiet server.
        let t0 = Instant::now();
        let took = 432 * MS;
        let mut pace = after_first_round(t0, took);
        assert_eq!(
            first_due(&mut pace, t0, 2 * FRESH, |_| (false, false)),
            None
        );
        let t1 = t0 + 2 * FRESH + TICK;
        let due = first_due(&mut pace, t1, 10 * FRESH, |at| {
            (false, at == Duration::ZERO)
        })
        .expect("the change is written");
        assert!(due <= deadline(took), "{due:?}");
        assert!(due + took <= FRESH, "{due:?}");
    }

    #[test]
    fn a_round_of_a_large_list_does_not_hold_the_next_change_back() {
        // A round of two seconds (a list of millions of names): the next change starts a round
        // at once, not BUSY_SHARE times two seconds later, whether the server is quiet or busy.
        for busy in [false, true] {
            let t0 = Instant::now();
            let mut pace = after_first_round(t0, 2 * FRESH);
            let t1 = t0 + 3 * FRESH;
            let due = first_due(&mut pace, t1, 60 * FRESH, |at| (busy, at == Duration::ZERO));
            assert_eq!(due, Some(Duration::ZERO), "busy: {busy}");
        }
    }

    #[test]
    fn rounds_keep_their_spacing_within_the_deadline_and_a_blind_engine_looks_every_interval() {
        let t0 = Instant::now();
        // A round of 30 ms: a change on a quiet server waits for the spacing (BUSY_SHARE times
        // that), which ends before its deadline.
        let took = 30 * MS;
        let mut pace = after_first_round(t0, took);
        let due = first_due(&mut pace, t0, 4 * FRESH, |at| (false, at == Duration::ZERO)).unwrap();
        assert!(
            due >= took * BUSY_SHARE && due < took * BUSY_SHARE + TICK,
            "{due:?}"
        );
        assert!(due < deadline(took));
        // A round of 100 ms: the spacing would end after the deadline; the deadline wins.
        let took = 100 * MS;
        let mut pace = after_first_round(t0, took);
        let due = first_due(&mut pace, t0, 4 * FRESH, |at| (false, at == Duration::ZERO)).unwrap();
        assert!(deadline(took) < took * BUSY_SHARE);
        assert!(
            due >= deadline(took) - TICK && due <= deadline(took),
            "{due:?}"
        );
        // A short round: the spacing is INTERVAL.
        let mut pace = after_first_round(t0, MS);
        let due = first_due(&mut pace, t0, FRESH, |at| (false, at == Duration::ZERO)).unwrap();
        assert!(due >= INTERVAL && due < INTERVAL + TICK, "{due:?}");

        let mut blind = after_first_round_blind(t0, MS);
        let due = first_due(&mut blind, t0, FRESH, |_| (false, false)).unwrap();
        assert!(due >= INTERVAL && due <= INTERVAL + TICK, "{due:?}");
    }
}
