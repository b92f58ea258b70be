//! The dissect module: link layers, IPv4/IPv6 walking and flow keys, on
//! real files per link type and on crafted frames.

use crate::common;

use common::{manifest, scan, shared_traces};
use flowsieve::dissect::{Dissector, FlowKey, IpVersion, SkipReason};
use flowsieve::ingest::LinkType;
use proptest::prelude::*;

// ---------- real files, one per link type ----------

/// Reads `file` and checks IP packets (the manifest's ipv4 + ipv6) and flows
/// against the manifest's independent parser; returns the scan for more.
fn check_real(file: &str) -> Option<common::Scan> {
    let dir = shared_traces(file)?;
    let entry = manifest(&dir)
        .into_iter()
        .find(|e| e.file == file)
        .expect("in manifest");
    let s = scan(&dir.join(file), Dissector::default());
    assert!(s.error.is_none(), "{file}: {:?}", s.error);
    let ip = entry.stats["ipv4"].as_u64().unwrap_or(0) + entry.stats["ipv6"].as_u64().unwrap_or(0);
    assert_eq!(s.packets - s.skips.total(), ip, "{file}: IP packets");
    assert_eq!(
        s.table.len() as u64,
        entry.u64("flows_5tuple"),
        "{file}: flows"
    );
    Some(s)
}

#[test]
fn link_ethernet_with_vlan() {
    check_real("l3_edge/vlan_with_ipv4_frags.pcap");
    check_real("backbone_like/wand_isp_vlan_snaplen_10k.pcap");
}

#[test]
fn link_ethernet_qinq_is_walked_to_its_non_ip_payload() {
    if let Some(s) = check_real("l3_edge/qinq_arp.pcap") {
        assert_eq!(s.skips.get(SkipReason::NonIp), 2);
    }
}

#[test]
fn link_ethernet_mpls_and_pppoe() {
    check_real("l3_edge/mpls_ip_10k_snaplen.pcap");
    check_real("l3_edge/mixed_vlan_mpls.pcap");
    check_real("l3_edge/pppoe_over_qinq.pcap");
    check_real("l3_edge/pppoe_ipv4_ipv6.pcap");
}

#[test]
fn link_linux_sll_113() {
    check_real("linktypes/sll_113_linux_cooked.pcap");
    check_real("linktypes/sll_113_kakaotalk_3k.pcap");
}

#[test]
fn link_linux_sll2_276() {
    check_real("linktypes/sll2_276_small.pcap");
    check_real("linktypes/sll2_276_large.pcap");
}

#[test]
fn link_raw_ip_12_101_228_229() {
    check_real("linktypes/raw_101.pcap");
    check_real("linktypes/dlt_raw_12_ipv6.pcap");
    check_real("linktypes/ipv4_228.pcap");
    check_real("linktypes/ipv6_229_mobility_ext.pcap");
    check_real("backbone_like/auckland2000_uplink_rawip_hdr52.pcap");
}

#[test]
fn link_null_0_and_ppp_9_and_chdlc_104() {
    check_real("linktypes/null_0_bsd_loopback.pcap");
    check_real("linktypes/ppp_9.pcap");
    check_real("linktypes/chdlc_104.pcap");
}

#[test]
fn link_unsupported_types_are_counted() {
    if let Some(s) = check_real("linktypes/radiotap_127_no_ip.pcap") {
        assert_eq!(s.skips.get(SkipReason::UnsupportedLinkType), 2);
    }
    if let Some(s) = check_real("linktypes/ipoib_242_big_endian.pcap") {
        assert_eq!(s.skips.get(SkipReason::UnsupportedLinkType), 30);
    }
}

#[test]
fn ipv6_extension_chains_from_real_captures() {
    for f in [
        "l3_edge/ipv6_home_address_opt.pcap",
        "l3_edge/ipv6_routing_type0.pcap",
        "l3_edge/ospfv3_with_ah.pcap",
        "l3_edge/bigtcp_ipv6_hbh_jumbo.pcap",
        "l3_edge/ipv6_ext_header_dos_35k.pcap",
        "l3_edge/ipv6_malformed_fragments.pcap",
        "many_flows/defrag_spray_ipv6ext_crafted.pcap",
    ] {
        check_real(f);
    }
}

