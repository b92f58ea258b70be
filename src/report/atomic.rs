//! Outputs written atomically: into a temporary file beside the target,
//! then renamed over it. A crash, a kill or a full disk part-way leaves the
//! old file (or none) under the final name, never a half-written JSON, CSV
//! or plot that a script downstream would read as complete.
//!
//! The temporary file lives in the target's own directory so that the
//! rename stays on one file system (rename(2) is atomic only there), and it
//! keeps the target's extension, because the PNG encoder picks its format
//! from it. Streams meant to be read while they grow (`--events`,
//! `--json-lines`, a live capture's `-w`) are not written this way: like
//! `tcpdump -w`, they are appended as they go.
//!
//! The file that appears is the one a shell's `>` would have left:
//! - A new file gets mode 0666 less the umask (a temporary file's own
//!   0600 would hide a report from the dashboard that reads it).
//! - A file written over keeps its mode and, where the process may set
//!   them (as root), its owner and group.
//! - A symbolic link is followed and the file it leads to is replaced,
//!   beside that file; the link itself stays (`latest.json ->
//!   runs/today.json` keeps pointing at today's report).
//! - A file that may be written in a directory where no file may be
//!   created (a report kept in someone else's directory) is written in
//!   place, truncated first, as `>` would: not atomic, but written.
//!
//! ```
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("report.json");
//! flowsieve::report::write_atomically(&path, b"{}\n").unwrap();
//! assert_eq!(std::fs::read(&path).unwrap(), b"{}\n");
//! ```

use std::io::Write;
use std::path::{Path, PathBuf};

/// A temporary file beside `path`, named after it and keeping its
/// extension, with the mode (and, where allowed, the owner) of the file
/// it will replace, or for a new file 0666 less the umask.
fn temp_beside(path: &Path) -> std::io::Result<tempfile::NamedTempFile> {
    let old = std::fs::metadata(path).ok().filter(|m| m.is_file());
    let tmp = temp_named_after(path)?;
    if let Some(old) = old {
        // The umask applied at creation is not applied to a mode copied
        // afterwards, so the old file's mode comes back whole.
        tmp.as_file().set_permissions(old.permissions())?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            // Only a privileged process may give a file away; otherwise
            // the new file is the writer's own, as with `cp`.
            let _ = std::os::unix::fs::fchown(tmp.as_file(), Some(old.uid()), Some(old.gid()));
        }
    }
    Ok(tmp)
}

/// A temporary file beside `path`, named after it and keeping its
/// extension; mode 0666 less the umask.
fn temp_named_after(path: &Path) -> std::io::Result<tempfile::NamedTempFile> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let suffix = path
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    let prefix = format!(".{name}.");
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix).suffix(&suffix);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        // The kernel takes the umask off the mode given at creation.
        builder.permissions(std::fs::Permissions::from_mode(0o666));
    }
    // tempfile's error names the temporary file, which the user never
    // asked for; the message names the directory instead.
    builder.tempfile_in(dir).map_err(|e| {
        let kind = e.kind();
        std::io::Error::new(
            kind,
            format!(
                "cannot create a file in {}: {}",
                dir.display(),
                std::io::Error::from(kind)
            ),
        )
    })
}

/// True when `path` is one of the names of standard output's descriptor:
/// `/dev/stdout`, `/dev/fd/1` or `/proc/self/fd/1`.
///
/// ```
/// use std::path::Path;
/// assert!(flowsieve::report::names_stdout(Path::new("/dev/stdout")));
/// assert!(!flowsieve::report::names_stdout(Path::new("stdout")));
/// ```
pub fn names_stdout(path: &Path) -> bool {
    ["/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"]
        .iter()
        .any(|p| path.as_os_str() == *p)
}

/// True when `path` asks for standard output: `-`, as tcpdump's `-w -`
/// and most tools take it, or one of the names [`names_stdout`] knows.
///
/// ```
/// use std::path::Path;
/// assert!(flowsieve::report::writes_stdout(Path::new("-")));
/// assert!(flowsieve::report::writes_stdout(Path::new("/dev/fd/1")));
/// assert!(!flowsieve::report::writes_stdout(Path::new("./-x")));
/// ```
pub fn writes_stdout(path: &Path) -> bool {
    path.as_os_str() == "-" || names_stdout(path)
}

