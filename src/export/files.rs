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
/// durable once the directory is synced: `sync_dir` (which `write_atomically` does at once; the
/// exporter does it once for all the files of a round, before the reload command runs).
pub fn replace_with(
    path: &Path,
    write: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<()>,
) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let tmp = temporary(path);
    let result = (|| {
        let f = std::fs::File::create(&tmp)?;
        f.set_permissions(std::fs::Permissions::from_mode(MODE))?;
        let mut w = std::io::BufWriter::with_capacity(256 * 1024, f);
        write(&mut w)?;
        let f = w.into_inner().map_err(|e| e.into_error())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
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
