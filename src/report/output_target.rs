//! Refusing to write a report over a trace.
//!
//! Why: `--json FILE` and `--events FILE` take a path right where a trace
//! path is typed, so `flowsieve --json big.pcap` (the trace argument
//! forgotten after the flag) replaces a capture that may have taken hours
//! to record with a few kilobytes of JSON, and the report it wrote is of
//! the bundled trace, not of `big.pcap`. tcpdump's `-w` overwrites because
//! it writes captures; a report never should. So before any work starts a
//! report target is refused when it is one of the run's input traces, or
//! when it already holds a capture (or a gzip or zstd file, which is how
//! compressed traces come). Anything else, a missing file, an old report,
//! `-` or a device such as `/dev/null`, is written as before.
//!
//! A target that can never be written is refused at the same point, for
//! the same reason: a directory, or a file in a directory that does not
//! exist. Found only when the report is written, it would cost the whole
//! run, hours of a long trace, for one line of error at the end.

use std::path::{Path, PathBuf};

/// Why a report may not be written to a path.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OutputTargetError {
    /// The path is one of the run's input traces.
    #[error("{}: is also an input trace of this run; refusing to write the {what} over it", path.display())]
    IsInput {
        /// The output path.
        path: PathBuf,
        /// What would have been written (`JSON report`, `events`).
        what: &'static str,
    },
    /// The path already holds a capture or a compressed file.
    #[error("{}: already holds a {kind} file; refusing to overwrite it with the {what} (remove it first or choose another name)", path.display())]
    HoldsCapture {
        /// The output path.
        path: PathBuf,
        /// What its first bytes say it holds ([`crate::ingest::container_magic`]).
        kind: &'static str,
        /// What would have been written.
        what: &'static str,
    },
    /// The path is a directory.
    #[error("{}: is a directory; name a file for the {what}", path.display())]
    IsDirectory {
        /// The output path.
        path: PathBuf,
        /// What would have been written.
        what: &'static str,
    },
    /// A directory output (`--csv DIR`, `--plot DIR`) names a file, or
    /// lies under one.
    #[error("{}: is not a directory; name a directory for the {what}", path.display())]
    NotADirectory {
        /// The output path, or the file it lies under.
        path: PathBuf,
        /// What would have been written.
        what: &'static str,
    },
    /// A directory output is `-`: standard output takes one stream, not a
    /// directory of files.
    #[error(
        "-: is standard output, but the {what} are a directory of files; name a directory (./- for one called '-')"
    )]
    StandardOutput {
        /// What would have been written.
        what: &'static str,
    },
    /// A directory output is the path of a file output, or lies under
    /// it: the one would be written as a file and the other as a
    /// directory there ([`check_dir_apart_from_file`]).
    #[error("{}: {}", dir.display(), if dir == file { format!("given for both the {dir_what} (a directory) and the {file_what} (a file)") } else { format!("the {dir_what}' directory would lie under {}, the {file_what}'s file", file.display()) })]
    DirectoryOverFile {
        /// The directory output.
        dir: PathBuf,
        /// What goes in it.
        dir_what: &'static str,
        /// The file output.
        file: PathBuf,
        /// What goes in that.
        file_what: &'static str,
    },
    /// A file cannot be written there: a read-only file system, a
    /// directory no file can be created in (`/sys`), no permission
    /// ([`crate::report::probe_writable`]).
    #[error("{}: cannot write the {what} there: {reason}", path.display())]
    NotWritable {
        /// The output path.
        path: PathBuf,
        /// What the system said.
        reason: String,
        /// What would have been written.
        what: &'static str,
    },
    /// The file (or, for a new one, its directory) lies on a kernel
    /// interface file system such as procfs or sysfs, where a file is a
    /// kernel setting ([`crate::report::kernel_file_system`]).
    #[error("{}: is on {fs}, where files are kernel settings, not files for the {what}; name a file on an ordinary file system", path.display())]
    KernelFile {
        /// The output path.
        path: PathBuf,
        /// The file system's name (`procfs`, `sysfs`, ...).
        fs: &'static str,
        /// What would have been written.
        what: &'static str,
    },
    /// The directory the file would be created in does not exist (or is
    /// not a directory).
    #[error("{}: there is no directory {} to write the {what} in", path.display(), dir.display())]
    NoDirectory {
        /// The output path.
        path: PathBuf,
        /// Its parent.
        dir: PathBuf,
        /// What would have been written.
        what: &'static str,
    },
}