/// Where a report written to a path goes.
#[derive(Debug, PartialEq, Eq)]
enum Destination {
    /// Written in place: a device, a FIFO, a socket, and the links of
    /// `/dev` and `/proc` (`/dev/stdout`, `/dev/stderr`, `/proc/self/fd/3`).
    InPlace,
    /// Written beside this file, then renamed over it: the path itself,
    /// or the file its symbolic links lead to.
    Renamed(PathBuf),
}

/// The most symbolic links followed in a chain, as Linux's own limit
/// (`MAXSYMLINKS`); a longer chain or a loop is written through, and the
/// open reports the loop.
const MOST_LINKS: usize = 40;

/// Where a report written to `path` goes.
///
/// Why the links of `/dev` and `/proc` are written through rather than
/// followed: they name descriptors. `/dev/stdout` with standard output
/// redirected to a file (`--json /dev/stdout > r.json`) leads to that
/// file, and replacing it would cut the shell's file out from under its
/// descriptor (and write over a file `>>` meant to append to); the same
/// goes for `/dev/stderr`. Renaming over the link itself would replace the
/// machine's link (as root) or fail for want of write access to `/dev`. A
/// plain file in those trees (under `/dev/shm`, say) is renamed over like
/// any other.
fn destination(path: &Path) -> Destination {
    let mut at = path.to_path_buf();
    for _ in 0..MOST_LINKS {
        let system = at.starts_with("/dev") || at.starts_with("/proc");
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                if system {
                    return Destination::InPlace;
                }
                let Ok(target) = std::fs::read_link(&at) else {
                    return Destination::InPlace;
                };
                // A relative target is relative to the link's directory;
                // an absolute one replaces the whole path in `join`.
                at = match at.parent() {
                    Some(dir) => dir.join(target),
                    None => target,
                };
            }
            // A directory is renamed over, and the rename names it.
            Ok(m) if !m.is_file() && !m.is_dir() => return Destination::InPlace,
            Ok(_) => return Destination::Renamed(at),
            // Nothing can be created in `/proc`: the open says so.
            Err(_) if at.starts_with("/proc") => return Destination::InPlace,
            Err(_) => return Destination::Renamed(at),
        }
    }
    Destination::InPlace
}

/// The file a write to `path` would create or replace, its symbolic links
/// followed as a write follows them; `None` for a target written in place
/// (a device, a FIFO, the links of `/dev` and `/proc`).
pub(crate) fn file_written_at(path: &Path) -> Option<PathBuf> {
    match destination(path) {
        Destination::Renamed(target) => Some(target),
        Destination::InPlace => None,
    }
}

/// Asks, before any work, whether a file can be written at `path`, so
/// that a read-only file system or a directory no file can be created in
/// (`/sys`) is found before a long run rather than after it. Nothing
/// at `path` changes: an existing file is opened for writing without
/// truncation (or, where that is refused, a temporary file is created
/// beside it, as a report renamed over it needs), and for a new one a
/// temporary file is created, and removed, where the write would create
/// it. A device, a FIFO (whose open
/// would wait for a reader) and standard output are only looked up.
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// let report = dir.path().join("r.json");
/// flowsieve::report::probe_writable(&report).unwrap();
/// assert!(!report.exists(), "the probe leaves nothing behind");
/// // No file can be created in `/proc`.
/// assert!(flowsieve::report::probe_writable(std::path::Path::new("/proc/r.json")).is_err());
/// ```
pub fn probe_writable(path: &Path) -> std::io::Result<()> {
    if writes_stdout(path) {
        return Ok(());
    }
    let Some(target) = file_written_at(path) else {
        // Opened in place, never created: it must be there.
        return std::fs::metadata(path).map(drop);
    };
    match std::fs::metadata(&target) {
        // A stream (`--events`, `-w`) opens the file itself; a report is
        // renamed over it, which needs only its directory. Either will do,
        // so that neither kind is refused for what the other needs.
        Ok(m) if m.is_file() => std::fs::OpenOptions::new()
            .write(true)
            .open(&target)
            .map(drop)
            .or_else(|e| temp_named_after(&target).map(drop).map_err(|_| e)),
        // A directory is refused by the caller's own check.
        Ok(_) => Ok(()),
        Err(_) => temp_named_after(&target).map(drop),
    }
}

