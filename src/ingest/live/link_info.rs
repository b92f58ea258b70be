//! What the kernel says of one interface of the process's own network
//! namespace, by rtnetlink (`RTM_GETLINK`): its hardware type, MTU and
//! counters.
//!
//! Why netlink and not `/sys/class/net/NAME`: `/sys` shows the devices of
//! the namespace it was mounted in, and a process that entered another
//! with `nsenter --net` (as one runs a capture inside a container) sees
//! the old namespace's devices there: a tun device it captures on read as
//! Ethernet, and its device counters were another device's, or zeros. A
//! netlink socket answers for the namespace of the process that opens it,
//! as the lookup by index (`if_nametoindex`) and `SIOCGIFFLAGS` do.
//!
//! The request and the reply are laid out by hand: one request, one
//! reply, four fields of it. Each field is read only after a length check
//! (the reply is the kernel's, but a parser that trusts lengths panics on
//! the first short one).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `struct nlmsghdr`: length, type, flags, sequence, port.
const NLMSG_HDR_LEN: usize = 16;
/// `struct ifinfomsg`: family, pad, type, index, flags, change.
const IFINFOMSG_LEN: usize = 16;
/// `ifinfomsg.ifi_type` (an `ARPHRD_*` value), after the family and pad.
const IFI_TYPE_OFFSET: usize = 2;
/// `ifinfomsg.ifi_index`.
const IFI_INDEX_OFFSET: usize = 4;
/// `struct rtattr`: length, type.
const RTA_HDR_LEN: usize = 4;
/// Netlink messages and attributes are aligned to 4 bytes.
const ALIGN: usize = 4;
/// `NLMSG_ERROR`.
const NLMSG_ERROR: u16 = 2;
/// `RTM_NEWLINK`, the reply to `RTM_GETLINK`.
const RTM_NEWLINK: u16 = 16;
/// `RTM_GETLINK`.
const RTM_GETLINK: u16 = 18;
/// `NLM_F_REQUEST`.
const NLM_F_REQUEST: u16 = 1;
/// `IFLA_MTU`: a u32.
const IFLA_MTU: u16 = 4;
/// `IFLA_STATS64`: a `struct rtnl_link_stats64`.
const IFLA_STATS64: u16 = 23;
/// Fields of `struct rtnl_link_stats64` (each a u64), by position.
const STAT_RX_PACKETS: usize = 0;
const STAT_TX_PACKETS: usize = 1;
const STAT_RX_ERRORS: usize = 4;
const STAT_RX_DROPPED: usize = 6;
const STAT_RX_FIFO_ERRORS: usize = 14;
const STAT_RX_MISSED_ERRORS: usize = 15;

/// The device counters `IFLA_STATS64` carries that a capture reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// `rx_packets`.
    pub rx_packets: u64,
    /// `tx_packets`.
    pub tx_packets: u64,
    /// `rx_errors`.
    pub rx_errors: u64,
    /// `rx_dropped`.
    pub rx_dropped: u64,
    /// `rx_fifo_errors`.
    pub rx_fifo_errors: u64,
    /// `rx_missed_errors`.
    pub rx_missed_errors: u64,
}

/// One interface as `RTM_GETLINK` answers for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkInfo {
    /// Its hardware type (`ARPHRD_*`).
    pub arphrd: u16,
    /// Its MTU, when the reply carries one.
    pub mtu: Option<u32>,
    /// Its counters, when the reply carries them.
    pub stats: Option<LinkStats>,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

fn aligned(n: usize) -> usize {
    n.div_ceil(ALIGN) * ALIGN
}

