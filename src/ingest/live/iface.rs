//! Interfaces by name: index, link type, MTU, and the counters the kernel
//! keeps for the device itself (drops before any socket sees a frame).

use super::error::LiveError;
use super::link_info::LinkInfo;
use crate::ingest::LinkType;
use std::path::PathBuf;

/// `ARPHRD_ETHER`.
const ARPHRD_ETHER: u32 = 1;
/// `ARPHRD_LOOPBACK` (frames carry a zeroed Ethernet header).
const ARPHRD_LOOPBACK: u32 = 772;
/// `ARPHRD_NONE` (tun devices: frames start at the IP header).
const ARPHRD_NONE: u32 = 0xfffe;

/// An interface to capture on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    /// Its name.
    pub name: String,
    /// Its index.
    pub index: i32,
    /// The link type its frames have in a ring (and in a `-w` file).
    pub link_type: LinkType,
    /// Its MTU; frames longer than MTU plus link header are GSO/GRO
    /// super-frames.
    pub mtu: u32,
}

super::counter_set! {
    /// The device's own counters (netlink's `IFLA_STATS64`, as `ip -s
    /// link` shows them), or their growth.
    pub struct DeviceCounters {
        /// Frames received.
        pub rx_packets,
        /// Frames sent.
        pub tx_packets,
        /// Frames the device or the stack dropped on receive (the stack's
        /// drops after the capture taps too, such as frames of a VLAN with
        /// no VLAN device).
        pub rx_dropped,
        /// Receive errors.
        pub rx_errors,
        /// Receive FIFO overruns and missed frames.
        pub rx_missed,
    }
}

/// The device flags (`IFF_UP`, `IFF_RUNNING`, `IFF_LOOPBACK`, ...) of the
/// interface `name` in the process's own network namespace, by
/// `SIOCGIFFLAGS`; `None` where they cannot be read. `name` must be under
/// `IFNAMSIZ` bytes (longer names are cut, and so not found).
pub(super) fn device_flags(name: &str) -> Option<i32> {
    // SAFETY: a datagram socket for the ioctl alone, closed below; an
    // `ifreq` zeroed (a valid value of the C struct) whose name is copied
    // in with room for its NUL; SIOCGIFFLAGS writes only `ifru_flags`,
    // which is read after it succeeds.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return None;
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        for (dst, &src) in req
            .ifr_name
            .iter_mut()
            .zip(name.as_bytes().iter().take(libc::IFNAMSIZ - 1))
        {
            *dst = src as libc::c_char;
        }
        let rc = libc::ioctl(fd, libc::SIOCGIFFLAGS as _, &mut req);
        libc::close(fd);
        (rc == 0).then(|| i32::from(req.ifr_ifru.ifru_flags))
    }
}

fn sys_dir(name: &str) -> PathBuf {
    PathBuf::from("/sys/class/net").join(name)
}

fn read_u64(path: PathBuf) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Checks that `name` can name a Linux network interface, by the
/// kernel's own rule (`dev_valid_name`): 1 to 15 bytes, not `.` or `..`,
/// and no `/`, `:`, white space or NUL. A name that fails it can never be
/// found, so it is a bad `-i` value (exit 2), not a missing interface.
///
/// ```
/// use flowsieve::ingest::live::check_interface_name;
/// assert!(check_interface_name("eth0").is_ok());
/// assert!(check_interface_name("veth-a.100").is_ok());
/// for bad in ["", ".", "..", "eth0:1", "a b", "a/b", "a-name-of-16-byt"] {
///     assert!(check_interface_name(bad).is_err(), "{bad:?}");
/// }
/// ```
pub fn check_interface_name(name: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("{name:?} cannot name an interface: {why}"));
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return bad(&format!("a name is 1 to {} bytes", libc::IFNAMSIZ - 1));
    }
    if name == "." || name == ".." {
        return bad("'.' and '..' are not names");
    }
    if let Some(c) = name
        .chars()
        .find(|&c| c == '/' || c == ':' || c == '\0' || c.is_ascii_whitespace())
    {
        return bad(&format!("{c:?} is not allowed in a name"));
    }
    Ok(())
}