/// Checks that the report output `path` (described as `what` in the
/// error) may be written: it must not be one of `inputs` (the same file,
/// through any path or link) and must not already hold a capture.
///
/// ```
/// use flowsieve::report::{OutputTargetError, check_output_target};
/// let dir = tempfile::tempdir().unwrap();
/// let trace = dir.path().join("t.pcap");
/// std::fs::write(&trace, [0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0]).unwrap();
/// let report = dir.path().join("r.json");
/// // A new file, or an old report, is fine.
/// assert_eq!(check_output_target(&report, "JSON report", &[trace.clone()]), Ok(()));
/// std::fs::write(&report, b"{}\n").unwrap();
/// assert_eq!(check_output_target(&report, "JSON report", &[trace.clone()]), Ok(()));
/// // The trace itself is refused, as input and as a capture.
/// assert!(matches!(
///     check_output_target(&trace, "JSON report", &[trace.clone()]),
///     Err(OutputTargetError::IsInput { .. })
/// ));
/// assert!(matches!(
///     check_output_target(&trace, "JSON report", &[]),
///     Err(OutputTargetError::HoldsCapture { kind: "pcap", .. })
/// ));
/// // So are a directory and a file in a directory that is not there.
/// assert!(matches!(
///     check_output_target(dir.path(), "JSON report", &[]),
///     Err(OutputTargetError::IsDirectory { .. })
/// ));
/// assert!(matches!(
///     check_output_target(&dir.path().join("no/r.json"), "JSON report", &[]),
///     Err(OutputTargetError::NoDirectory { .. })
/// ));
/// ```
pub fn check_output_target(
    path: &Path,
    what: &'static str,
    inputs: &[PathBuf],
) -> Result<(), OutputTargetError> {
    if path.as_os_str() == "-" {
        return Ok(());
    }
    check_file_target(path, what)?;
    // A missing target (the usual case) is neither an input nor a capture.
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(());
    };
    if inputs.iter().any(|i| same_file(path, &meta, i)) {
        return Err(OutputTargetError::IsInput {
            path: path.to_path_buf(),
            what,
        });
    }
    if !meta.is_file() {
        // A device or a FIFO is written in place and holds nothing to lose.
        return Ok(());
    }
    if let Some(kind) = first_bytes(path)
        .as_deref()
        .and_then(crate::ingest::container_magic)
    {
        return Err(OutputTargetError::HoldsCapture {
            path: path.to_path_buf(),
            kind,
            what,
        });
    }
    Ok(())
}

/// True when `input` names the file at `output` (whose metadata is
/// `meta`): the same device and inode, whatever the paths or links.
fn same_file(output: &Path, meta: &std::fs::Metadata, input: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let _ = output;
        std::fs::metadata(input).is_ok_and(|i| meta.dev() == i.dev() && meta.ino() == i.ino())
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        match (std::fs::canonicalize(output), std::fs::canonicalize(input)) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        }
    }
}

/// Up to the first four bytes of `path`; `None` when it cannot be read
/// (then the write reports its own error).
fn first_bytes(path: &Path) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut head = Vec::with_capacity(4);
    std::fs::File::open(path)
        .ok()?
        .take(4)
        .read_to_end(&mut head)
        .ok()?;
    Some(head)
}

/// Checks that the directory output `path` (`--csv DIR`, `--plot DIR`;
/// `what` in the error) can be written into: it is a directory, or it is
/// missing and would be created under a directory, and a file can be
/// created in the nearest of the two that exists (an unnamed temporary
/// file, gone when closed). A path that names a file, or lies under one,
/// or lies on a read-only file system, is refused before any work rather
/// than when the tables are written.
///
/// ```
/// use flowsieve::report::{OutputTargetError, check_output_dir};
/// let dir = tempfile::tempdir().unwrap();
/// assert_eq!(check_output_dir(dir.path(), "CSV tables"), Ok(()));
/// assert_eq!(check_output_dir(&dir.path().join("new/deeper"), "CSV tables"), Ok(()));
/// let file = dir.path().join("r.json");
/// std::fs::write(&file, b"{}").unwrap();
/// for p in [file.clone(), file.join("under")] {
///     assert!(matches!(
///         check_output_dir(&p, "CSV tables"),
///         Err(OutputTargetError::NotADirectory { .. })
///     ));
/// }
/// assert!(matches!(
///     check_output_dir(std::path::Path::new("/sys/tables"), "CSV tables"),
///     Err(OutputTargetError::NotWritable { .. })
/// ));
/// ```
pub fn check_output_dir(path: &Path, what: &'static str) -> Result<(), OutputTargetError> {
    if path.as_os_str() == "-" {
        return Err(OutputTargetError::StandardOutput { what });
    }
    // The nearest part of the path that exists must be a directory:
    // everything below it is created.
    for at in path.ancestors() {
        let at = if at.as_os_str().is_empty() {
            Path::new(".")
        } else {
            at
        };
        match std::fs::metadata(at) {
            // Where the tables, or the directories above them, are
            // created: a temporary file there says whether anything can be.
            Ok(m) if m.is_dir() => {
                return tempfile::tempfile_in(at).map(drop).map_err(|e| {
                    OutputTargetError::NotWritable {
                        path: path.to_path_buf(),
                        reason: format!("cannot create anything in {}: {e}", at.display()),
                        what,
                    }
                });
            }
            Ok(_) => {
                return Err(OutputTargetError::NotADirectory {
                    path: at.to_path_buf(),
                    what,
                });
            }
            Err(_) => continue,
        }
    }
    Ok(())
}

