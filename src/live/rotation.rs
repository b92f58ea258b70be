//! `-C`, `-G` and `-W`: the `-w` file of a live capture split into
//! several, named as tcpdump names them.
//!
//! A capture left running on a link for days writes more than one file
//! should hold, and a user who keeps the last hour of traffic for when
//! an alarm fires wants a ring of files, not one file that grows until
//! the disk is full. tcpdump's three flags are what such a user already
//! types, so they mean here what they mean there (checked against
//! tcpdump 4.99.3):
//!
//! - `-C N`: before a frame is written, a file that already holds more
//!   than N million bytes (or N KiB, MiB or GiB with a `K`, `M` or `G`)
//!   is closed and the next one opened. The first file has `-w`'s name,
//!   the next ones the name with 1, 2, … after it.
//! - `-W N` with `-C`: a ring of N files, numbered 0 to N − 1 with as many
//!   digits as N − 1 has (`f0`…`f9` for 10, `f00`…`f11` for 12), the
//!   oldest replaced by the newest. With one file there is no number.
//! - `-G S`: a frame that comes S seconds or more after the current file
//!   began starts a new file, whose name is `-w`'s passed through
//!   `strftime` with the local time it begins at (`-w 'cap-%H%M%S.pcap'`).
//!   With `-C` too, each period's files are numbered from its own start.
//! - `-W N` with `-G` and no `-C`: the capture ends when the next file
//!   would be the (N + 1)-th.
//!
//! One difference: tcpdump reads the clock when a packet reaches it, and
//! this reads the frame's own kernel timestamp. A file therefore holds
//! the frames that arrived in its period, even when the engine works on
//! them later, and which file a frame is in follows from the frame alone.

use std::ffi::{OsStr, OsString};
use std::num::{NonZeroU32, NonZeroU64};
use std::path::{Path, PathBuf};

/// How a live capture's `-w` file is split: tcpdump's `-C`, `-G` and `-W`.
///
/// ```
/// use flowsieve::live::Rotation;
/// use std::num::{NonZeroU32, NonZeroU64};
///
/// let ring = Rotation::new(NonZeroU64::new(1_000_000), None, NonZeroU32::new(12)).unwrap();
/// assert_eq!(ring.suffix_digits(), 2);
/// // -W needs -C or -G: alone it would say nothing.
/// assert!(Rotation::new(None, None, NonZeroU32::new(3)).is_err());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rotation {
    file_bytes: Option<NonZeroU64>,
    seconds: Option<NonZeroU32>,
    files: Option<NonZeroU32>,
}

impl Rotation {
    /// A new file once the current one holds more than `file_bytes`
    /// (`-C`), or once a frame comes `seconds` after it began (`-G`); at
    /// most `files` of them (`-W`), in a ring with `-C`, else the capture
    /// ends. `files` without either is refused, since it would split
    /// nothing.
    pub fn new(
        file_bytes: Option<NonZeroU64>,
        seconds: Option<NonZeroU32>,
        files: Option<NonZeroU32>,
    ) -> Result<Rotation, String> {
        if files.is_some() && file_bytes.is_none() && seconds.is_none() {
            return Err(
                "-W (--file-count) limits the files that -C or -G start, and neither is given"
                    .into(),
            );
        }
        Ok(Rotation {
            file_bytes,
            seconds,
            files,
        })
    }

    /// Whether the capture goes to one file.
    pub fn is_off(&self) -> bool {
        self.file_bytes.is_none() && self.seconds.is_none()
    }

    /// `-C`'s size, in bytes.
    pub fn file_bytes(&self) -> Option<NonZeroU64> {
        self.file_bytes
    }

    /// `-G`'s period, in seconds.
    pub fn seconds(&self) -> Option<NonZeroU32> {
        self.seconds
    }

    /// `-W`'s count.
    pub fn files(&self) -> Option<NonZeroU32> {
        self.files
    }

    /// The digits of a `-C` file's number: as many as `-W`'s count less
    /// one has (none without `-W`, or for a ring of one file), as tcpdump
    /// pads them so that the ring's names sort in order.
    pub fn suffix_digits(&self) -> usize {
        let mut last = self.files.map_or(0, |n| n.get() - 1);
        let mut digits = 0;
        while last > 0 {
            digits += 1;
            last /= 10;
        }
        digits
    }