#[test]
fn ipv4_fragments_and_big_tcp() {
    for f in [
        "l3_edge/ipv4_frag_3000.pcap",
        "l3_edge/ipv4_fragmented_garbage.pcap",
        "l3_edge/bigtcp_ipv4_totlen0.pcap",
        "many_flows/ddos_dns_rrsig_fragmented.pcap",
    ] {
        check_real(f);
    }
}

// ---------- crafted frames ----------

const ETH_HDR: [u8; 12] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11];

fn ipv4_udp(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, frag_word: u16) -> Vec<u8> {
    let mut p = vec![0x45, 0, 0, 28, 0, 0];
    p.extend_from_slice(&frag_word.to_be_bytes());
    p.extend_from_slice(&[64, 17, 0, 0]);
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    p.extend_from_slice(&sport.to_be_bytes());
    p.extend_from_slice(&dport.to_be_bytes());
    p.extend_from_slice(&[0, 8, 0, 0]);
    p
}

const V6_SRC: [u8; 16] = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const V6_DST: [u8; 16] = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

/// An IPv6 header with next header `nh`, followed by `rest`.
fn ipv6(nh: u8, rest: &[u8]) -> Vec<u8> {
    let mut p = vec![0x60, 0, 0, 0];
    p.extend_from_slice(&(rest.len() as u16).to_be_bytes());
    p.extend_from_slice(&[nh, 64]);
    p.extend_from_slice(&V6_SRC);
    p.extend_from_slice(&V6_DST);
    p.extend_from_slice(rest);
    p
}

fn ports(sport: u16, dport: u16) -> Vec<u8> {
    let mut v = sport.to_be_bytes().to_vec();
    v.extend_from_slice(&dport.to_be_bytes());
    v.extend_from_slice(&[0; 16]);
    v
}

fn d(link: LinkType, frame: &[u8]) -> Result<flowsieve::dissect::IpDissection, SkipReason> {
    Dissector::default().dissect(link, frame)
}

fn key(link: LinkType, frame: &[u8]) -> FlowKey {
    d(link, frame).expect("a key").key
}

#[test]
fn ipv6_first_fragment_with_more_fragments_keeps_its_ports() {
    // Fragment header bytes 2-3 = 0x0001: offset 0, M set. etherparse 0.19
    // read this as offset 1 (upstream issue #150) and dropped the ports.
    let mut frag = vec![17, 0, 0x00, 0x01, 0, 0, 0, 42];
    frag.extend_from_slice(&ports(5000, 53));
    let k = key(LinkType::RAW, &ipv6(44, &frag));
    assert_eq!((k.sport(), k.dport(), k.proto()), (5000, 53, 17));
    // Offset 1 (bytes 0x0008): a non-first fragment, ports 0.
    let mut frag = vec![17, 0, 0x00, 0x08, 0, 0, 0, 42];
    frag.extend_from_slice(&ports(5000, 53));
    let k = key(LinkType::RAW, &ipv6(44, &frag));
    assert_eq!((k.sport(), k.dport(), k.proto()), (0, 0, 17));
}

#[test]
fn ipv4_non_first_fragment_has_ports_zero() {
    let first = key(
        LinkType::RAW,
        &ipv4_udp([1, 1, 1, 1], [2, 2, 2, 2], 7, 8, 0x2000),
    );
    assert_eq!((first.sport(), first.dport()), (7, 8));
    let later = key(
        LinkType::RAW,
        &ipv4_udp([1, 1, 1, 1], [2, 2, 2, 2], 7, 8, 0x0010),
    );
    assert_eq!((later.sport(), later.dport(), later.proto()), (0, 0, 17));
}

