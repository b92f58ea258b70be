//! The `-w` output of a live capture: one file, or the files
//! [`Rotation`] splits it into.

use super::pcap_out::PcapOut;
use super::rotation::Rotation;
use crate::ingest::Timestamp;
use crate::ingest::live::Interface;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

/// What became of a frame handed to [`Savefiles::write`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Saved {
    /// It is in the current file.
    Written,
    /// It would start a file past `-W`'s count (with `-G` and no `-C`):
    /// it is not written, and the capture ends, as tcpdump's does.
    FileLimit,
}

/// The open `-w` file and what decides when the next one starts.
pub(super) struct Savefiles {
    out: PcapOut,
    /// The current file's name.
    path: PathBuf,
    /// `-w`'s name: a `strftime` pattern with `-G`.
    pattern: PathBuf,
    interfaces: Vec<Interface>,
    snaplen: u32,
    rotation: Rotation,
    /// With `-G`: the second the current period began (the first at the
    /// capture's start, each next at its first frame).
    period_start: i64,
    /// `-z`: the command run on each file the rotation closes.
    post_rotate: Option<OsString>,
    /// Its runs not yet seen to end, reaped at each rotation so that none
    /// stays a zombie for the capture's life.
    post_rotating: Vec<std::process::Child>,
    /// Periods begun after the first (tcpdump's `Gflag_count`).
    periods: u64,
    /// With `-C`: the current file's number in its period (in the ring of
    /// `-W`'s count, when given).
    number: u64,
}

impl Savefiles {
    /// Opens the first file, at `now` (seconds since the epoch).
    pub(super) fn create(
        pattern: &Path,
        interfaces: &[Interface],
        snaplen: u32,
        rotation: Rotation,
        now: i64,
    ) -> Result<Savefiles, String> {
        if !rotation.is_off() && crate::report::writes_stdout(pattern) {
            return Err(
                "standard output: -C and -G split a capture into files, and -w - is one stream"
                    .into(),
            );
        }
        // The first file's name is the rotation's (`-G`'s time, `-W`'s
        // digits), which is the pattern itself without one.
        let first = rotation.file_name(pattern, now, 0)?;
        Ok(Savefiles {
            out: PcapOut::create(&first, PcapOut::wants_pcapng(pattern), interfaces, snaplen)?,
            path: first,
            pattern: pattern.to_owned(),
            interfaces: interfaces.to_vec(),
            snaplen,
            rotation,
            period_start: now,
            post_rotate: None,
            post_rotating: Vec::new(),
            periods: 0,
            number: 0,
        })
    }

    /// Runs `command FILE` on each file the rotation closes (`-z`).
    pub(super) fn post_rotate(mut self, command: Option<OsString>) -> Savefiles {
        self.post_rotate = command;
        self
    }

    /// Closes the current file and opens the one the rotation names now.
    fn next_file(&mut self) -> Result<(), String> {
        let name = self
            .rotation
            .file_name(&self.pattern, self.period_start, self.number)?;
        let pcapng = PcapOut::wants_pcapng(&self.pattern);
        let next = PcapOut::create(&name, pcapng, &self.interfaces, self.snaplen)?;
        let closed = std::mem::replace(&mut self.path, name);
        std::mem::replace(&mut self.out, next).finish()?;
        if let Some(command) = &self.post_rotate {
            self.post_rotating
                .retain_mut(|c| c.try_wait().is_ok_and(|done| done.is_none()));
            let mut run = std::process::Command::new(command);
            run.arg(&closed)
                .stdin(std::process::Stdio::null())
                // Its own process group: a Ctrl-C meant for the capture
                // does not cut a compression short.
                .process_group(0);
            // SAFETY: the closure runs in the child between fork and exec
            // and calls only `setpriority`, which is async-signal-safe; a
            // failure leaves the priority as it was, which is no error.
            unsafe {
                run.pre_exec(|| {
                    // As tcpdump runs it: at the lowest priority, so that
                    // compressing a file never slows the capture.
                    libc::setpriority(libc::PRIO_PROCESS, 0, 19);
                    Ok(())
                });
            }
            let child = run.spawn().map_err(|e| {
                format!(
                    "-z {}: cannot run it on {}: {e}",
                    Path::new(command).display(),
                    closed.display()
                )
            })?;
            self.post_rotating.push(child);
        }
        Ok(())
    }

    /// Writes one frame captured on interface `iface` (an index into the
    /// capture's interfaces), first starting the next file when the
    /// rotation says so.
    pub(super) fn write(
        &mut self,
        iface: usize,
        ts: Timestamp,
        wire_len: u32,
        data: &[u8],
    ) -> Result<Saved, String> {
        if let Some(seconds) = self.rotation.seconds()
            && ts.secs().saturating_sub(self.period_start) >= i64::from(seconds.get())
        {
            self.periods += 1;
            if self
                .rotation
                .ends_after_files()
                .is_some_and(|n| self.periods >= u64::from(n))
            {
                return Ok(Saved::FileLimit);
            }
            self.period_start = ts.secs();
            self.number = 0;
            self.next_file()?;
        }
        if let Some(limit) = self.rotation.file_bytes()
            && self.out.bytes() > limit.get()
        {
            self.number = match self.rotation.files() {
                Some(n) => (self.number + 1) % u64::from(n.get()),
                None => self.number + 1,
            };
            self.next_file()?;
        }
        self.out
            .write(iface, ts, wire_len, data)
            .map(|()| Saved::Written)
    }

    /// Hands everything written so far to the current file (`-U`).
    pub(super) fn flush(&mut self) -> Result<(), String> {
        self.out.flush()
    }

    /// Flushes and closes the current file.
    pub(super) fn finish(self) -> Result<(), String> {
        self.out.finish()
    }
}