/// Checks that the directory output `dir` (`what`: `dir_what`) and the
/// file output `file` (`file_what`) are apart: `dir` is not `file`'s path
/// and does not lie under it, compared as absolute paths. Both may be new,
/// so [`check_output_dir`] cannot see it: the file would be written, and
/// then the directory could not be made there, after all the work. A file
/// inside the directory is fine, and `-` (standard output) is apart from
/// every path.
///
/// ```
/// use flowsieve::report::{OutputTargetError, check_dir_apart_from_file};
/// use std::path::Path;
/// let apart = |d: &str, f: &str| check_dir_apart_from_file(Path::new(d), "plots", Path::new(f), "JSON report");
/// assert_eq!(apart("out", "out/report.json"), Ok(()));
/// assert_eq!(apart("out", "-"), Ok(()));
/// assert_eq!(apart("plots", "report.json"), Ok(()));
/// for (d, f) in [("r.json", "r.json"), ("./r.json", "r.json"), ("r.json/plots", "r.json")] {
///     assert!(matches!(apart(d, f), Err(OutputTargetError::DirectoryOverFile { .. })), "{d} {f}");
/// }
/// ```
pub fn check_dir_apart_from_file(
    dir: &Path,
    dir_what: &'static str,
    file: &Path,
    file_what: &'static str,
) -> Result<(), OutputTargetError> {
    if file.as_os_str() == "-" {
        return Ok(());
    }
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let (d, f) = (abs(dir), abs(file));
    if d.starts_with(&f) {
        return Err(OutputTargetError::DirectoryOverFile {
            dir: dir.to_path_buf(),
            dir_what,
            file: if d == f {
                dir.to_path_buf()
            } else {
                file.to_path_buf()
            },
            file_what,
        });
    }
    Ok(())
}

/// Checks that a file can be written at `path` (`what` in the error): it
/// is not a directory, a missing one would be created in a directory
/// that exists (where its symbolic links lead), and the system lets it be
/// written ([`crate::report::probe_writable`]). The part of
/// [`check_output_target`] that also holds for a capture file (`live -w`),
/// which may replace an older capture.
///
/// ```
/// use flowsieve::report::{OutputTargetError, check_file_target};
/// let dir = tempfile::tempdir().unwrap();
/// assert_eq!(check_file_target(&dir.path().join("c.pcap"), "capture"), Ok(()));
/// assert!(matches!(
///     check_file_target(dir.path(), "capture"),
///     Err(OutputTargetError::IsDirectory { .. })
/// ));
/// assert!(matches!(
///     check_file_target(&dir.path().join("no/c.pcap"), "capture"),
///     Err(OutputTargetError::NoDirectory { .. })
/// ));
/// // A link to a file in a directory that is not there, too.
/// let link = dir.path().join("latest.pcap");
/// std::os::unix::fs::symlink(dir.path().join("gone/c.pcap"), &link).unwrap();
/// assert!(matches!(
///     check_file_target(&link, "capture"),
///     Err(OutputTargetError::NoDirectory { .. })
/// ));
/// // Nor is one written on a kernel interface file system, where files are
/// // settings: `/proc/version` opens for writing as root, but every write
/// // fails, and a file under `/proc/sys` would change a setting.
/// # #[cfg(target_os = "linux")]
/// for p in ["/proc/version", "/sys/c.pcap"] {
///     assert!(matches!(
///         check_file_target(std::path::Path::new(p), "capture"),
///         Err(OutputTargetError::KernelFile { .. })
///     ));
/// }
/// ```
pub fn check_file_target(path: &Path, what: &'static str) -> Result<(), OutputTargetError> {
    if path.as_os_str() == "-" {
        return Ok(());
    }
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => {
            return Err(OutputTargetError::IsDirectory {
                path: path.to_path_buf(),
                what,
            });
        }
        Ok(_) => {}
        // Missing: it can only be created in a directory that exists, the
        // directory of the file its links lead to when it is a link.
        Err(_) => {
            let target = super::atomic::file_written_at(path).unwrap_or_else(|| path.to_path_buf());
            let dir = match target.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => Path::new("."),
            };
            if !dir.is_dir() {
                return Err(OutputTargetError::NoDirectory {
                    path: path.to_path_buf(),
                    dir: dir.to_path_buf(),
                    what,
                });
            }
        }
    }
    // A link of `/dev` or `/proc` names a descriptor and is written in
    // place (`/proc/self/fd/3`): only a file a write would create or
    // replace, or the directory it would be created in, is looked at.
    if let Some(target) = super::atomic::file_written_at(path) {
        let on = if target.exists() {
            target.as_path()
        } else {
            target
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."))
        };
        if let Some(fs) = crate::report::kernel_file_system(on) {
            return Err(OutputTargetError::KernelFile {
                path: path.to_path_buf(),
                fs,
                what,
            });
        }
    }
    crate::report::probe_writable(path).map_err(|e| OutputTargetError::NotWritable {
        path: path.to_path_buf(),
        reason: e.to_string(),
        what,
    })
}