#[test]
fn ipv6_allow_listed_chain_is_walked_to_tcp() {
    // hop-by-hop -> routing -> destination options -> AH -> TCP.
    let mut chain = vec![43, 0, 1, 4, 0, 0, 0, 0]; // HBH, next routing
    chain.extend_from_slice(&[60, 0, 0, 0, 0, 0, 0, 0]); // routing, next dest opts
    chain.extend_from_slice(&[51, 0, 1, 4, 0, 0, 0, 0]); // dest opts, next AH
    chain.extend_from_slice(&[6, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1]); // AH (12 bytes), next TCP
    chain.extend_from_slice(&ports(443, 50000));
    let k = key(LinkType::RAW, &ipv6(0, &chain));
    assert_eq!(
        (k.sport(), k.dport(), k.proto(), k.version()),
        (443, 50000, 6, IpVersion::V6)
    );
}

#[test]
fn ipv6_mobility_header_is_walked_and_unknown_headers_are_not() {
    let mh = [59, 0, 5, 0, 0, 0, 0, 0];
    assert_eq!(key(LinkType::RAW, &ipv6(135, &mh)).proto(), 59);
    // 253 (experimental): stop, never guess what follows.
    let k = key(LinkType::RAW, &ipv6(253, &ports(1, 2)));
    assert_eq!((k.proto(), k.sport(), k.dport()), (253, 0, 0));
}

#[test]
fn ports_cut_off_by_the_capture_are_zero_and_flagged() {
    let mut p = ipv4_udp([1, 1, 1, 1], [2, 2, 2, 2], 7, 8, 0);
    p.truncate(22);
    let r = d(LinkType::RAW, &p).unwrap();
    assert_eq!(
        (r.key.sport(), r.key.dport(), r.ports_truncated),
        (0, 0, true)
    );
    let r = d(
        LinkType::RAW,
        &ipv4_udp([1, 1, 1, 1], [2, 2, 2, 2], 7, 8, 0),
    )
    .unwrap();
    assert!(!r.ports_truncated);
}

#[test]
fn vlan_qinq_mpls_pppoe_encapsulations() {
    let ip = ipv4_udp([10, 0, 0, 1], [10, 0, 0, 2], 1111, 2222, 0);
    let want = FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], 1111, 2222, 17);
    let eth = |ether: u16, rest: &[u8]| {
        let mut f = ETH_HDR.to_vec();
        f.extend_from_slice(&ether.to_be_bytes());
        f.extend_from_slice(rest);
        f
    };
    // 802.1ad outer + 802.1Q inner.
    let mut tags = vec![0x00, 0x0a, 0x81, 0x00, 0x00, 0x14, 0x08, 0x00];
    tags.extend_from_slice(&ip);
    assert_eq!(key(LinkType::ETHERNET, &eth(0x88a8, &tags)), want);
    // Two MPLS labels, bottom of stack on the second.
    let mut mpls = vec![0x00, 0x01, 0x00, 0x40, 0x00, 0x02, 0x01, 0x40];
    mpls.extend_from_slice(&ip);
    assert_eq!(key(LinkType::ETHERNET, &eth(0x8847, &mpls)), want);
    // PPPoE session carrying PPP IPv4.
    let mut pppoe = vec![0x11, 0x00, 0x12, 0x34, 0x00, 0x1e, 0x00, 0x21];
    pppoe.extend_from_slice(&ip);
    assert_eq!(key(LinkType::ETHERNET, &eth(0x8864, &pppoe)), want);
    // ARP: not IP.
    assert_eq!(
        d(LinkType::ETHERNET, &eth(0x0806, &[0; 28])),
        Err(SkipReason::NonIp)
    );
    // MPLS over a pseudowire control word: not IP.
    let mut pw = vec![0x00, 0x01, 0x01, 0x40, 0x00, 0x00, 0x00, 0x00];
    pw.extend_from_slice(&ip);
    assert_eq!(
        d(LinkType::ETHERNET, &eth(0x8847, &pw)),
        Err(SkipReason::MplsNonIp)
    );
    // A VLAN tag cut off.
    assert_eq!(
        d(LinkType::ETHERNET, &eth(0x8100, &[0, 1])),
        Err(SkipReason::TruncatedLinkHeader)
    );
}

