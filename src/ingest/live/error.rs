//! Why a live capture could not start or stopped.

use std::io;

/// A live-capture failure, with the interface it concerns. Each prints as
/// one line.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// No interface of that name.
    #[error("{iface}: no such interface")]
    NoSuchInterface {
        /// The name given.
        iface: String,
    },
    /// `-i` was given a string that cannot name an interface
    /// ([`super::check_interface_name`]).
    #[error("-i: {0}")]
    BadInterfaceName(String),
    /// `-i any` with no interface of that name: tcpdump's pseudo-device.
    #[error(
        "any: there is no interface called any, and flowsieve does not capture tcpdump's 'any' pseudo-device (cooked headers of every interface); give each interface with -i"
    )]
    AnyDevice,
    /// The process lacks the capabilities a packet socket needs.
    #[error(
        "{iface}: cannot {what}: not permitted (live capture needs CAP_NET_RAW, and CAP_NET_ADMIN for promiscuous mode; run as root or grant them with setcap)"
    )]
    NotPermitted {
        /// The interface.
        iface: String,
        /// What was being done.
        what: &'static str,
    },
    /// The interface is not up when the capture starts: a socket bound to
    /// it sees nothing until it is, so the capture would wait on an
    /// empty ring, or fail at once with "went down" and no reason.
    #[error("{iface}: the interface is not up (`ip link set {iface} up` brings it up)")]
    NotUp {
        /// The interface.
        iface: String,
    },
    /// The interface went down while it was captured.
    #[error("{iface}: the interface went down during the capture")]
    InterfaceDown {
        /// The interface.
        iface: String,
    },
    /// The interface's link layer is not one flowsieve dissects.
    #[error(
        "{iface}: link type ARPHRD {arphrd} is not supported for live capture (Ethernet, loopback and raw IP are)"
    )]
    UnsupportedLink {
        /// The interface.
        iface: String,
        /// Its `ARPHRD_*` type.
        arphrd: u32,
    },
    /// libpcap, whose compiler `-f` uses, is not installed.
    #[error("capture filter: {0}")]
    NoFilterCompiler(String),
    /// The capture filter did not compile.
    #[error("capture filter: {0}")]
    Filter(String),
    /// `-w` writes one pcap, which has one link type.
    #[error(
        "-w writes one pcap with one link type, but {first} and {other} have different link types (name the file .pcapng to keep both)"
    )]
    MixedLinkTypes {
        /// The first interface.
        first: String,
        /// One with another link type.
        other: String,
    },
    /// One interface named twice with `-i` (or by two of its names): each
    /// of its frames would reach the pipeline twice and every count double.
    #[error("{}", same_interface_twice(first, second))]
    SameInterfaceTwice {
        /// The first name given.
        first: String,
        /// The later name of the same interface.
        second: String,
    },
    /// Any other system call failure.
    #[error("{iface}: cannot {what}: {source}")]
    Os {
        /// The interface.
        iface: String,
        /// What was being done.
        what: &'static str,
        /// The system's error.
        source: io::Error,
    },
}

fn same_interface_twice(first: &str, second: &str) -> String {
    let what = if first == second {
        format!("{first} is given twice")
    } else {
        format!("{first} and {second} name the same interface")
    };
    format!("-i: {what}: each of its frames would be counted twice; give it once")
}

impl LiveError {
    /// Whether the error is the user's argument (a filter that does not
    /// compile) rather than the system's.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            LiveError::Filter(_)
                | LiveError::MixedLinkTypes { .. }
                | LiveError::SameInterfaceTwice { .. }
                | LiveError::BadInterfaceName(_)
                | LiveError::AnyDevice
        )
    }

    /// Maps a failed system call on `iface` to the error a user can act on.
    pub fn from_os(iface: &str, what: &'static str, e: io::Error) -> LiveError {
        match e.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => LiveError::NotPermitted {
                iface: iface.to_string(),
                what,
            },
            Some(libc::ENODEV) | Some(libc::ENXIO) => LiveError::NoSuchInterface {
                iface: iface.to_string(),
            },
            Some(libc::ENETDOWN) => LiveError::InterfaceDown {
                iface: iface.to_string(),
            },
            _ => LiveError::Os {
                iface: iface.to_string(),
                what,
                source: e,
            },
        }
    }
}
