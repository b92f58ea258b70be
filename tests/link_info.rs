//! `flowsieve::ingest::live::LinkInfo`: reading the kernel's `RTM_NEWLINK`
//! reply, built here field by field from the layouts in
//! `linux/netlink.h`, `linux/rtnetlink.h` and `linux/if_link.h`, and the
//! query against this process's own loopback device.

use flowsieve::ingest::live::{LinkInfo, LinkStats};
use proptest::prelude::*;

/// An `RTM_NEWLINK` message for `index` of hardware type `arphrd`, with
/// the attributes `(type, value)` in order, each padded to 4 bytes.
fn newlink(index: i32, arphrd: u16, attrs: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut m = vec![0u8; 16];
    m[4..6].copy_from_slice(&16u16.to_ne_bytes()); // RTM_NEWLINK
    // struct ifinfomsg: family, pad, type, index, flags, change.
    m.extend_from_slice(&[0, 0]);
    m.extend_from_slice(&arphrd.to_ne_bytes());
    m.extend_from_slice(&index.to_ne_bytes());
    m.extend_from_slice(&[0; 8]);
    for (t, v) in attrs {
        m.extend_from_slice(&((4 + v.len()) as u16).to_ne_bytes());
        m.extend_from_slice(&t.to_ne_bytes());
        m.extend_from_slice(v);
        while !m.len().is_multiple_of(4) {
            m.push(0);
        }
    }
    let len = m.len() as u32;
    m[0..4].copy_from_slice(&len.to_ne_bytes());
    m
}

#[test]
fn a_reply_gives_the_type_the_mtu_and_the_counters() {
    // struct rtnl_link_stats64: 24 u64 counters, each set to its position
    // times 10, so that a field read from the wrong place shows.
    let stats: Vec<u8> = (0..24u64).flat_map(|i| (i * 10).to_ne_bytes()).collect();
    let reply = newlink(
        7,
        0xfffe,
        &[
            (3, b"tun7\0".to_vec()),             // IFLA_IFNAME, padded
            (4, 1400u32.to_ne_bytes().to_vec()), // IFLA_MTU
            (23, stats),                         // IFLA_STATS64
        ],
    );
    let info = LinkInfo::parse(&reply, 7).unwrap();
    assert_eq!(info.arphrd, 0xfffe);
    assert_eq!(info.mtu, Some(1400));
    assert_eq!(
        info.stats,
        Some(LinkStats {
            rx_packets: 0,
            tx_packets: 10,
            rx_errors: 40,
            rx_dropped: 60,
            rx_fifo_errors: 140,
            rx_missed_errors: 150,
        })
    );
    // Another interface's reply is not this one's.
    assert!(LinkInfo::parse(&reply, 8).is_err());
    // A short IFLA_STATS64 (an older struct) gives no counters, not wrong ones.
    let short = newlink(7, 1, &[(23, vec![0; 8 * 10])]);
    assert_eq!(LinkInfo::parse(&short, 7).unwrap().stats, None);
}

#[test]
fn an_error_reply_is_the_kernels_errno() {
    // NLMSG_ERROR with -ENODEV.
    let mut m = vec![0u8; 20];
    m[0..4].copy_from_slice(&20u32.to_ne_bytes());
    m[4..6].copy_from_slice(&2u16.to_ne_bytes());
    m[16..20].copy_from_slice(&(-19i32).to_ne_bytes());
    let e = LinkInfo::parse(&m, 1).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(19));
}

#[test]
fn the_query_answers_for_this_namespaces_loopback() {
    // SAFETY: a NUL-terminated name.
    let index = unsafe { libc::if_nametoindex(c"lo".as_ptr()) };
    assert!(index > 0);
    let info = LinkInfo::query(index as i32).unwrap();
    assert_eq!(info.arphrd, 772, "ARPHRD_LOOPBACK");
    assert_eq!(
        info.mtu.map(|m| m.to_string()),
        std::fs::read_to_string("/sys/class/net/lo/mtu")
            .ok()
            .map(|s| s.trim().to_owned())
    );
    assert!(info.stats.is_some());
}

proptest! {
    /// Any bytes: an answer or an error, never a panic.
    #[test]
    fn any_bytes_parse_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200), index in any::<i32>()) {
        let _ = LinkInfo::parse(&bytes, index);
    }

    /// A valid reply with its length field changed is refused or read
    /// within its bytes, never past them.
    #[test]
    fn a_wrong_length_is_refused_or_kept_within(len in 0u32..400) {
        let mut reply = newlink(3, 1, &[(4, 9000u32.to_ne_bytes().to_vec())]);
        reply[0..4].copy_from_slice(&len.to_ne_bytes());
        if let Ok(info) = LinkInfo::parse(&reply, 3) {
            prop_assert!(len as usize <= reply.len() && len >= 32);
            prop_assert!(info.mtu.is_none() || len >= 40);
        }
    }
}