#[test]
fn cooked_loopback_ppp_and_hdlc_headers() {
    let ip = ipv4_udp([10, 0, 0, 1], [10, 0, 0, 2], 1, 2, 0);
    let want = FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], 1, 2, 17);
    // SLL2 with ARPHRD_NONE (tun devices), which etherparse's SLL rejects.
    let mut sll2 = vec![
        0x08, 0x00, 0, 0, 0, 0, 0, 3, 0xff, 0xfe, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    sll2.extend_from_slice(&ip);
    assert_eq!(key(LinkType::LINUX_SLL2, &sll2), want);
    // SLL (v1) with a netlink hardware type: not IP.
    let mut sll = vec![0, 0, 0x03, 0x38, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x08, 0x00];
    sll.extend_from_slice(&ip);
    assert_eq!(d(LinkType::LINUX_SLL, &sll), Err(SkipReason::NonIp));
    // NULL: AF_INET little-endian; LOOP: AF_INET6 (Darwin, 30) big-endian.
    let mut null = 2u32.to_le_bytes().to_vec();
    null.extend_from_slice(&ip);
    assert_eq!(key(LinkType::NULL, &null), want);
    let mut lo = 30u32.to_be_bytes().to_vec();
    lo.extend_from_slice(&ipv6(59, &[]));
    assert_eq!(key(LinkType::LOOP, &lo).version(), IpVersion::V6);
    // PPP with address/control and a compressed one-byte protocol.
    let mut ppp = vec![0xff, 0x03, 0x21];
    ppp.extend_from_slice(&ip);
    assert_eq!(key(LinkType::PPP, &ppp), want);
    // Cisco HDLC.
    let mut hdlc = vec![0x0f, 0x00, 0x08, 0x00];
    hdlc.extend_from_slice(&ip);
    assert_eq!(key(LinkType::C_HDLC, &hdlc), want);
}

#[test]
fn raw_ip_dispatches_on_the_version_field() {
    assert_eq!(
        d(LinkType::RAW, &[0x55, 0, 0, 0]),
        Err(SkipReason::BadIpVersion)
    );
    assert_eq!(d(LinkType::RAW, &[]), Err(SkipReason::TruncatedIpHeader));
    assert_eq!(
        d(LinkType::RAW, &[0x45, 0, 0]),
        Err(SkipReason::TruncatedIpHeader)
    );
    assert_eq!(
        d(
            LinkType::RAW,
            &[
                0x41, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
            ]
        ),
        Err(SkipReason::BadIpHeader)
    );
    assert_eq!(
        d(LinkType::ETHERNET, &ETH_HDR),
        Err(SkipReason::TruncatedLinkHeader)
    );
}

#[test]
fn bidirectional_keys_merge_both_directions() {
    let a = ipv4_udp([10, 0, 0, 9], [10, 0, 0, 2], 53, 40000, 0);
    let b = ipv4_udp([10, 0, 0, 2], [10, 0, 0, 9], 40000, 53, 0);
    let bi = Dissector::new(true);
    let (ka, kb) = (
        bi.dissect(LinkType::RAW, &a).unwrap().key,
        bi.dissect(LinkType::RAW, &b).unwrap().key,
    );
    assert_eq!(ka, kb);
    assert_eq!(ka.src().to_string(), "10.0.0.2");
    assert_ne!(key(LinkType::RAW, &a), key(LinkType::RAW, &b));
}

