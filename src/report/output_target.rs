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
/// ```
pub fn check_output_target(
    path: &Path,
    what: &'static str,
    inputs: &[PathBuf],
) -> Result<(), OutputTargetError> {
    if path.as_os_str() == "-" {
        return Ok(());
    }
    // A missing target (the usual case) can be neither.
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
        // A directory fails when it is written, with its own error; a
        // device or a FIFO is written in place and holds nothing to lose.
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
