//! Online backup and restore of the database file, for operators.
//!
//! A backup copies the live database with SQLite's online backup API in one step, that is inside
//! one read transaction: under WAL the server keeps writing meanwhile, and the copy is the
//! database as of one instant. The copy is switched to a rollback journal (a single
//! self-contained file), checked, fsynced and renamed into place, so the output path only ever
//! holds a complete backup.
//!
//! A restore never touches the current database until the replacement is known good: the input is
//! copied beside the database, checked (`integrity_check`, Parasol's tables, a schema version this
//! binary can open), fsynced, and only then renamed over it. The previous database stays beside it
//! as a hard link, `parasol.db.pre-restore-<unix time>`, together with any `-wal`/`-shm` it had,
//! so nothing is lost and no stale WAL can be replayed onto the restored file. The caller must
//! hold the data directory's lock (`crate::datadir`): no server may have the database open.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use super::migrate::SCHEMA_VERSION;

/// Tables every Parasol database has since schema version 1.
const PARASOL_TABLES: &[&str] = &[
    "packages",
    "organizations",
    "customer_keys",
    "api_credentials",
    "domains",
    "event_batches",
];

/// Sidecar files SQLite may keep beside a database.
const SIDECARS: &[&str] = &["-wal", "-shm", "-journal"];

/// What a backup wrote.
#[derive(Debug, Clone)]
pub struct BackupInfo {
    pub bytes: u64,
    pub schema_version: i64,
}

/// What a restore did.
#[derive(Debug, Clone)]
pub struct RestoreInfo {
    pub bytes: u64,
    pub schema_version: i64,
    /// Where the replaced database was kept, if there was one.
    pub previous: Option<PathBuf>,
}

fn sql_err(what: &Path) -> impl Fn(rusqlite::Error) -> String + '_ {
    move |e| format!("{}: {e}", what.display())
}

fn io_err(what: &Path) -> impl Fn(std::io::Error) -> String + '_ {
    move |e| format!("{}: {e}", what.display())
}

/// `path` with `suffix` appended to its file name.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// A temporary name beside `path`, private to this process.
fn temp_beside(path: &Path, what: &str) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.{what}-{}", std::process::id()))
}

fn parent_of(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// fsyncs a directory so that a rename inside it is durable.
fn sync_dir(dir: &Path) -> Result<(), String> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

/// Creates an empty file readable only by its owner (removing a leftover of a failed run first).
fn create_private(path: &Path) -> Result<File, String> {
    let _ = std::fs::remove_file(path);
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io_err(path))
}