const LINKS: [u16; 15] = [
    0, 1, 9, 12, 14, 50, 101, 104, 108, 113, 127, 228, 229, 276, 65535,
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn dissect_never_panics_and_keys_obey_the_port_rule(link in prop::sample::select(LINKS.to_vec()), bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(r) = Dissector::default().dissect(LinkType(link), &bytes) {
            let k = r.key;
            if !matches!(k.proto(), 6 | 17 | 132 | 136) {
                prop_assert_eq!((k.sport(), k.dport()), (0, 0));
            }
        }
    }

    #[test]
    fn dissect_never_panics_on_mutated_real_headers(flip in 0usize..60, val in any::<u8>(), cut in 0usize..70) {
        // A valid Ethernet/VLAN/IPv6/HBH/UDP frame with one byte changed and a cut.
        let mut f = ETH_HDR.to_vec();
        f.extend_from_slice(&[0x81, 0x00, 0, 5, 0x86, 0xdd]);
        let mut hbh = vec![17, 0, 1, 4, 0, 0, 0, 0];
        hbh.extend_from_slice(&ports(1, 2));
        f.extend_from_slice(&ipv6(0, &hbh));
        if flip < f.len() { f[flip] = val; }
        f.truncate(cut.max(1) + 14);
        let _ = Dissector::default().dissect(LinkType::ETHERNET, &f);
    }

    #[test]
    fn canonical_key_is_direction_free(s in any::<[u8; 4]>(), t in any::<[u8; 4]>(), sp in any::<u16>(), dp in any::<u16>(), proto in any::<u8>()) {
        let k = FlowKey::v4(s, t, sp, dp, proto);
        prop_assert_eq!(k.canonical(), k.reversed().canonical());
        let c = k.canonical();
        prop_assert!(c == k || c == k.reversed());
    }
}

/// The key is 40 bytes and 8-byte aligned (addresses as 64-bit halves, not
/// `u128`s, whose 16-byte alignment padded it to 48): every exact
/// flow-table entry holds one. The packet record crossing to the shards
/// holds none (keys travel beside it only when events or export need
/// them), so it is 32 bytes.
#[test]
fn flow_key_is_40_bytes_so_records_and_table_entries_stay_small() {
    use std::mem::{align_of, size_of};
    assert_eq!(size_of::<FlowKey>(), 40);
    assert_eq!(align_of::<FlowKey>(), 8);
    assert_eq!(size_of::<flowsieve::pipeline::PacketRecord>(), 32);
    // The exact table's stored entry: the key and the flow's figures in
    // two cache lines.
    assert_eq!(flowsieve::truth::FlowTable::ENTRY_BYTES, 96);
}

proptest! {
    /// The halves keep every observable of the key: addresses, ordering in
    /// `canonical`, and the 128-bit views.
    #[test]
    fn flow_key_halves_keep_addresses_and_order(
        a in any::<u128>(), b in any::<u128>(), sp in any::<u16>(), dp in any::<u16>(),
    ) {
        let k = FlowKey::v6(a.to_be_bytes(), b.to_be_bytes(), sp, dp, 6);
        prop_assert_eq!(k.src_bits(), a);
        prop_assert_eq!(k.dst_bits(), b);
        prop_assert_eq!(k.src(), std::net::IpAddr::V6(std::net::Ipv6Addr::from(a)));
        let c = k.canonical();
        let want_swap = (a, sp) > (b, dp);
        prop_assert_eq!(c.src_bits(), if want_swap { b } else { a });
        prop_assert_eq!(c.sport(), if want_swap { dp } else { sp });
    }

    /// Ports, protocol and version share one word in the key: each reads
    /// back as it was given, for either version and after a reversal, and
    /// keys equal exactly when all five parts do.
    #[test]
    fn flow_key_ports_protocol_and_version_read_back_from_their_word(
        a in any::<[u8; 4]>(), b in any::<[u8; 4]>(), sp in any::<u16>(), dp in any::<u16>(),
        proto in any::<u8>(), v6 in any::<bool>(), other in any::<(u16, u16, u8)>(),
    ) {
        let (a6, b6) = (
            u128::from(u32::from_be_bytes(a)).to_be_bytes(),
            u128::from(u32::from_be_bytes(b)).to_be_bytes(),
        );
        let key = |sp, dp, proto| {
            if v6 {
                FlowKey::v6(a6, b6, sp, dp, proto)
            } else {
                FlowKey::v4(a, b, sp, dp, proto)
            }
        };
        let version = if v6 { IpVersion::V6 } else { IpVersion::V4 };
        let k = key(sp, dp, proto);
        prop_assert_eq!((k.sport(), k.dport(), k.proto(), k.version()), (sp, dp, proto, version));
        let r = k.reversed();
        prop_assert_eq!((r.sport(), r.dport(), r.proto(), r.version()), (dp, sp, proto, version));
        prop_assert_eq!(r.src_bits(), k.dst_bits());
        prop_assert_eq!(r.reversed(), k);
        let (sp2, dp2, proto2) = other;
        prop_assert_eq!(key(sp2, dp2, proto2) == k, (sp2, dp2, proto2) == (sp, dp, proto));
        // An IPv4 key never equals the IPv6 key of the same numbers.
        let v4 = FlowKey::v4(a, b, sp, dp, proto);
        prop_assert_eq!(v4 == k, !v6);
        prop_assert_eq!(
            format!("{k:?}"),
            format!(
                "FlowKey {{ src: {:?}, dst: {:?}, sport: {sp}, dport: {dp}, proto: {proto}, version: {version:?} }}",
                [0u64, u64::from(u32::from_be_bytes(a))],
                [0u64, u64::from(u32::from_be_bytes(b))],
            )
        );
    }
}