impl LinkInfo {
    /// Asks the kernel for interface `index` of the process's network
    /// namespace.
    pub fn query(index: i32) -> io::Result<LinkInfo> {
        // SAFETY: plain socket(2); the result is checked and owned below.
        let raw = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a descriptor this call just opened and owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let request = LinkInfo::request(index);
        // SAFETY: the buffer is valid for its length; to the kernel (port
        // 0) by the socket's default destination.
        let sent = unsafe { libc::send(fd.as_raw_fd(), request.as_ptr().cast(), request.len(), 0) };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        // One interface's reply is about 1.5 KiB; 32 KiB holds it with
        // room for every attribute a newer kernel adds.
        let mut reply = vec![0u8; 32 << 10];
        // SAFETY: the buffer is writable for its length.
        let n = unsafe { libc::recv(fd.as_raw_fd(), reply.as_mut_ptr().cast(), reply.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        reply.truncate(n as usize);
        LinkInfo::parse(&reply, index)
    }

    /// The `RTM_GETLINK` request for interface `index`.
    fn request(index: i32) -> [u8; NLMSG_HDR_LEN + IFINFOMSG_LEN] {
        let mut r = [0u8; NLMSG_HDR_LEN + IFINFOMSG_LEN];
        r[0..4].copy_from_slice(&((NLMSG_HDR_LEN + IFINFOMSG_LEN) as u32).to_ne_bytes());
        r[4..6].copy_from_slice(&RTM_GETLINK.to_ne_bytes());
        r[6..8].copy_from_slice(&NLM_F_REQUEST.to_ne_bytes());
        r[8..12].copy_from_slice(&1u32.to_ne_bytes());
        let at = NLMSG_HDR_LEN + IFI_INDEX_OFFSET;
        r[at..at + 4].copy_from_slice(&index.to_ne_bytes());
        r
    }

    /// Reads the kernel's reply to the request for interface `index`:
    /// an error reply is that error, and anything else that is not
    /// `RTM_NEWLINK` for `index`, or is cut short, is `InvalidData`.
    ///
    /// ```
    /// use flowsieve::ingest::live::LinkInfo;
    /// // A header that claims more bytes than the reply has.
    /// let short = [64u8, 0, 0, 0, 16, 0, 0, 0];
    /// assert!(LinkInfo::parse(&short, 1).is_err());
    /// ```
    pub fn parse(reply: &[u8], index: i32) -> io::Result<LinkInfo> {
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_owned());
        let len = u32_at(reply, 0).ok_or_else(|| bad("a netlink reply shorter than its header"))?
            as usize;
        if len < NLMSG_HDR_LEN || len > reply.len() {
            return Err(bad("a netlink reply whose length is not its size"));
        }
        let msg = &reply[..len];
        match u16_at(msg, 4) {
            Some(NLMSG_ERROR) => {
                // `struct nlmsgerr`: a negative errno, then the request.
                let errno =
                    u32_at(msg, NLMSG_HDR_LEN).ok_or_else(|| bad("a short netlink error"))? as i32;
                return Err(io::Error::from_raw_os_error(errno.saturating_neg()));
            }
            Some(RTM_NEWLINK) => {}
            _ => return Err(bad("a netlink reply that is not a link")),
        }
        if msg.len() < NLMSG_HDR_LEN + IFINFOMSG_LEN {
            return Err(bad("a short link"));
        }
        let info = NLMSG_HDR_LEN;
        let arphrd = u16_at(msg, info + IFI_TYPE_OFFSET).ok_or_else(|| bad("a short link"))?;
        let replied = u32_at(msg, info + IFI_INDEX_OFFSET).ok_or_else(|| bad("a short link"))?;
        if replied as i32 != index {
            return Err(bad("a netlink reply for another interface"));
        }
        let mut out = LinkInfo {
            arphrd,
            mtu: None,
            stats: None,
        };
        let mut at = info + IFINFOMSG_LEN;
        while let (Some(rta_len), Some(rta_type)) = (u16_at(msg, at), u16_at(msg, at + 2)) {
            let rta_len = usize::from(rta_len);
            if rta_len < RTA_HDR_LEN || at + rta_len > msg.len() {
                return Err(bad("a netlink attribute past its message"));
            }
            let value = &msg[at + RTA_HDR_LEN..at + rta_len];
            // The kernel's type field carries two flag bits above the type.
            match rta_type & 0x3fff {
                IFLA_MTU => out.mtu = u32_at(value, 0),
                IFLA_STATS64 => {
                    let stat = |i: usize| u64_at(value, i * 8);
                    out.stats = (|| {
                        Some(LinkStats {
                            rx_packets: stat(STAT_RX_PACKETS)?,
                            tx_packets: stat(STAT_TX_PACKETS)?,
                            rx_errors: stat(STAT_RX_ERRORS)?,
                            rx_dropped: stat(STAT_RX_DROPPED)?,
                            rx_fifo_errors: stat(STAT_RX_FIFO_ERRORS)?,
                            rx_missed_errors: stat(STAT_RX_MISSED_ERRORS)?,
                        })
                    })();
                }
                _ => {}
            }
            at += aligned(rta_len);
        }
        Ok(out)
    }
}