/// True when `a` and `b` name the same file (or would, once created).
fn same_file(a: &Path, b: &Path) -> bool {
    let canon = |p: &Path| -> Option<PathBuf> {
        let dir = std::fs::canonicalize(parent_of(p)).ok()?;
        Some(dir.join(p.file_name()?))
    };
    match (canon(a), canon(b)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

/// Checks that `conn` holds an intact Parasol database this binary can open; returns its schema
/// version.
pub fn verify(conn: &Connection) -> Result<i64, String> {
    let not_parasol = |e: rusqlite::Error| match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::DatabaseCorrupt) => format!("the database is damaged: {e}"),
        _ => format!("not a Parasol database: {e}"),
    };
    let problems: Vec<String> = conn
        .prepare("PRAGMA integrity_check(20)")
        .and_then(|mut st| {
            st.query_map([], |r| r.get::<_, String>(0))?
                .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(not_parasol)?;
    if problems.first().map(String::as_str) != Some("ok") {
        return Err(format!(
            "the database is damaged (integrity_check): {}",
            problems.join("; ")
        ));
    }
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(not_parasol)?;
    if version > SCHEMA_VERSION {
        return Err(format!(
            "the database has schema version {version}, newer than this binary supports \
             ({SCHEMA_VERSION}); install the parasol that wrote it"
        ));
    }
    let mut missing = Vec::new();
    for t in PARASOL_TABLES {
        let n: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
                [t],
                |r| r.get(0),
            )
            .map_err(not_parasol)?;
        if n == 0 {
            missing.push(*t);
        }
    }
    if version < 1 || !missing.is_empty() {
        return Err(format!(
            "not a Parasol database (schema version {version}, missing tables: {})",
            missing.join(", ")
        ));
    }
    Ok(version)
}

/// Copies the live database at `db` to `output` (replacing it atomically) while a server may be
/// writing to it.
pub fn backup(db: &Path, output: &Path) -> Result<BackupInfo, String> {
    if !db.is_file() {
        return Err(format!("{}: no database here", db.display()));
    }
    if same_file(db, output)
        || SIDECARS
            .iter()
            .any(|s| same_file(&with_suffix(db, s), output))
    {
        return Err(format!(
            "{}: the backup cannot overwrite the database itself",
            output.display()
        ));
    }
    // Read-write (never create): under WAL even a reader may need to set up the shared memory.
    let src = Connection::open_with_flags(
        db,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(sql_err(db))?;
    src.busy_timeout(Duration::from_secs(10))
        .map_err(sql_err(db))?;

    let tmp = temp_beside(output, "tmp");
    create_private(&tmp)?;
    let result = (|| -> Result<BackupInfo, String> {
        let mut dst = Connection::open(&tmp).map_err(sql_err(&tmp))?;
        {
            let b = rusqlite::backup::Backup::new(&src, &mut dst).map_err(sql_err(db))?;
            // All pages in one step: one read transaction, so one consistent snapshot; under WAL
            // it does not hold up the server's writer. Smaller steps would restart whenever the
            // server commits, possibly for ever. BUSY (a checkpoint or recovery in progress) is
            // retried for a bounded time.
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            loop {
                match b.step(-1).map_err(sql_err(db))? {
                    rusqlite::backup::StepResult::Done => break,
                    _ if std::time::Instant::now() > deadline => {
                        return Err(format!("{}: database busy for 60 s", db.display()))
                    }
                    _ => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        }
        // A single self-contained file: no -wal needed beside the backup.
        dst.pragma_update(None, "journal_mode", "DELETE")
            .map_err(sql_err(&tmp))?;
        let schema_version = verify(&dst).map_err(|e| format!("the copy failed its check: {e}"))?;
        dst.close().map_err(|(_, e)| sql_err(&tmp)(e))?;
        let f = File::open(&tmp).map_err(io_err(&tmp))?;
        f.sync_all().map_err(io_err(&tmp))?;
        let bytes = f.metadata().map_err(io_err(&tmp))?.len();
        std::fs::rename(&tmp, output).map_err(io_err(output))?;
        sync_dir(parent_of(output))?;
        Ok(BackupInfo {
            bytes,
            schema_version,
        })
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
        let _ = std::fs::remove_file(with_suffix(&tmp, "-journal"));
    }
    result
}

/// Replaces the database at `db` with the backup `input`. The caller holds the data directory's
/// lock. On any failure before the final rename the current database is untouched.
pub fn restore(db: &Path, input: &Path) -> Result<RestoreInfo, String> {
    if !input.is_file() {
        return Err(format!("{}: no such file", input.display()));
    }
    if same_file(db, input) {
        return Err(format!("{}: that is the database itself", input.display()));
    }
    let dir = parent_of(db);
    let tmp = temp_beside(db, "restore");
    let result = prepare_replacement(db, input, &tmp).and_then(|(bytes, schema_version)| {
        let previous = set_aside(db)?;
        if let Err(e) = std::fs::rename(&tmp, db) {
            return Err(format!(
                "{}: {e}; the previous database is unchanged{}",
                db.display(),
                previous
                    .as_ref()
                    .map(|p| format!(" (also kept as {})", p.display()))
                    .unwrap_or_default()
            ));
        }
        sync_dir(dir)?;
        Ok(RestoreInfo {
            bytes,
            schema_version,
            previous,
        })
    });
    if result.is_err() {
        for s in ["", "-journal", "-wal", "-shm"] {
            let _ = std::fs::remove_file(with_suffix(&tmp, s));
        }
    }
    result
}

/// Copies `input` to `tmp`, checks it, makes it a self-contained file owned like the database it
/// replaces, and syncs it. Returns its size and schema version.
fn prepare_replacement(db: &Path, input: &Path, tmp: &Path) -> Result<(u64, i64), String> {
    let mut out = create_private(tmp)?;
    let mut inp = File::open(input).map_err(io_err(input))?;
    std::io::copy(&mut inp, &mut out).map_err(io_err(tmp))?;
    out.sync_all().map_err(io_err(tmp))?;
    drop(out);

    let conn = Connection::open_with_flags(
        tmp,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(sql_err(input))?;
    let version = verify(&conn).map_err(|e| format!("{}: {e}", input.display()))?;
    conn.pragma_update(None, "journal_mode", "DELETE")
        .map_err(sql_err(input))?;
    conn.close().map_err(|(_, e)| sql_err(input)(e))?;

    // Owned like the database it replaces (or its directory), so that a restore run as root
    // leaves a file the service user can open.
    let like = if db.exists() { db } else { parent_of(db) };
    let meta = std::fs::metadata(like).map_err(io_err(like))?;
    let mine = std::fs::metadata(tmp).map_err(io_err(tmp))?;
    if (mine.uid(), mine.gid()) != (meta.uid(), meta.gid()) {
        std::os::unix::fs::chown(tmp, Some(meta.uid()), Some(meta.gid())).map_err(|e| {
            format!(
                "{}: cannot give it the owner of {} ({e}); run restore as root or as that user",
                tmp.display(),
                like.display()
            )
        })?;
    }
    std::fs::set_permissions(tmp, std::fs::Permissions::from_mode(0o600)).map_err(io_err(tmp))?;
    let f = File::open(tmp).map_err(io_err(tmp))?;
    f.sync_all().map_err(io_err(tmp))?;
    let bytes = f.metadata().map_err(io_err(tmp))?.len();
    Ok((bytes, version))
}

/// Keeps the current database (if any) as `<db>.pre-restore-<unix time>` by a hard link and moves
/// its sidecar files along with it, so the WAL of the old database can never be applied to the
/// restored one. Returns the kept path.
fn set_aside(db: &Path) -> Result<Option<PathBuf>, String> {
    if !db.exists() {
        // Sidecars without a database are stale by definition.
        for s in SIDECARS {
            let p = with_suffix(db, s);
            if p.exists() {
                std::fs::remove_file(&p).map_err(io_err(&p))?;
            }
        }
        return Ok(None);
    }
    // Best effort: fold the WAL into the file, so the kept copy is complete on its own. A damaged
    // database may refuse; its sidecars are then kept beside the copy instead.
    if let Ok(c) = Connection::open_with_flags(
        db,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    ) {
        let _ = c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
        let _ = c.close();
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut kept = with_suffix(db, &format!(".pre-restore-{now}"));
    let mut n = 1;
    while kept.exists() {
        kept = with_suffix(db, &format!(".pre-restore-{now}.{n}"));
        n += 1;
    }
    std::fs::hard_link(db, &kept).map_err(io_err(&kept))?;
    let mut moved: Vec<(PathBuf, PathBuf)> = Vec::new();
    for s in SIDECARS {
        let from = with_suffix(db, s);
        if !from.exists() {
            continue;
        }
        let to = with_suffix(&kept, s);
        if let Err(e) = std::fs::rename(&from, &to) {
            // Undo, so the current database keeps its WAL.
            for (f, t) in moved.iter().rev() {
                let _ = std::fs::rename(t, f);
            }
            let _ = std::fs::remove_file(&kept);
            return Err(format!("{}: {e}", from.display()));
        }
        moved.push((from, to));
    }
    Ok(Some(kept))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::TempDir;

    fn org_count(db: &Path) -> i64 {
        let c = Connection::open(db).unwrap();
        c.query_row("SELECT count(*) FROM organizations", [], |r| r.get(0))
            .unwrap()
    }

    fn add_org(c: &Connection, name: &str) {
        c.execute(
            "INSERT INTO organizations (name, created_at, modified_at) VALUES (?1, 0, 0)",
            [name],
        )
        .unwrap();
    }

    #[test]
    fn backup_while_a_connection_writes_then_restore_keeps_the_old_database() {
        let d = TempDir::new("bk");
        let db = d.join("parasol.db");
        let live = super::super::open_migrated(&db).unwrap();
        add_org(&live, "one");
        let out = d.join("b.db");
        let info = backup(&db, &out).unwrap();
        assert_eq!(info.schema_version, SCHEMA_VERSION);
        assert!(!with_suffix(&out, "-wal").exists(), "self-contained");
        assert_eq!(
            std::fs::metadata(&out).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // The live connection writes on: the backup is unaffected.
        add_org(&live, "two");
        assert_eq!(org_count(&out), 1);
        drop(live);

        let r = restore(&db, &out).unwrap();
        assert_eq!(r.schema_version, SCHEMA_VERSION);
        let kept = r.previous.unwrap();
        assert_eq!(org_count(&db), 1);
        assert_eq!(org_count(&kept), 2, "the replaced database is kept whole");
    }

    #[test]
    fn restore_after_a_crash_keeps_the_committed_wal_with_the_old_database() {
        let d = TempDir::new("bk");
        let db = d.join("parasol.db");
        let out = d.join("b.db");
        {
            let c = super::super::open_migrated(&db).unwrap();
            add_org(&c, "in the backup");
        }
        backup(&db, &out).unwrap();
        // A "crashed" server: its last commit is only in the WAL, and it never closed.
        let c = super::super::open_migrated(&db).unwrap();
        c.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
        add_org(&c, "only in the wal");
        assert!(std::fs::metadata(with_suffix(&db, "-wal")).unwrap().len() > 0);
        std::mem::forget(c);

        let r = restore(&db, &out).unwrap();
        assert_eq!(
            org_count(&db),
            1,
            "the restored database has no stale WAL applied"
        );
        assert_eq!(
            org_count(&r.previous.unwrap()),
            2,
            "the kept copy has its last commit"
        );
    }

    #[test]
    fn refuses_what_is_not_a_parasol_database_and_leaves_the_current_one() {
        let d = TempDir::new("bk");
        let db = d.join("parasol.db");
        let live = super::super::open_migrated(&db).unwrap();
        add_org(&live, "keep");
        drop(live);

        let junk = d.join("junk");
        std::fs::write(&junk, b"this is not SQLite at all, just words.").unwrap();
        let e = restore(&db, &junk).unwrap_err();
        assert!(e.contains("not a Parasol database"), "{e}");

        let other = d.join("other.db");
        Connection::open(&other)
            .unwrap()
            .execute_batch("CREATE TABLE t (x); PRAGMA user_version = 1;")
            .unwrap();
        let e = restore(&db, &other).unwrap_err();
        assert!(e.contains("missing tables"), "{e}");

        let newer = d.join("newer.db");
        backup(&db, &newer).unwrap();
        Connection::open(&newer)
            .unwrap()
            .pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        let e = restore(&db, &newer).unwrap_err();
        assert!(e.contains("newer than this binary"), "{e}");

        let e = restore(&db, &db).unwrap_err();
        assert!(e.contains("database itself"), "{e}");
        let e = backup(&db, &db).unwrap_err();
        assert!(e.contains("database itself"), "{e}");

        assert_eq!(org_count(&db), 1);
        let names: Vec<String> = std::fs::read_dir(&*d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            !names
                .iter()
                .any(|n| n.contains("restore") || n.contains(".tmp")),
            "no temporary or kept files after refusals: {names:?}"
        );
    }

    #[test]
    fn a_failed_backup_leaves_no_output_and_no_temporary_file() {
        let d = TempDir::new("bk");
        let e = backup(&d.join("parasol.db"), &d.join("b.db")).unwrap_err();
        assert!(e.contains("no database"), "{e}");
        assert_eq!(std::fs::read_dir(&*d).unwrap().count(), 0);
    }
}
