//! How a trace file sits in the kernel's page cache: how much of it is
//! cached, and how much of that a map of it gets as 2 MiB entries.
//!
//! Why a trace reader cares: flowsieve maps plain traces and walks them in
//! order, and each 4 KiB page of the map costs the reader a TLB miss and a
//! page walk (on a virtual machine, through two sets of tables). A file the
//! kernel caches in large folios (one read back from disk, on a recent
//! kernel and filesystem) is mapped with 2 MiB entries instead, and the
//! walks all but vanish; a file just written (`gen-trace`, `cp`, `tcpdump
//! -w`) stays in 4 KiB pages. The same bytes then time a tenth apart, for
//! flowsieve and tcpdump alike (BENCHMARKS.md, sixteenth round), so `bench`
//! prints this state beside its comparison with tcpdump.

use std::fs::File;
use std::io;
use std::path::Path;

/// A file's page-cache state, in bytes.
///
/// ```no_run
/// let s = flowsieve::ingest::page_cache_state(std::path::Path::new("trace.pcap"))?;
/// assert!(s.huge_mapped_bytes <= s.cached_bytes);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PageCacheState {
    /// The file's length.
    pub file_bytes: u64,
    /// How much of the file is in the page cache once it has been read
    /// (whole pages, so up to a page more than the file's length).
    pub cached_bytes: u64,
    /// How much of the cached part a map of the file gets as 2 MiB entries.
    pub huge_mapped_bytes: u64,
}

/// Reads `path` into the page cache (if it is not there already) through a
/// map, and reports how the kernel mapped it: `Rss` and `FilePmdMapped` of
/// that map in `/proc/self/smaps`.
///
/// The pages are brought in by `MADV_POPULATE_READ` (Linux 5.14), which
/// reports a page it cannot read as an error instead of raising `SIGBUS`,
/// and no byte of the map is ever read here; so a file cut short meanwhile
/// gives an error, never a crash. Other systems, older kernels and paths
/// that are not regular files (a FIFO, a device) give an `Unsupported`
/// error.
pub fn page_cache_state(path: &Path) -> io::Result<PageCacheState> {
    // Checked before opening: opening a FIFO would wait for a writer.
    if !std::fs::metadata(path)?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "not a regular file, so not in the page cache as one",
        ));
    }
    let file = File::open(path)?;
    let file_bytes = file.metadata()?.len();
    if file_bytes == 0 {
        return Ok(PageCacheState {
            file_bytes,
            cached_bytes: 0,
            huge_mapped_bytes: 0,
        });
    }
    mapped_state(&file, file_bytes)
}

#[cfg(target_os = "linux")]
fn mapped_state(file: &File, file_bytes: u64) -> io::Result<PageCacheState> {
    // A raw map: its bytes are never read from Rust (no slice is made of
    // them). The kernel touches them in `madvise` below, and a page that
    // cannot be read there is an error return, not a signal, so a file
    // changed or cut short by another process meanwhile is harmless.
    let map = memmap2::MmapOptions::new().map_raw_read_only(file)?;
    let start = map.as_ptr() as usize;
    // SAFETY: `start..start + len` is exactly the map made above, alive
    // until the end of this function. MADV_POPULATE_READ only faults the
    // pages in for reading; it writes nothing.
    let populated = unsafe {
        libc::madvise(
            map.as_mut_ptr().cast::<libc::c_void>(),
            map.len(),
            libc::MADV_POPULATE_READ,
        )
    };
    if populated != 0 {
        let e = io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::EINVAL) => io::Error::new(
                io::ErrorKind::Unsupported,
                "the kernel cannot populate a map (MADV_POPULATE_READ needs Linux 5.14)",
            ),
            _ => e,
        });
    }
    let smaps = std::fs::read_to_string("/proc/self/smaps")?;
    let (rss_kb, pmd_kb) = smaps_entry(&smaps, start).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            "the map is missing from /proc/self/smaps",
        )
    })?;
    drop(map);
    Ok(PageCacheState {
        file_bytes,
        cached_bytes: rss_kb * 1024,
        huge_mapped_bytes: pmd_kb * 1024,
    })
}

#[cfg(not(target_os = "linux"))]
fn mapped_state(_file: &File, _file_bytes: u64) -> io::Result<PageCacheState> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "the page cache's state is read on Linux only",
    ))
}

/// `Rss` and `FilePmdMapped` (kB) of the mapping that starts at `start` in
/// the text of an smaps file; `None` when no mapping starts there or one
/// of the two fields is missing. A field `FilePmdMapped` absent from a
/// kernel without file huge pages reads as 0.
///
/// Each mapping is a header line `start-end perms offset dev inode path`
/// (addresses in lowercase hex of at least 8 digits, as the kernel prints
/// them with `%08lx`), then `Name: value kB` lines until the next header.
#[cfg(target_os = "linux")]
fn smaps_entry(smaps: &str, start: usize) -> Option<(u64, u64)> {
    let head = format!("{start:08x}-");
    let mut lines = smaps.lines();
    lines.by_ref().find(|l| l.starts_with(&head))?;
    let (mut rss, mut pmd) = (None, None);
    for line in lines {
        let Some((name, rest)) = line.split_once(':') else {
            break;
        };
        // A header line also holds a ':' (in its device field), but never
        // a name of letters alone before it.
        if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            break;
        }
        let kb = || crate::pages::kb_value(rest);
        match name {
            "Rss" => rss = kb(),
            "FilePmdMapped" => pmd = kb(),
            _ => {}
        }
    }
    Some((rss?, pmd.unwrap_or(0)))
}