// ---------- the common frames' straight path against the general path ----------

/// Every packet of every shared capture, with directional and canonical
/// keys: `dissect` (the straight path where it applies) answers exactly
/// what `dissect_general` answers, keys and skip reasons alike.
#[test]
fn dissect_answers_as_the_general_path_on_every_shared_capture() {
    let Some(dir) = shared_traces("dissect_answers_as_the_general_path_on_every_shared_capture")
    else {
        return;
    };
    let dissectors = [Dissector::new(false), Dissector::new(true)];
    let (mut packets, mut keyed, mut skipped) = (0u64, 0u64, 0u64);
    for path in common::manifest_paths(&dir) {
        let Ok(mut reader) = flowsieve::ingest::TraceReader::open(&path) else {
            continue;
        };
        let mut n = 0u64;
        while let Ok(Some(p)) = reader.next_packet() {
            n += 1;
            for d in &dissectors {
                let general = d.dissect_general(p.link_type, p.data);
                assert_eq!(
                    d.dissect(p.link_type, p.data),
                    general,
                    "{}: packet {n}, link {}, bidirectional {}",
                    path.display(),
                    p.link_type,
                    d.bidirectional
                );
                if !d.bidirectional {
                    match general {
                        Ok(_) => keyed += 1,
                        Err(_) => skipped += 1,
                    }
                }
            }
        }
        packets += n;
    }
    // Most of the captures' packets are keyed, and some are skipped: both
    // answers were compared, not just one kind.
    assert!(packets > 100_000, "{packets} packets read");
    assert!(
        keyed > packets / 2 && skipped > 0,
        "{keyed} keyed, {skipped} skipped"
    );
}