impl Interface {
    /// Looks an interface up by name.
    pub fn by_name(name: &str) -> Result<Interface, LiveError> {
        let missing = || LiveError::NoSuchInterface {
            iface: name.to_string(),
        };
        if let Err(reason) = check_interface_name(name) {
            return Err(LiveError::BadInterfaceName(reason));
        }
        let c = std::ffi::CString::new(name).map_err(|_| missing())?;
        // SAFETY: `c` is a valid NUL-terminated string.
        let index = unsafe { libc::if_nametoindex(c.as_ptr()) };
        if index == 0 {
            // tcpdump's pseudo-device for every interface at once, with
            // cooked link headers; not one flowsieve captures.
            if name == "any" {
                return Err(LiveError::AnyDevice);
            }
            return Err(missing());
        }
        // From the process's own namespace (netlink), or, where netlink
        // is refused, from /sys, which may be another namespace's.
        let dir = sys_dir(name);
        let link = LinkInfo::query(index as i32).ok();
        let arphrd = link.map_or_else(
            || read_u64(dir.join("type")).unwrap_or(u64::from(ARPHRD_ETHER)) as u32,
            |l| u32::from(l.arphrd),
        );
        let link_type = match arphrd {
            ARPHRD_ETHER | ARPHRD_LOOPBACK => LinkType::ETHERNET,
            ARPHRD_NONE => LinkType::RAW,
            other => {
                return Err(LiveError::UnsupportedLink {
                    iface: name.to_string(),
                    arphrd: other,
                });
            }
        };
        Ok(Interface {
            name: name.to_string(),
            index: index as i32,
            link_type,
            mtu: link
                .and_then(|l| l.mtu)
                .or_else(|| read_u64(dir.join("mtu")).map(|m| m as u32))
                .unwrap_or(1500),
        })
    }

    /// Whether the interface is administratively up (`IFF_UP`, as `ip
    /// link` shows it); true where the flags cannot be read, so that only
    /// a known-down interface is refused.
    ///
    /// Why `SIOCGIFFLAGS` and not `/sys/class/net/NAME/flags`: the ioctl
    /// asks the process's own network namespace, as the lookup by index
    /// does, while `/sys` shows the namespace it was mounted in (a process
    /// that entered a namespace with `nsenter --net` sees the old one's
    /// devices there), and a same-named device down elsewhere would refuse
    /// a capture that would run.
    pub fn is_up(&self) -> bool {
        device_flags(&self.name).is_none_or(|f| f & libc::IFF_UP != 0)
    }

    /// The device's counters now (zeros where the kernel exposes none):
    /// by netlink, which answers for the process's own namespace, or,
    /// where netlink is refused, from `/sys`.
    pub fn counters(&self) -> DeviceCounters {
        if let Ok(LinkInfo { stats: Some(s), .. }) = LinkInfo::query(self.index) {
            return DeviceCounters {
                rx_packets: s.rx_packets,
                tx_packets: s.tx_packets,
                rx_dropped: s.rx_dropped,
                rx_errors: s.rx_errors,
                rx_missed: s.rx_missed_errors + s.rx_fifo_errors,
            };
        }
        let s = sys_dir(&self.name).join("statistics");
        let get = |f: &str| read_u64(s.join(f)).unwrap_or(0);
        DeviceCounters {
            rx_packets: get("rx_packets"),
            tx_packets: get("tx_packets"),
            rx_dropped: get("rx_dropped"),
            rx_errors: get("rx_errors"),
            rx_missed: get("rx_missed_errors") + get("rx_fifo_errors"),
        }
    }

    /// Whether a frame (as captured, VLAN tags restored) is longer than
    /// the MTU allows: a GSO/GRO super-frame. On Ethernet the allowance is
    /// the 14-byte header plus 4 bytes for each 802.1Q/802.1ad tag the
    /// frame carries (up to two), so a tagged full-size frame is not
    /// counted and an untagged frame one byte over is.
    ///
    /// ```
    /// use flowsieve::ingest::live::Interface;
    /// use flowsieve::ingest::LinkType;
    /// let eth = Interface { name: "veth0".into(), index: 0, link_type: LinkType::ETHERNET, mtu: 1500 };
    /// let mut untagged = vec![0u8; 64];
    /// untagged[12..14].copy_from_slice(&[0x08, 0x00]);
    /// assert!(!eth.is_super_frame(&untagged, 1514));
    /// assert!(eth.is_super_frame(&untagged, 1515));
    /// let mut tagged = untagged.clone();
    /// tagged[12..14].copy_from_slice(&[0x81, 0x00]);
    /// assert!(!eth.is_super_frame(&tagged, 1518));
    /// assert!(eth.is_super_frame(&tagged, 1519));
    /// ```
    pub fn is_super_frame(&self, frame: &[u8], wire_len: u32) -> bool {
        if self.link_type != LinkType::ETHERNET {
            return wire_len > self.mtu;
        }
        let is_tag = |at: usize| matches!(frame.get(at..at + 2), Some([0x81, 0x00] | [0x88, 0xa8]));
        let tags = if is_tag(12) {
            1 + u32::from(is_tag(16))
        } else {
            0
        };
        wire_len > self.mtu.saturating_add(14 + 4 * tags)
    }
}
