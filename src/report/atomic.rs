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
//! ```
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("report.json");
//! flowsieve::report::write_atomically(&path, b"{}\n").unwrap();
//! assert_eq!(std::fs::read(&path).unwrap(), b"{}\n");
//! ```

use std::io::Write;
use std::path::Path;

/// A temporary file beside `path`, named after it and keeping its
/// extension.
fn temp_beside(path: &Path) -> std::io::Result<tempfile::NamedTempFile> {
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
    tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(&suffix)
        .tempfile_in(dir)
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

/// True when `path` is written in place rather than renamed over: anything
/// under `/dev` or `/proc`, and anything that exists and is not a regular
/// file or a directory (a character device, a FIFO, a socket).
///
/// Why the two trees by name: `/dev/stdout` with standard output
/// redirected to a file (`--json /dev/stdout > r.json`) stats as that
/// regular file, and a temporary renamed over it would replace the device
/// link itself (as root, for the whole machine), or fail for want of
/// write access to `/dev`. The price: a plain file under `/dev/shm` is
/// written in place too, without the rename's all-or-nothing.
fn is_special(path: &Path) -> bool {
    path.starts_with("/dev")
        || path.starts_with("/proc")
        || std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir())
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
    if is_special(path) {
        // A device or a pipe (`/dev/stdout`, a FIFO): written in place.
        // Renaming a file over it would replace the device node itself.
        let file = open_in_place(path)?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, &file);
        let value = write(&mut w)?;
        w.flush()?;
        return Ok(value);
    }
    let tmp = temp_beside(path)?;
    let value = {
        let mut w = std::io::BufWriter::with_capacity(1 << 20, tmp.as_file());
        let value = write(&mut w)?;
        w.flush()?;
        value
    };
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(value)
}

/// Lets `write` create a file at a temporary path beside `path` (for
/// encoders that open the file themselves, such as the plot backends), then
/// renames it over `path`. On an error the temporary file is removed.
pub fn write_atomically_to_path<T>(
    path: &Path,
    write: impl FnOnce(&Path) -> Result<T, String>,
) -> Result<T, String> {
    if is_special(path) {
        return write(path);
    }
    let tmp = temp_beside(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .into_temp_path();
    let value = write(&tmp)?;
    tmp.persist(path)
        .map_err(|e| format!("{}: {}", path.display(), e.error))?;
    Ok(value)
}