/// Which frames the straight path takes, not only that its answers are
/// the general path's (which holds as well when it takes none): every
/// common frame (Ethernet II with 0-2 VLAN tags, Linux cooked v1 and v2
/// with an Ethernet or a tun device's ARPHRD type and 0-1 tags, raw IP
/// under each raw link type; IPv4/UDP and IPv6/TCP) is taken, with the
/// general path's key in both key kinds; and the frames it leaves have a
/// key by the general path all the same.
#[test]
fn the_straight_path_takes_the_common_frames() {
    let v4 = ipv4_udp([10, 0, 0, 1], [10, 0, 0, 2], 53, 4000, 0);
    let v6 = ipv6(6, &ports(443, 50000));
    let tag = |ether: u16| [0, 7, (ether >> 8) as u8, ether as u8];
    let mut taken: Vec<(LinkType, Vec<u8>)> = Vec::new();
    for (ip, ether) in [(&v4, 0x0800u16), (&v6, 0x86dd)] {
        for tags in [&[][..], &[0x8100][..], &[0x88a8, 0x8100][..]] {
            // The ether type after the link header, then each tag with the
            // ether type of what follows it.
            let chain: Vec<u16> = tags.iter().copied().chain([ether]).collect();
            let mut tagged = Vec::new();
            for next in &chain[1..] {
                tagged.extend_from_slice(&tag(*next));
            }
            tagged.extend_from_slice(ip);
            let mut eth = ETH_HDR.to_vec();
            eth.extend_from_slice(&chain[0].to_be_bytes());
            eth.extend_from_slice(&tagged);
            taken.push((LinkType::ETHERNET, eth));
            if tags.len() > 1 {
                continue;
            }
            for arphrd in [1u16, 0xfffe] {
                let mut sll = vec![0, 0];
                sll.extend_from_slice(&arphrd.to_be_bytes());
                sll.extend_from_slice(&[0, 6, 2, 0, 0, 0, 0, 1, 0, 0]);
                sll.extend_from_slice(&chain[0].to_be_bytes());
                sll.extend_from_slice(&tagged);
                taken.push((LinkType::LINUX_SLL, sll));
                let mut sll2 = chain[0].to_be_bytes().to_vec();
                sll2.extend_from_slice(&[0, 0, 0, 0, 0, 3]);
                sll2.extend_from_slice(&arphrd.to_be_bytes());
                sll2.extend_from_slice(&[0, 6, 2, 0, 0, 0, 0, 1, 0, 0]);
                sll2.extend_from_slice(&tagged);
                taken.push((LinkType::LINUX_SLL2, sll2));
            }
        }
        for raw in [
            LinkType::RAW,
            LinkType::RAW_12,
            LinkType::RAW_14,
            LinkType::IPV4,
            LinkType::IPV6,
        ] {
            taken.push((raw, ip.clone()));
        }
    }
    assert_eq!(taken.len(), 2 * (3 + 2 * 2 * 2 + 5));
    for (link, frame) in &taken {
        for dissector in [Dissector::new(false), Dissector::new(true)] {
            let general = dissector.dissect_general(*link, frame);
            assert!(general.is_ok(), "{link:?} {frame:02x?}: {general:?}");
            assert_eq!(
                dissector
                    .dissect_straight(*link, frame)
                    .ok_or(SkipReason::NonIp),
                general,
                "{link:?} {frame:02x?}"
            );
        }
    }
    // Left to the general path, which keys them: a netlink capture is not
    // one (NonIp) but a cooked re-injected Ethernet frame, MPLS, an IPv6
    // extension header and PPP are.
    let mut loopback = vec![0, 0, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0, 0x00, 0x60];
    loopback.extend_from_slice(&ETH_HDR);
    loopback.extend_from_slice(&[0x08, 0x00]);
    loopback.extend_from_slice(&v4);
    let mut mpls = ETH_HDR.to_vec();
    mpls.extend_from_slice(&[0x88, 0x47, 0, 0, 0x11, 64]);
    mpls.extend_from_slice(&v4);
    let mut ppp = vec![0xff, 0x03, 0x21];
    ppp.extend_from_slice(&v4);
    let hop_by_hop = ipv6(0, &[6, 0, 0, 0, 0, 0, 0, 0, 0, 80, 1, 187, 0, 0, 0, 0]);
    let mut netlink = vec![0, 0, 0x03, 0x38, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0x08, 0x00];
    netlink.extend_from_slice(&v4);
    for (link, frame, keyed) in [
        (LinkType::LINUX_SLL, &loopback, true),
        (LinkType::ETHERNET, &mpls, true),
        (LinkType::PPP, &ppp, true),
        (LinkType::RAW, &hop_by_hop, true),
        (LinkType::LINUX_SLL, &netlink, false),
    ] {
        let d = Dissector::default();
        assert_eq!(d.dissect_straight(link, frame), None, "{link:?}");
        assert_eq!(d.dissect_general(link, frame).is_ok(), keyed, "{link:?}");
    }
}