    /// The name of file `number` of the period that began at
    /// `period_start` (seconds since the epoch) for `-w pattern`: the
    /// pattern through `strftime` with `-G`, then numbered with `-C`.
    ///
    /// ```
    /// use flowsieve::live::Rotation;
    /// use std::num::{NonZeroU32, NonZeroU64};
    /// use std::path::Path;
    ///
    /// let ring = Rotation::new(NonZeroU64::new(1_000_000), None, NonZeroU32::new(3)).unwrap();
    /// assert_eq!(ring.file_name(Path::new("cap"), 0, 2).unwrap(), Path::new("cap2"));
    /// // Without a rotation the name is -w's own.
    /// let one = Rotation::default();
    /// assert_eq!(one.file_name(Path::new("%H.pcap"), 0, 0).unwrap(), Path::new("%H.pcap"));
    /// ```
    pub fn file_name(
        &self,
        pattern: &Path,
        period_start: i64,
        number: u64,
    ) -> Result<PathBuf, String> {
        let base: OsString = match self.seconds {
            Some(_) => strftime_local(pattern.as_os_str(), period_start)?,
            None => pattern.as_os_str().to_owned(),
        };
        Ok(PathBuf::from(match self.file_bytes {
            Some(_) => numbered(&base, number, self.suffix_digits()),
            None => base,
        }))
    }

    /// The count of files after which `-W` ends the capture (with `-G`
    /// and no `-C`); `None` when it closes a ring instead (with `-C`) or
    /// is not given.
    pub fn ends_after_files(&self) -> Option<u32> {
        match (self.file_bytes, self.seconds) {
            (None, Some(_)) => self.files.map(NonZeroU32::get),
            _ => None,
        }
    }
}

/// The clock in whole seconds since the epoch: when the first `-G`
/// period begins (0 on a clock before the epoch).
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The name of the `-C` file numbered `count` of a period whose name is
/// `base`: `base` itself for the first without `-W`'s padding, else
/// `base` and the number, zero-padded to `digits` (tcpdump's
/// `MakeFilename`).
///
/// ```
/// use flowsieve::live::rotation::numbered;
/// use std::ffi::OsStr;
///
/// assert_eq!(numbered(OsStr::new("cap"), 0, 0), "cap");
/// assert_eq!(numbered(OsStr::new("cap"), 3, 0), "cap3");
/// assert_eq!(numbered(OsStr::new("cap"), 3, 2), "cap03");
/// ```
pub fn numbered(base: &OsStr, count: u64, digits: usize) -> OsString {
    if count == 0 && digits == 0 {
        return base.to_owned();
    }
    let mut name = base.to_owned();
    name.push(format!("{count:0digits$}"));
    name
}

/// `pattern` passed through the C library's `strftime` with the local
/// time of `secs` (seconds since the epoch), as tcpdump names a `-G`
/// file; the time zone is the process's (`TZ`).
///
/// ```
/// use flowsieve::live::rotation::strftime_local;
/// use std::ffi::OsStr;
///
/// // With the process's time zone, whatever it is, the year of a time a
/// // day from a new year is that year.
/// let name = strftime_local(OsStr::new("cap-%Y.pcap"), 1_704_153_600).unwrap();
/// assert_eq!(name, "cap-2024.pcap");
/// ```
pub fn strftime_local(pattern: &OsStr, secs: i64) -> Result<OsString, String> {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let c_pattern = std::ffi::CString::new(pattern.as_bytes())
        .map_err(|_| "a -G file name cannot hold a NUL byte".to_owned())?;
    // time_t is 64 bits on every target the live capture builds for.
    let t: libc::time_t = secs;
    // SAFETY: `tm` is plain data that `localtime_r` fills whole; it reads
    // `t` and writes `tm` only, and returns null (checked) on failure.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: as above: both pointers are valid for the call.
    if unsafe { libc::localtime_r(&t, &mut tm) }.is_null() {
        return Err(format!(
            "the local time of {secs} s is past the C library's calendar"
        ));
    }
    // PATH_MAX: a longer name could not be opened anyway.
    let mut buf = vec![0u8; 4096];
    // SAFETY: `buf` is writable for its length, which is passed as the
    // limit; the pattern is NUL-terminated and `tm` is initialised.
    let n = unsafe { libc::strftime(buf.as_mut_ptr().cast(), buf.len(), c_pattern.as_ptr(), &tm) };
    // 0 is an empty result or one that does not fit: a file needs a name.
    if n == 0 {
        return Err(format!(
            "-w {:?} with -G names no file, or one longer than 4,095 bytes",
            pattern
        ));
    }
    buf.truncate(n);
    Ok(OsString::from_vec(buf))
}
