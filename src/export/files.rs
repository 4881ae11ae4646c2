//! Replacing exported files so that a resolver never reads a half-written one, and a power cut
//! leaves either the old or the new file.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The temporary file a new version of `path` is written to before it is renamed over it: in the
/// same directory (a rename is atomic only within one file system), hidden by its leading dot
/// from the globs resolvers include files with (`org-*.unbound.conf`), and named after this
/// process so that two writers never share one.
fn temporary(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    dir_of(path).join(format!(".{name}.tmp-{}", std::process::id()))
}

/// Whether a directory entry is a temporary file left by `replace` (by a process that died
/// before renaming it).
pub fn is_temporary(name: &str) -> bool {
    name.starts_with('.') && name.contains(".tmp-")
}

fn dir_of(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// The mode of a written file, whatever the process's umask (the packaged service runs with 0077):
/// the resolvers that read the files run as users of their own. Who may reach the files is the
/// directory's to decide.
pub const MODE: u32 = 0o644;

/// Replaces `path` with what `write` writes: written to a temporary file beside it, synced, then
/// renamed over it, so that a reader sees the old file or the new one, never a part. The rename is
/// durable once the directory is synced: `sync_dir`, which `write_atomically` does at once. For
/// many files at a time, `Batch` syncs them together instead of one by one.
pub fn replace_with(
    path: &Path,
    write: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let tmp = temporary(path);
    let result = (|| {
        write_temporary(&tmp, write)?.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Up to this many files, a batch is made durable by syncing each file (`fsync`); past it, by
/// syncing the whole file system once (`syncfs`). One `fsync` costs about a journal commit of the
/// file system (0.86 ms for a small file on the benchmark's disk, so 43 s for the 50,010 files of
/// a first round of 10,002 organizations), while `syncfs` writes out whatever is dirty on the file
/// system, other processes' writes included: for the few files of an ordinary round (one
/// organization's four formats) the `fsync`s cost less and do not wait for other processes.
pub const FEW: usize = 16;

/// Replacements and appends made durable together: each replacement is written to its temporary
/// file at once (`stage_with`), then `commit` syncs them all (and the files appended to), renames
/// them over their files, and syncs each directory once. So a round of many files costs one pass
/// of syncs instead of a sync per file, and the crash rule holds as for `replace_with`: nothing is
/// renamed before every temporary file is durable, so after a crash each file is its old content
/// or its new one, whole; an append cut short is a record the journal's reader ignores.
#[derive(Default)]
pub struct Batch {
    /// The file to replace, and the temporary file holding its new content (written, not yet
    /// synced).
    staged: std::collections::BTreeMap<PathBuf, PathBuf>,
    /// Files appended to, not yet synced.
    appended: std::collections::BTreeSet<PathBuf>,
}

/// What `Batch::commit` does to the disk, apart so that its order can be checked.
trait Disk {
    /// Makes the content of these files durable.
    fn sync_files(&mut self, files: &[&Path]) -> std::io::Result<()>;
    fn rename(&mut self, from: &Path, to: &Path) -> std::io::Result<()>;
    fn sync_dir(&mut self, dir: &Path) -> std::io::Result<()>;
}

struct RealDisk;

impl Disk for RealDisk {
    fn sync_files(&mut self, files: &[&Path]) -> std::io::Result<()> {
        if files.len() <= FEW {
            for f in files {
                std::fs::File::open(f)?.sync_all()?;
            }
            return Ok(());
        }
        // Once per file system the files are on (their directories', usually one).
        let dirs: std::collections::BTreeSet<&Path> = files.iter().map(|f| dir_of(f)).collect();
        let mut seen = std::collections::BTreeSet::new();
        for dir in dirs {
            use std::os::unix::fs::MetadataExt;
            let d = std::fs::File::open(dir)?;
            if !seen.insert(d.metadata()?.dev()) {
                continue;
            }
            use std::os::fd::AsRawFd;
            // SAFETY: syncfs only reads the descriptor, which `d` keeps open.
            if unsafe { libc::syncfs(d.as_raw_fd()) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }

    fn rename(&mut self, from: &Path, to: &Path) -> std::io::Result<()> {
        std::fs::rename(from, to)
    }

    fn sync_dir(&mut self, dir: &Path) -> std::io::Result<()> {
        sync_dir(dir)
    }
}

impl Batch {
    /// Writes the new content of `path` (what `write` writes) to its temporary file, put in
    /// place by `commit`. Staged again before the commit, the newer content wins.
    pub fn stage_with(
        &mut self,
        path: &Path,
        write: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let tmp = temporary(path);
        match write_temporary(&tmp, write) {
            Ok(_written) => {
                self.staged.insert(path.to_path_buf(), tmp);
                Ok(())
            }
            Err(e) => {
                self.staged.remove(path);
                let _ = std::fs::remove_file(&tmp);
                Err(e)
            }
        }
    }

    /// `path` was appended to: synced by `commit`.
    pub fn appended(&mut self, path: &Path) {
        self.appended.insert(path.to_path_buf());
    }

    /// Forgets what was staged for `path` (its temporary file removed): the file is about to be
    /// removed.
    pub fn discard(&mut self, path: &Path) {
        self.appended.remove(path);
        if let Some(tmp) = self.staged.remove(path) {
            let _ = std::fs::remove_file(tmp);
        }
    }

    /// Whether `tmp` is the temporary file of a staged replacement (not a leftover).
    pub fn holds_temporary(&self, tmp: &Path) -> bool {
        let suffix = format!(".tmp-{}", std::process::id());
        let name = tmp.file_name().map(|n| n.to_string_lossy().into_owned());
        let Some(name) = name
            .as_deref()
            .and_then(|n| n.strip_prefix('.')?.strip_suffix(&suffix))
        else {
            return false;
        };
        self.staged
            .get(&dir_of(tmp).join(name))
            .map(PathBuf::as_path)
            == Some(tmp)
    }

    /// Forgets everything staged and appended (the temporary files removed).
    pub fn clear(&mut self) {
        for tmp in std::mem::take(&mut self.staged).into_values() {
            let _ = std::fs::remove_file(tmp);
        }
        self.appended.clear();
    }

    pub fn is_empty(&self) -> bool {
        self.staged.is_empty() && self.appended.is_empty()
    }

    /// Makes everything staged and appended durable, then renames the staged files over theirs
    /// and syncs their directories (and `also`, where files were removed), each once; returns
    /// how many files it put in place. If the sync fails nothing is renamed and everything stays
    /// staged; a rename that fails stays staged: the next commit tries again.
    pub fn commit(&mut self, also: &[&Path]) -> std::io::Result<usize> {
        self.commit_on(&mut RealDisk, also)
    }

    fn commit_on(&mut self, disk: &mut impl Disk, also: &[&Path]) -> std::io::Result<usize> {
        let mut dirs: std::collections::BTreeSet<PathBuf> =
            also.iter().map(|d| d.to_path_buf()).collect();
        if !self.is_empty() {
            let files: Vec<&Path> = self
                .staged
                .values()
                .chain(self.appended.iter())
                .map(PathBuf::as_path)
                .collect();
            disk.sync_files(&files)?;
        }
        let mut failure = None;
        let mut done = 0;
        for (path, tmp) in std::mem::take(&mut self.staged) {
            dirs.insert(dir_of(&path).to_path_buf());
            match disk.rename(&tmp, &path) {
                Ok(()) => done += 1,
                Err(e) => {
                    failure.get_or_insert(std::io::Error::new(
                        e.kind(),
                        format!("{}: {e}", path.display()),
                    ));
                    self.staged.insert(path, tmp);
                }
            }
        }
        for path in std::mem::take(&mut self.appended) {
            dirs.insert(dir_of(&path).to_path_buf());
        }
        for dir in dirs {
            disk.sync_dir(&dir)?;
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(done),
        }
    }
}

fn write_temporary(
    tmp: &Path,
    write: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<()>,
) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::PermissionsExt;
    let f = std::fs::File::create(tmp)?;
    f.set_permissions(std::fs::Permissions::from_mode(MODE))?;
    let mut w = std::io::BufWriter::with_capacity(256 * 1024, f);
    write(&mut w)?;
    w.into_inner().map_err(|e| e.into_error())
}

/// `replace_with` for bytes at hand.
pub fn replace(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    replace_with(path, |w| w.write_all(bytes))
}

/// Makes the renames and removals done in `dir` durable.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// `replace`, then `sync_dir`: one file replaced atomically and durably.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), String> {
    replace(path, bytes)
        .and_then(|()| sync_dir(dir_of(path)))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Removes `path` if it exists.
pub fn remove(path: &Path) -> std::io::Result<bool> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replaced_file_has_the_new_content_and_no_temporary_file_is_left() {
        let dir = crate::testdir::TempDir::new("export-files");
        let path = dir.join("org-1.hosts");
        write_atomically(&path, b"one\n").unwrap();
        write_atomically(&path, b"two\n").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two\n");
        let names: Vec<String> = std::fs::read_dir(&*dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["org-1.hosts"]);
        assert!(is_temporary(
            &temporary(&path).file_name().unwrap().to_string_lossy()
        ));
        assert!(!is_temporary("org-1.hosts"));
        assert!(remove(&path).unwrap());
        assert!(!remove(&path).unwrap());
    }

    /// The files are readable by the resolvers' own users even under the packaged service's
    /// umask of 0077.
    #[test]
    fn files_are_readable_by_others_whatever_the_umask() {
        use std::os::unix::fs::PermissionsExt;
        let dir = crate::testdir::TempDir::new("export-files-mode");
        let path = dir.join("org-5.unbound.conf");
        // SAFETY: umask only sets this process's file creation mask (restored below).
        let old = unsafe { libc::umask(0o077) };
        let written = write_atomically(&path, b"server:\n");
        // SAFETY: as above.
        unsafe { libc::umask(old) };
        written.unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, MODE);
    }

    /// A reader that opened the old file keeps reading the old content whole while the new one is
    /// put in place: the file is replaced, never rewritten in place.
    #[test]
    fn an_open_reader_keeps_the_old_file_whole() {
        let dir = crate::testdir::TempDir::new("export-files-reader");
        let path = dir.join("org-2.rpz");
        write_atomically(&path, b"old content\n").unwrap();
        let mut reader = std::fs::File::open(&path).unwrap();
        write_atomically(&path, b"new\n").unwrap();
        let mut seen = String::new();
        std::io::Read::read_to_string(&mut reader, &mut seen).unwrap();
        assert_eq!(seen, "old content\n");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new\n");
    }

    /// Records what a commit does to the disk, in order; fails the operations on the paths it
    /// is told to.
    #[derive(Default)]
    struct Recorder {
        ops: Vec<String>,
        fail_sync: bool,
        fail_rename: Option<PathBuf>,
    }

    impl Disk for Recorder {
        fn sync_files(&mut self, files: &[&Path]) -> std::io::Result<()> {
            self.ops.push(format!("sync {}", files.len()));
            if self.fail_sync {
                return Err(std::io::Error::other("sync failed"));
            }
            Ok(())
        }

        fn rename(&mut self, from: &Path, to: &Path) -> std::io::Result<()> {
            if self.fail_rename.as_deref() == Some(to) {
                return Err(std::io::Error::other("rename failed"));
            }
            self.ops.push(format!(
                "rename {}",
                to.file_name().unwrap().to_string_lossy()
            ));
            RealDisk.rename(from, to)
        }

        fn sync_dir(&mut self, dir: &Path) -> std::io::Result<()> {
            self.ops.push(format!("sync dir {}", dir.display()));
            Ok(())
        }
    }

    /// A batch syncs every temporary file (and every file appended to) before it renames any,
    /// and syncs each directory once, after the renames: a crash at any point leaves each file
    /// old or new, whole. Until the commit the files keep their old content.
    #[test]
    fn a_batch_syncs_everything_before_renaming_and_each_directory_once_after() {
        let dir = crate::testdir::TempDir::new("export-files-batch");
        let (a, b, log) = (
            dir.join("org-1.hosts"),
            dir.join("org-2.hosts"),
            dir.join("j"),
        );
        write_atomically(&a, b"old a\n").unwrap();
        std::fs::write(&log, b"record 1\n").unwrap();
        let mut batch = Batch::default();
        batch.stage_with(&a, |w| w.write_all(b"new a\n")).unwrap();
        batch.stage_with(&b, |w| w.write_all(b"new b\n")).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&log)
            .unwrap()
            .write_all(b"record 2\n")
            .unwrap();
        batch.appended(&log);
        assert_eq!(std::fs::read(&a).unwrap(), b"old a\n");
        assert!(!b.exists());
        assert!(batch.holds_temporary(&temporary(&a)));
        assert!(!batch.holds_temporary(&dir.join(".org-3.hosts.tmp-1")));
        let mut disk = Recorder::default();
        assert_eq!(batch.commit_on(&mut disk, &[&dir]).unwrap(), 2);
        let shown = dir.display();
        assert_eq!(
            disk.ops,
            vec![
                "sync 3".to_string(),
                "rename org-1.hosts".into(),
                "rename org-2.hosts".into(),
                format!("sync dir {shown}"),
            ]
        );
        assert_eq!(std::fs::read(&a).unwrap(), b"new a\n");
        assert_eq!(std::fs::read(&b).unwrap(), b"new b\n");
        assert!(batch.is_empty());
        // Nothing staged: the directory alone (removals) is synced.
        let mut disk = Recorder::default();
        assert_eq!(batch.commit_on(&mut disk, &[&dir]).unwrap(), 0);
        assert_eq!(disk.ops, vec![format!("sync dir {shown}")]);
    }

    /// A failed sync renames nothing and keeps everything staged; a failed rename keeps that
    /// file staged (its old content in place) and the others go ahead; the next commit puts
    /// the rest in place.
    #[test]
    fn what_a_failed_commit_did_not_put_in_place_stays_staged_for_the_next() {
        let dir = crate::testdir::TempDir::new("export-files-batch-fail");
        let (a, b) = (dir.join("org-1.rpz"), dir.join("org-2.rpz"));
        write_atomically(&a, b"old a\n").unwrap();
        write_atomically(&b, b"old b\n").unwrap();
        let mut batch = Batch::default();
        batch.stage_with(&a, |w| w.write_all(b"new a\n")).unwrap();
        batch.stage_with(&b, |w| w.write_all(b"new b\n")).unwrap();
        let mut disk = Recorder {
            fail_sync: true,
            ..Recorder::default()
        };
        assert!(batch.commit_on(&mut disk, &[]).is_err());
        assert_eq!(disk.ops, vec!["sync 2"]);
        assert_eq!(std::fs::read(&a).unwrap(), b"old a\n");
        let mut disk = Recorder {
            fail_rename: Some(a.clone()),
            ..Recorder::default()
        };
        assert!(batch.commit_on(&mut disk, &[]).is_err());
        assert_eq!(std::fs::read(&a).unwrap(), b"old a\n");
        assert_eq!(std::fs::read(&b).unwrap(), b"new b\n");
        assert_eq!(batch.commit(&[]).unwrap(), 1);
        assert_eq!(std::fs::read(&a).unwrap(), b"new a\n");
        // Staged, then discarded (the organization removed): its temporary file goes too.
        batch.stage_with(&b, |w| w.write_all(b"newer b\n")).unwrap();
        batch.discard(&b);
        assert!(batch.is_empty());
        let mut names: Vec<String> = std::fs::read_dir(&*dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, vec!["org-1.rpz", "org-2.rpz"]);
        assert_eq!(std::fs::read(&b).unwrap(), b"new b\n");
    }

    /// Past `FEW` files, the batch is synced by syncing the file system: the files are in place
    /// all the same.
    #[test]
    fn a_batch_of_many_files_is_put_in_place() {
        let dir = crate::testdir::TempDir::new("export-files-batch-many");
        let mut batch = Batch::default();
        let paths: Vec<PathBuf> = (0..FEW + 4)
            .map(|i| dir.join(format!("org-{i}.hosts")))
            .collect();
        for (i, p) in paths.iter().enumerate() {
            batch.stage_with(p, |w| writeln!(w, "{i}")).unwrap();
        }
        assert_eq!(batch.commit(&[]).unwrap(), paths.len());
        for (i, p) in paths.iter().enumerate() {
            assert_eq!(std::fs::read_to_string(p).unwrap(), format!("{i}\n"));
        }
        assert_eq!(std::fs::read_dir(&*dir).unwrap().count(), paths.len());
    }

    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_temporary_one() {
        let dir = crate::testdir::TempDir::new("export-files-fail");
        let path = dir.join("org-3.hosts");
        write_atomically(&path, b"kept\n").unwrap();
        // A directory where the file should go: the rename fails.
        let blocked = dir.join("org-4.hosts");
        std::fs::create_dir(&blocked).unwrap();
        std::fs::write(blocked.join("x"), b"").unwrap();
        assert!(write_atomically(&blocked, b"new\n").is_err());
        let mut names: Vec<String> = std::fs::read_dir(&*dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, vec!["org-3.hosts", "org-4.hosts"]);
        assert_eq!(std::fs::read(&path).unwrap(), b"kept\n");
    }
}