/// The frame the property test below builds: a link type, then (Ethernet,
/// Linux cooked v1 and v2) an ether type and VLAN tags, then an IP header
/// whose first byte, protocol or next header, and remaining bytes vary, cut
/// anywhere. A cooked header's ARPHRD type is Ethernet, none, netlink (whose
/// protocol is not an ether type) or any.
fn frames() -> impl Strategy<Value = (LinkType, Vec<u8>)> {
    let ether_types = prop_oneof![
        Just(0x0800u16),
        Just(0x86dd),
        Just(0x8100),
        Just(0x88a8),
        Just(0x9100),
        Just(0x9200),
        Just(0x8847),
        Just(0x8864),
        Just(0x0060),
        any::<u16>(),
    ];
    let arphrd = prop_oneof![Just(1u16), Just(0xfffe), Just(824), any::<u16>()];
    let tags = prop::collection::vec(
        (
            any::<u16>(),
            prop_oneof![Just(0x0800u16), Just(0x86dd), Just(0x8100), any::<u16>()],
        ),
        0..3,
    );
    let first = prop_oneof![
        Just(0x45u8),
        Just(0x46),
        Just(0x4f),
        Just(0x44),
        Just(0x60),
        Just(0x6f),
        any::<u8>(),
    ];
    let proto = prop_oneof![
        Just(6u8),
        Just(17),
        Just(132),
        Just(136),
        Just(1),
        Just(0),
        Just(43),
        Just(44),
        Just(51),
        Just(60),
        Just(135),
        Just(59),
        any::<u8>(),
    ];
    (
        prop::sample::select(vec![1u16, 12, 14, 101, 228, 229, 113, 276, 0]),
        (ether_types, arphrd),
        tags,
        first,
        proto,
        prop::collection::vec(any::<u8>(), 40..90),
        any::<prop::sample::Index>(),
    )
        .prop_map(|(link, (ether, arphrd), tags, first, proto, mut ip, cut)| {
            ip[0] = first;
            match first >> 4 {
                4 => ip[9] = proto,
                6 => ip[6] = proto,
                _ => {}
            }
            let mut frame = Vec::new();
            match link {
                1 => {
                    frame.extend_from_slice(&ETH_HDR);
                    frame.extend_from_slice(&ether.to_be_bytes());
                }
                113 => {
                    // Packet type, ARPHRD type, address length, address.
                    frame.extend_from_slice(&[0, 4]);
                    frame.extend_from_slice(&arphrd.to_be_bytes());
                    frame.extend_from_slice(&[0, 6, 2, 0, 0, 0, 0, 1, 0, 0]);
                    frame.extend_from_slice(&ether.to_be_bytes());
                }
                276 => {
                    // Protocol, reserved, interface index, ARPHRD type,
                    // packet type, address length, address.
                    frame.extend_from_slice(&ether.to_be_bytes());
                    frame.extend_from_slice(&[0, 0, 0, 0, 0, 3]);
                    frame.extend_from_slice(&arphrd.to_be_bytes());
                    frame.extend_from_slice(&[4, 6, 2, 0, 0, 0, 0, 1, 0, 0]);
                }
                _ => {}
            }
            if matches!(link, 1 | 113 | 276) {
                for (tci, inner) in tags {
                    frame.extend_from_slice(&tci.to_be_bytes());
                    frame.extend_from_slice(&inner.to_be_bytes());
                }
            }
            frame.extend_from_slice(&ip);
            let cut = cut.index(frame.len() + 1);
            frame.truncate(cut);
            (LinkType(link), frame)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    /// On built frames, cut anywhere: `dissect` answers exactly what
    /// `dissect_general` answers, keys and skip reasons, both key kinds.
    #[test]
    fn dissect_answers_as_the_general_path_on_built_frames((link, frame) in frames()) {
        for d in [Dissector::new(false), Dissector::new(true)] {
            prop_assert_eq!(d.dissect(link, &frame), d.dissect_general(link, &frame));
        }
    }

    /// The same on arbitrary bytes, for every link type the general path
    /// knows and some it does not.
    #[test]
    fn dissect_answers_as_the_general_path_on_arbitrary_bytes(link in prop::sample::select(LINKS.to_vec()), bytes in prop::collection::vec(any::<u8>(), 0..120)) {
        let d = Dissector::new(false);
        prop_assert_eq!(d.dissect(LinkType(link), &bytes), d.dissect_general(LinkType(link), &bytes));
    }
}