/// Standard output as a file of its own: a duplicate of descriptor 1,
/// which shares the shell's file description (its offset, and its append
/// mode for `>>`), after what the process printed before is flushed.
///
/// Why a duplicate rather than opening `/dev/stdout`: opening that name
/// again truncates a file that `>` redirected to and starts a second
/// offset at its beginning, so the two writers overwrite each other.
///
/// ```
/// use std::io::Write;
/// print!("one ");
/// // "one " is flushed first, so "two" follows it on the same line.
/// let mut out = flowsieve::report::stdout_file().unwrap();
/// out.write_all(b"two\n").unwrap();
/// ```
pub fn stdout_file() -> std::io::Result<std::fs::File> {
    use std::os::fd::AsFd;
    std::io::stdout().flush()?;
    Ok(std::io::stdout().as_fd().try_clone_to_owned()?.into())
}

/// Opens `path` for writing in place: standard output's own names through
/// [`stdout_file`]; anything else as named.
fn open_in_place(path: &Path) -> std::io::Result<std::fs::File> {
    if names_stdout(path) {
        return stdout_file();
    }
    std::fs::OpenOptions::new().write(true).open(path)
}

/// An existing regular file at `target`, opened for writing and
/// truncated; `None` when there is none or it may not be written.
fn open_existing_truncated(target: &Path) -> Option<std::fs::File> {
    std::fs::metadata(target).ok().filter(|m| m.is_file())?;
    std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(target)
        .ok()
}

/// Writes `contents` to `path` atomically (temporary file, flush, sync,
/// rename).
pub fn write_atomically(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    write_atomically_with(path, |w| w.write_all(contents))
}

/// Writes `path` atomically through `write`, which gets a buffered writer
/// on the temporary file; nothing appears under `path` unless `write` and
/// the flush succeed.
pub fn write_atomically_with<T>(
    path: &Path,
    write: impl FnOnce(&mut std::io::BufWriter<&std::fs::File>) -> std::io::Result<T>,
) -> std::io::Result<T> {
    let Destination::Renamed(target) = destination(path) else {
        // A device or a pipe (`/dev/stdout`, a FIFO): written in place.
        // Renaming a file over it would replace the device node itself.
        let file = open_in_place(path)?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, &file);
        let value = write(&mut w)?;
        w.flush()?;
        return Ok(value);
    };
    let tmp = match temp_beside(&target) {
        Ok(tmp) => tmp,
        Err(e) => {
            // No file may be created beside it, but the file itself may be
            // written (a report kept in a directory of someone else's):
            // written in place, truncated first, as a shell's `>` would.
            // Not atomic, but the up-front probe passed it on those terms
            // ([`probe_writable`]), and refusing it here would cost the
            // whole run for a report the user may write.
            let Some(file) = open_existing_truncated(&target) else {
                return Err(e);
            };
            let mut w = std::io::BufWriter::with_capacity(1 << 20, &file);
            let value = write(&mut w)?;
            w.flush()?;
            file.sync_all()?;
            return Ok(value);
        }
    };
    let value = {
        let mut w = std::io::BufWriter::with_capacity(1 << 20, tmp.as_file());
        let value = write(&mut w)?;
        w.flush()?;
        value
    };
    tmp.as_file().sync_all()?;
    tmp.persist(&target).map_err(|e| e.error)?;
    Ok(value)
}

/// Lets `write` create a file at a temporary path beside `path` (for
/// encoders that open the file themselves, such as the plot backends), then
/// renames it over `path`. On an error the temporary file is removed.
pub fn write_atomically_to_path<T>(
    path: &Path,
    write: impl FnOnce(&Path) -> Result<T, String>,
) -> Result<T, String> {
    let Destination::Renamed(target) = destination(path) else {
        return write(path);
    };
    let tmp = temp_beside(&target)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .into_temp_path();
    let value = write(&tmp)?;
    tmp.persist(&target)
        .map_err(|e| format!("{}: {}", path.display(), e.error))?;
    Ok(value)
}
