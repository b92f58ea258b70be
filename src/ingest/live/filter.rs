//! Capture filters: tcpdump's expression language compiled to classic BPF
//! and attached to the socket (`SO_ATTACH_FILTER`), so rejected frames
//! never reach user space.
//!
//! The compiler is libpcap's own (`pcap_compile`), loaded at run time
//! (`crate::ingest::libpcap`): flowsieve builds and runs without libpcap,
//! and only `-f` needs it (Debian: `apt-get install libpcap0.8`). It
//! compiles against a handle opened on the capture interface itself, so
//! the program uses the kernel's VLAN ancillary fields where the kernel
//! strips tags, as tcpdump's does; a program compiled for plain Ethernet
//! would test a tag the kernel already removed.
//!
//! Without an expression the socket still gets a one-instruction program
//! that accepts every frame at the snap length, so the kernel copies no
//! more than `-s` bytes of any frame into the ring.

use super::error::LiveError;
use crate::ingest::libpcap::{DLT_EN10MB, DLT_RAW, Libpcap};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// `BPF_RET | BPF_K`: return a constant.
const BPF_RET_K: u16 = 0x06;

/// A classic BPF program for a packet socket.
#[derive(Clone, Debug)]
pub struct SocketFilter {
    program: Vec<libc::sock_filter>,
}

impl SocketFilter {
    /// Accept every frame, cut at `snaplen` bytes.
    pub fn accept_all(snaplen: u32) -> SocketFilter {
        SocketFilter {
            program: vec![libc::sock_filter {
                code: BPF_RET_K,
                jt: 0,
                jf: 0,
                k: snaplen,
            }],
        }
    }

    /// Compiles `expression` for frames of `iface` (a live handle on it,
    /// or, when that cannot be opened, a dead handle of `link_type`'s DLT).
    /// The error is the compiler's own message.
    pub fn compile(
        expression: &str,
        iface: &str,
        raw_ip: bool,
        snaplen: u32,
    ) -> Result<SocketFilter, LiveError> {
        let lib = Libpcap::get().map_err(LiveError::NoFilterCompiler)?;
        let program = lib
            .compile_for_interface(
                expression,
                iface,
                if raw_ip { DLT_RAW } else { DLT_EN10MB },
                snaplen,
            )
            .map_err(LiveError::Filter)?;
        Ok(SocketFilter {
            program: program
                .into_iter()
                .map(|i| libc::sock_filter {
                    code: i.code,
                    jt: i.jt,
                    jf: i.jf,
                    k: i.k,
                })
                .collect(),
        })
    }

    /// Attaches the program to a socket.
    pub fn attach(&self, fd: &OwnedFd) -> io::Result<()> {
        let prog = libc::sock_fprog {
            len: self.program.len() as u16,
            filter: self.program.as_ptr() as *mut libc::sock_filter,
        };
        // SAFETY: `prog` points at the program, which outlives the call;
        // the kernel copies it.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_ATTACH_FILTER,
                (&prog as *const libc::sock_fprog).cast(),
                std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}
