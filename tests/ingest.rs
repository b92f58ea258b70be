//! The ingest module: classic pcap and pcapng framing, compressed streams,
//! and every kind of damage the reader must survive with a one-line error.

use crate::common;

use common::pcapng::Ng;
use common::{FlowRow, scan, shared_traces, sorted_flows};
use flowsieve::dissect::Dissector;
use flowsieve::ingest::{
    AnomalyKind, Compression, ContainerFormat, IngestError, LinkType, PcapError, PcapNgError,
    Position, ReadMode, TimeOrder, Timestamp, TraceReader,
};
use flowsieve::synth::{OutputFormat, SynthConfig, generate};
use std::io::Write;

// ---------- builders for crafted files ----------

/// A classic pcap global header.
fn pcap_header(big_endian: bool, magic: u32, snaplen: u32, link: u32) -> Vec<u8> {
    let mut v = Vec::new();
    let put = |v: &mut Vec<u8>, x: u32| {
        v.extend_from_slice(&if big_endian {
            x.to_be_bytes()
        } else {
            x.to_le_bytes()
        })
    };
    put(&mut v, magic);
    let vers: [u16; 2] = [2, 4];
    for x in vers {
        v.extend_from_slice(&if big_endian {
            x.to_be_bytes()
        } else {
            x.to_le_bytes()
        });
    }
    put(&mut v, 0);
    put(&mut v, 0);
    put(&mut v, snaplen);
    put(&mut v, link);
    v
}

fn pcap_record(
    v: &mut Vec<u8>,
    big_endian: bool,
    secs: u32,
    frac: u32,
    caplen: u32,
    wire: u32,
    data: &[u8],
) {
    for x in [secs, frac, caplen, wire] {
        v.extend_from_slice(&if big_endian {
            x.to_be_bytes()
        } else {
            x.to_le_bytes()
        });
    }
    v.extend_from_slice(data);
}

/// A raw-IP (link type 101) IPv4/UDP packet 10.0.0.1:sport -> 10.0.0.2:53.
fn udp_packet(sport: u16) -> Vec<u8> {
    let mut p = vec![
        0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ];
    p.extend_from_slice(&sport.to_be_bytes());
    p.extend_from_slice(&[0, 53, 0, 8, 0, 0]);
    p
}

/// A packet as (timestamp, link type, wire length, bytes).
type Rec = (Timestamp, LinkType, u32, Vec<u8>);

fn read_all(bytes: Vec<u8>) -> (Vec<Rec>, Option<IngestError>, TraceReader) {
    let mut r = TraceReader::from_bytes("crafted.pcap", bytes).expect("opens");
    let mut out = Vec::new();
    let err = loop {
        match r.next_packet() {
            Ok(Some(p)) => out.push((p.ts, p.link_type, p.wire_len, p.data.to_vec())),
            Ok(None) => break None,
            Err(e) => break Some(e),
        }
    };
    // After an error or the end, the reader stays finished.
    assert!(matches!(r.next_packet(), Ok(None)));
    (out, err, r)
}

const MAGIC_US: u32 = 0xa1b2_c3d4;
const MAGIC_NS: u32 = 0xa1b2_3c4d;
const MAGIC_MODIFIED: u32 = 0xa1b2_cd34;

// ---------- classic pcap ----------

#[test]
fn pcap_both_byte_orders_and_both_resolutions() {
    for big in [false, true] {
        for (magic, units) in [(MAGIC_US, 1_000_000u64), (MAGIC_NS, 1_000_000_000)] {
            let mut f = pcap_header(big, magic, 65535, 101);
            let p = udp_packet(1000);
            pcap_record(&mut f, big, 1_600_000_000, 123, p.len() as u32, 60, &p);
            let (pk, err, r) = read_all(f);
            assert!(err.is_none());
            assert_eq!(pk.len(), 1);
            assert_eq!(pk[0].0, Timestamp::from_parts(1_600_000_000, 123, units));
            assert_eq!(pk[0].1, LinkType::RAW);
            assert_eq!(pk[0].2, 60, "wire length kept separately from caplen");
            assert_eq!(pk[0].3, p);
            let ContainerFormat::Pcap(v) = r.format() else {
                panic!("pcap")
            };
            assert_eq!((v.big_endian, v.nanosecond), (big, magic == MAGIC_NS));
        }
    }
}

#[test]
fn pcap_modified_kuznetzov_has_24_byte_records() {
    let mut f = pcap_header(false, MAGIC_MODIFIED, 65535, 101);
    let p = udp_packet(7);
    for i in 0..3u32 {
        pcap_record(
            &mut f,
            false,
            10 + i,
            0,
            p.len() as u32,
            p.len() as u32,
            &[],
        );
        // The 8 extra header bytes: ifindex, protocol, packet type, padding.
        f.extend_from_slice(&[1, 0, 0, 0, 8, 0, 0, 0]);
        f.extend_from_slice(&p);
    }
    let (pk, err, _) = read_all(f);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(pk.len(), 3);
    assert_eq!(pk[2].0.secs(), 12);
    assert_eq!(pk[2].3, p);
}

#[test]
fn empty_file_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.pcap");
    std::fs::write(&path, b"").unwrap();
    let e = TraceReader::open(&path).err().expect("error");
    assert!(matches!(e, IngestError::Empty { .. }));
    let msg = e.to_string();
    assert!(
        msg.contains("empty.pcap") && msg.contains("empty") && !msg.contains('\n'),
        "{msg}"
    );
}

#[test]
fn missing_file_is_an_open_error() {
    let e = TraceReader::open("/nonexistent/x.pcap")
        .err()
        .expect("error");
    assert!(matches!(e, IngestError::Open { .. }));
    assert!(!e.is_damage());
}

#[test]
fn bad_magic_is_an_unknown_format_at_offset_0() {
    let e = TraceReader::from_bytes("junk.bin", b"GIF89a not a capture".to_vec())
        .err()
        .expect("error");
    let msg = e.to_string();
    assert!(matches!(e, IngestError::UnknownFormat { .. }));
    assert!(
        msg.contains("junk.bin") && msg.contains("byte offset 0") && msg.contains("47494638"),
        "{msg}"
    );
}

#[test]
fn truncated_file_header() {
    let mut f = pcap_header(false, MAGIC_US, 65535, 1);
    f.truncate(10);
    let (pk, err, _) = read_all(f);
    assert!(pk.is_empty());
    match err {
        Some(IngestError::Pcap {
            kind: PcapError::TruncatedFileHeader { len: 10 },
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn truncated_record_header_keeps_earlier_records() {
    let mut f = pcap_header(false, MAGIC_US, 65535, 101);
    let p = udp_packet(1);
    for _ in 0..5 {
        pcap_record(&mut f, false, 1, 0, p.len() as u32, p.len() as u32, &p);
    }
    let cut = f.len();
    f.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7]);
    let (pk, err, _) = read_all(f);
    assert_eq!(pk.len(), 5);
    let e = err.expect("error");
    match &e {
        IngestError::Pcap {
            at,
            kind: PcapError::TruncatedRecordHeader { have: 7, need: 16 },
            ..
        } => {
            assert_eq!(
                *at,
                Position {
                    record: 6,
                    offset: cut as u64
                }
            );
        }
        other => panic!("{other:?}"),
    }
    let msg = e.to_string();
    assert!(
        msg.starts_with("crafted.pcap: record 6 at byte offset ") && !msg.contains('\n'),
        "{msg}"
    );
}

#[test]
fn truncated_record_data() {
    let mut f = pcap_header(false, MAGIC_US, 65535, 101);
    let p = udp_packet(1);
    pcap_record(&mut f, false, 1, 0, p.len() as u32, p.len() as u32, &p);
    pcap_record(&mut f, false, 1, 0, 1000, 1000, &p);
    let (pk, err, _) = read_all(f);
    assert_eq!(pk.len(), 1);
    assert!(
        matches!(
            err,
            Some(IngestError::Pcap {
                kind: PcapError::TruncatedRecordData {
                    caplen: 1000,
                    remaining: 28
                },
                ..
            })
        ),
        "{err:?}"
    );
}

/// The byte counts in damage messages read as English at 1 too ("1 bytes
/// remain" was printed for a file cut one byte into a record's data).
#[test]
fn damage_messages_count_one_byte_in_the_singular() {
    let remain = |n| PcapError::TruncatedRecordData {
        caplen: 60,
        remaining: n,
    };
    assert_eq!(
        remain(1).to_string(),
        "packet data truncated: caplen 60 but only 1 byte remains"
    );
    assert_eq!(
        remain(0).to_string(),
        "packet data truncated: caplen 60 but only 0 bytes remain"
    );
    assert_eq!(
        PcapNgError::TruncatedBlock {
            len: 100,
            remaining: 1
        }
        .to_string(),
        "block truncated: block length 100 but only 1 byte remains"
    );
    assert_eq!(
        PcapNgError::TruncatedBlock {
            len: 100,
            remaining: 40
        }
        .to_string(),
        "block truncated: block length 100 but only 40 bytes remain"
    );
    let room = |room| PcapNgError::CaplenExceedsBlock { caplen: 9, room }.to_string();
    assert_eq!(
        room(1),
        "caplen 9 exceeds the 1 byte of packet data in the block"
    );
    assert_eq!(
        room(8),
        "caplen 9 exceeds the 8 bytes of packet data in the block"
    );

    // And read from a file cut one byte into a record's data.
    let mut f = pcap_header(false, MAGIC_US, 65535, 101);
    let p = udp_packet(1);
    pcap_record(&mut f, false, 1, 0, p.len() as u32, p.len() as u32, &p);
    f.truncate(f.len() - p.len() + 1);
    let (pk, err, _) = read_all(f);
    assert!(pk.is_empty());
    let msg = err.expect("the cut is reported").to_string();
    assert!(
        msg.ends_with(&format!(
            "packet data truncated: caplen {} but only 1 byte remains",
            p.len()
        )),
        "{msg}"
    );
}

#[test]
fn caplen_of_gigabytes_is_implausible_not_an_allocation() {
    let mut f = pcap_header(false, MAGIC_US, 65535, 101);
    let p = udp_packet(1);
    pcap_record(&mut f, false, 1, 0, 0xf000_0000, 0xf000_0000, &p);
    let (pk, err, _) = read_all(f);
    assert!(pk.is_empty());
    assert!(
        matches!(
            err,
            Some(IngestError::Pcap {
                kind: PcapError::ImplausibleCaplen {
                    caplen: 0xf000_0000,
                    snaplen: 65535,
                    ..
                },
                at: Position {
                    record: 1,
                    offset: 24
                },
                ..
            })
        ),
        "{err:?}"
    );
}

#[test]
fn caplen_above_snaplen_is_kept_as_an_anomaly_and_reading_advances() {
    // pcap-file issue #48: such a record made its reader loop forever.
    let mut f = pcap_header(false, MAGIC_US, 20, 101);
    for i in 0..4 {
        let p = udp_packet(i);
        pcap_record(&mut f, false, 1, 0, p.len() as u32, p.len() as u32, &p);
    }
    let (pk, err, r) = read_all(f);
    assert!(err.is_none());
    assert_eq!(pk.len(), 4);
    let a = r.anomalies().entries();
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].count, 4);
    assert_eq!(
        a[0].first.kind,
        AnomalyKind::CaplenExceedsSnaplen {
            caplen: 28,
            snaplen: 20
        }
    );
    assert_eq!(
        a[0].first.position,
        Position {
            record: 1,
            offset: 24
        }
    );
}

#[test]
fn timestamp_fraction_out_of_range_is_carried_and_reported() {
    for (magic, limit) in [(MAGIC_US, 1_000_000u32), (MAGIC_NS, 1_000_000_000)] {
        let mut f = pcap_header(false, magic, 65535, 101);
        let p = udp_packet(1);
        pcap_record(&mut f, false, 100, 5, p.len() as u32, p.len() as u32, &p);
        pcap_record(
            &mut f,
            false,
            100,
            limit + limit / 2,
            p.len() as u32,
            p.len() as u32,
            &p,
        );
        let (pk, err, r) = read_all(f);
        assert!(err.is_none());
        assert_eq!(pk.len(), 2);
        assert_eq!((pk[1].0.secs(), pk[1].0.subsec_nanos()), (101, 500_000_000));
        let a = r.anomalies().entries();
        assert_eq!(
            a[0].first.kind,
            AnomalyKind::TimestampFractionOutOfRange {
                frac: limit + limit / 2,
                limit
            }
        );
        assert_eq!(a[0].first.position.record, 2);
    }
}

#[test]
fn reserved_link_type_bits_are_masked_and_reported() {
    let mut f = pcap_header(false, MAGIC_US, 65535, 0x3000_0000 | 101);
    let p = udp_packet(1);
    pcap_record(&mut f, false, 1, 0, p.len() as u32, p.len() as u32, &p);
    let (pk, err, r) = read_all(f);
    assert!(err.is_none());
    assert_eq!(pk[0].1, LinkType::RAW);
    assert_eq!(
        r.anomalies().entries()[0].first.kind,
        AnomalyKind::LinkTypeReservedBits {
            raw: 0x3000_0065,
            used: 101
        }
    );
}

#[test]
fn unsupported_link_type_is_counted_not_an_error() {
    let mut f = pcap_header(false, MAGIC_US, 65535, 0xbeef);
    pcap_record(&mut f, false, 1, 0, 3, 3, &[1, 2, 3]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lt.pcap");
    std::fs::write(&path, f).unwrap();
    let s = scan(&path, Dissector::default());
    assert!(s.error.is_none());
    assert_eq!(s.packets, 1);
    assert_eq!(
        s.skips
            .get(flowsieve::dissect::SkipReason::UnsupportedLinkType),
        1
    );
}

// ---------- pcapng ----------

#[test]
fn pcapng_sections_interfaces_resolutions_and_block_types() {
    let p = udp_packet(9);
    let mut ng = Ng::new();
    ng.shb(false)
        .idb(101, 0, &[(9, vec![9])]) // if_tsresol 10^-9
        .idb(
            228,
            0,
            &[(9, vec![0x80 | 20]), (14, 1000i64.to_le_bytes().to_vec())],
        ) // 2^-20 s, offset +1000 s
        .block(0x0000_0004, &[1, 2, 3, 4]) // a Name Resolution Block: skipped
        .epb(0, 1_500_000_000_123_456_789, 100, &p)
        .epb(1, 3 << 20, 28, &p)
        .opb(0, 2_000_000_000, &p)
        .spb(28, &p);
    // A second section, big-endian, where interface 0 is microseconds.
    ng.shb(true)
        .idb(229, 0, &[])
        .block(0x0bad_0bad, &[0; 8])
        .epb(0, 7_000_001, 28, &p);
    let (pk, err, r) = read_all(ng.bytes.clone());
    assert!(err.is_none(), "{err:?}");
    assert_eq!(pk.len(), 5);
    assert_eq!(r.sections(), 2);
    assert_eq!(
        (pk[0].0.secs(), pk[0].0.subsec_nanos()),
        (1_500_000_000, 123_456_789)
    );
    assert_eq!(pk[0].1, LinkType::RAW);
    assert_eq!(pk[0].2, 100);
    assert_eq!(pk[1].0.secs(), 1003, "2^-20 resolution plus if_tsoffset");
    assert_eq!(pk[1].1, LinkType::IPV4);
    assert_eq!(
        (pk[2].0.secs(), pk[2].0.subsec_nanos()),
        (2, 0),
        "obsolete packet block, ns"
    );
    assert_eq!(
        pk[3].0, pk[2].0,
        "simple packet block inherits the previous time"
    );
    assert_eq!(pk[3].3, p);
    assert_eq!(
        (pk[4].0.secs(), pk[4].0.subsec_nanos(), pk[4].1),
        (7, 1000, LinkType::IPV6)
    );
    for (_, _, _, data) in &pk {
        assert_eq!(data, &p);
    }
}

fn ng_error(bytes: Vec<u8>) -> (usize, PcapNgError, Position) {
    let (pk, err, _) = read_all(bytes);
    match err {
        Some(IngestError::PcapNg { kind, at, .. }) => (pk.len(), kind, at),
        other => panic!("expected a pcapng error, got {other:?}"),
    }
}

#[test]
fn pcapng_damage_of_every_kind() {
    let p = udp_packet(1);
    let base = || {
        let mut ng = Ng::new();
        ng.shb(false).idb(101, 0, &[]).epb(0, 1, 28, &p);
        ng
    };
    let good = base().bytes.len() as u64;

    // Trailing length disagrees.
    let mut b = base().bytes;
    let mut tail = base();
    tail.bytes.clear();
    tail.epb(0, 2, 28, &p);
    let n = tail.bytes.len();
    tail.bytes[n - 4] ^= 0x10;
    b.extend_from_slice(&tail.bytes);
    let (read, kind, at) = ng_error(b);
    assert_eq!(read, 1);
    assert!(
        matches!(kind, PcapNgError::TrailerMismatch { .. }),
        "{kind:?}"
    );
    assert_eq!(at.offset, good);

    // Unknown interface, and its message for no, one and several declared
    // ones (it said "declares 1 interfaces").
    let mut ng = base();
    ng.epb(5, 2, 28, &p);
    let (read, kind, _) = ng_error(ng.bytes);
    assert_eq!(
        (read, &kind),
        (
            1,
            &PcapNgError::UnknownInterface {
                interface: 5,
                count: 1
            }
        )
    );
    assert_eq!(
        kind.to_string(),
        "packet on interface 5 but the section declares 1 interface (id 0)"
    );
    let mut ng = Ng::new();
    ng.shb(false).epb(0, 1, 28, &p);
    let (read, kind, _) = ng_error(ng.bytes);
    assert_eq!(read, 0);
    assert_eq!(
        kind.to_string(),
        "packet on interface 0 but the section declares no interface"
    );
    let mut ng = Ng::new();
    ng.shb(false)
        .idb(101, 0, &[])
        .idb(101, 0, &[])
        .idb(1, 0, &[]);
    ng.epb(2, 1, 28, &p).epb(3, 2, 28, &p);
    let (read, kind, _) = ng_error(ng.bytes);
    assert_eq!(read, 1);
    assert_eq!(
        kind.to_string(),
        "packet on interface 3 but the section declares 3 interfaces (ids 0-2)"
    );

    // Block length not a multiple of 4, below 12, implausibly large.
    for (len, want) in [
        (30u32, PcapNgError::BlockLengthNotAligned { len: 30 }),
        (
            8,
            PcapNgError::BlockTooShort {
                block_type: 6,
                len: 8,
                min: 12,
            },
        ),
        (
            0x7fff_fff0,
            PcapNgError::BlockTooLarge {
                len: 0x7fff_fff0,
                limit: 64 << 20,
            },
        ),
    ] {
        let mut b = base().bytes;
        b.extend_from_slice(&6u32.to_le_bytes());
        b.extend_from_slice(&len.to_le_bytes());
        b.extend_from_slice(&[0; 24]);
        let (read, kind, at) = ng_error(b);
        assert_eq!((read, kind, at.offset), (1, want, good));
    }

    // An EPB shorter than its fixed fields; an EPB whose caplen overruns it.
    let mut ng = base();
    ng.block(6, &[0; 8]);
    let (_, kind, _) = ng_error(ng.bytes);
    assert_eq!(
        kind,
        PcapNgError::BlockTooShort {
            block_type: 6,
            len: 20,
            min: 32
        }
    );
    let mut ng = base();
    let mut body = Vec::new();
    for x in [0u32, 0, 0, 500, 500] {
        body.extend_from_slice(&x.to_le_bytes());
    }
    body.extend_from_slice(&p);
    ng.block(6, &body);
    let (_, kind, _) = ng_error(ng.bytes);
    assert_eq!(
        kind,
        PcapNgError::CaplenExceedsBlock {
            caplen: 500,
            room: 28
        }
    );

    // Truncated inside a block, and inside a block header.
    let mut b = base().bytes;
    let extra = base().bytes[28..].to_vec();
    b.extend_from_slice(&extra[..extra.len() - 3]);
    let (read, kind, _) = ng_error(b);
    assert_eq!(read, 1);
    assert!(
        matches!(kind, PcapNgError::TruncatedBlock { .. }),
        "{kind:?}"
    );
    let mut b = base().bytes;
    b.extend_from_slice(&[6, 0, 0]);
    let (_, kind, _) = ng_error(b);
    assert_eq!(
        kind,
        PcapNgError::TruncatedBlockHeader { have: 3, need: 12 }
    );

    // A section header whose byte-order magic is neither order.
    let mut b = base().bytes;
    let mut bad = Ng::new();
    bad.shb(false);
    bad.bytes[8..12].copy_from_slice(&[1, 2, 3, 4]);
    b.extend_from_slice(&bad.bytes);
    let (_, kind, _) = ng_error(b);
    assert_eq!(kind, PcapNgError::BadByteOrderMagic { magic: 0x0403_0201 });
}

#[test]
fn pcapng_unusable_tsresol_falls_back_to_microseconds() {
    let p = udp_packet(1);
    let mut ng = Ng::new();
    ng.shb(false)
        .idb(101, 0, &[(9, vec![40])])
        .epb(0, 3_000_000, 28, &p);
    let (pk, err, r) = read_all(ng.bytes);
    assert!(err.is_none());
    assert_eq!(pk[0].0.secs(), 3);
    assert_eq!(
        r.anomalies().entries()[0].first.kind,
        AnomalyKind::BadTsResol {
            interface: 0,
            value: 40
        }
    );
}

#[test]
fn tsresol_byte_meanings() {
    use flowsieve::ingest::pcapng::units_per_sec;
    assert_eq!(units_per_sec(6), Some(1_000_000));
    assert_eq!(units_per_sec(9), Some(1_000_000_000));
    assert_eq!(units_per_sec(19), Some(10_000_000_000_000_000_000));
    assert_eq!(units_per_sec(20), None);
    assert_eq!(units_per_sec(0x80 | 10), Some(1024));
    assert_eq!(units_per_sec(0x80 | 63), Some(1 << 63));
    assert_eq!(units_per_sec(0x80 | 64), None);
}

// ---------- compressed streams ----------

fn synth_bytes(format: OutputFormat) -> Vec<u8> {
    let cfg = SynthConfig {
        flows: 500,
        packets: 5000,
        format,
        seed: 11,
        ..SynthConfig::default()
    };
    let mut v = Vec::new();
    generate(&cfg, &mut v).expect("generates");
    v
}

fn table_of(bytes: Vec<u8>, name: &str) -> (Vec<FlowRow>, Compression, Option<IngestError>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).unwrap();
    let s = scan(&path, Dissector::default());
    let c = s
        .reader
        .as_ref()
        .map(|r| r.compression())
        .unwrap_or(Compression::None);
    (sorted_flows(&s.table, true), c, s.error)
}

#[test]
fn gzip_and_zstd_read_transparently_as_streams() {
    for format in [OutputFormat::Pcap, OutputFormat::PcapNg] {
        let plain = synth_bytes(format);
        let (want, c, err) = table_of(plain.clone(), "t.pcap");
        assert!(err.is_none());
        assert_eq!(c, Compression::None);
        assert_eq!(want.len(), 500);

        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&plain).unwrap();
        let (got, c, err) = table_of(gz.finish().unwrap(), "t.pcap.gz");
        assert!(err.is_none(), "{err:?}");
        assert_eq!((c, &got), (Compression::Gzip, &want));

        let zst = zstd::encode_all(&plain[..], 1).unwrap();
        let (got, c, err) = table_of(zst, "named-wrongly.pcap");
        assert!(err.is_none(), "{err:?}");
        assert_eq!((c, &got), (Compression::Zstd, &want));
    }
}

#[test]
fn truncated_gzip_stream_is_an_error_after_the_packets_it_held() {
    let plain = synth_bytes(OutputFormat::Pcap);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&plain).unwrap();
    let mut z = gz.finish().unwrap();
    z.truncate(z.len() / 2);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut.pcap.gz");
    std::fs::write(&path, z).unwrap();
    let s = scan(&path, Dissector::default());
    assert!(s.packets > 1000 && s.packets < 5000, "{}", s.packets);
    let e = s.error.expect("error");
    assert!(
        e.to_string().contains("cut.pcap.gz") && !e.to_string().contains('\n'),
        "{e}"
    );
}

/// `bytes` compressed as `c` says, at zstd level 1 or gzip's fastest.
fn compressed(bytes: &[u8], c: Compression) -> Vec<u8> {
    match c {
        Compression::None => bytes.to_vec(),
        Compression::Gzip => common::gzip(bytes),
        Compression::Zstd => zstd::encode_all(bytes, 1).unwrap(),
    }
}

/// The message reading `bytes`, named `name`, ends in: its error, or the
/// error opening it.
fn first_error(name: &str, bytes: Vec<u8>) -> IngestError {
    let mut r = match TraceReader::from_bytes(name, bytes) {
        Ok(r) => r,
        Err(e) => return e,
    };
    loop {
        match r.next_packet() {
            Ok(Some(_)) => {}
            Ok(None) => panic!("{name}: read to the end without an error"),
            Err(e) => return e,
        }
    }
}

/// A compressed file's offsets count its decompressed bytes, not the
/// file's (a 6 MB `.gz` once reported "byte offset 19993579"), so its
/// messages say so: the file is named with its compression and each
/// offset is a "decompressed byte offset". The same damage, plain and
/// compressed, gives the same message but for those words; and data that
/// decompress to nothing, or to no capture, are not called an empty file
/// or "not gzip".
#[test]
fn a_compressed_files_messages_call_their_offsets_decompressed() {
    // Damage at a known offset: five records, then a sixth cut short.
    let mut cut = pcap_header(false, MAGIC_US, 65535, 101);
    let p = udp_packet(7);
    for _ in 0..5 {
        pcap_record(&mut cut, false, 1, 0, p.len() as u32, p.len() as u32, &p);
    }
    let at = cut.len();
    pcap_record(&mut cut, false, 1, 0, p.len() as u32, p.len() as u32, &p);
    cut.truncate(cut.len() - 3);
    let plain = first_error("t.pcap", cut.clone()).to_string();
    assert_eq!(
        plain,
        format!(
            "t.pcap: record 6 at byte offset {at}: packet data truncated: caplen 28 but only 25 bytes remain"
        )
    );
    for (c, name) in [(Compression::Gzip, "gzip"), (Compression::Zstd, "zstd")] {
        let e = first_error("t.pcap", compressed(&cut, c));
        assert!(
            matches!(e, IngestError::Pcap { compression, .. } if compression == c),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            plain
                .replace("t.pcap:", &format!("t.pcap ({name}):"))
                .replace("byte offset", "decompressed byte offset")
        );

        let e = first_error("t.pcap", compressed(b"", c));
        assert!(matches!(e, IngestError::Empty { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            format!("t.pcap ({name}): decompresses to 0 bytes")
        );

        let e = first_error("t.pcap", compressed(b"GIF89a not a capture", c));
        assert!(matches!(e, IngestError::UnknownFormat { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            format!(
                "t.pcap ({name}): decompressed byte offset 0: unknown format (magic 47494638): not pcap or pcapng"
            )
        );

        // A stream cut in its middle: the decompressor's error, at the
        // decompressed offset the framer had reached, short of the data's
        // length (the file's own length is far smaller still).
        let whole = synth_bytes(OutputFormat::Pcap);
        let mut z = compressed(&whole, c);
        z.truncate(z.len() / 2);
        let e = first_error("t.pcap", z);
        let IngestError::Read {
            offset,
            compression,
            ..
        } = &e
        else {
            panic!("{e:?}")
        };
        assert_eq!(*compression, c);
        assert!(
            (whole.len() as u64 / 8..whole.len() as u64).contains(offset),
            "{e}"
        );
        assert!(
            e.to_string().starts_with(&format!(
                "t.pcap ({name}): read error at decompressed byte offset {offset}: "
            )),
            "{e}"
        );
    }
    // Plain files keep their words.
    let e = first_error("t.pcap", b"GIF89a not a capture".to_vec());
    assert_eq!(
        e.to_string(),
        "t.pcap: byte offset 0: unknown file format (magic 47494638): not pcap, pcapng, gzip or zstd"
    );
}

#[test]
fn stream_buffer_grows_for_blocks_larger_than_a_refill() {
    // A 3 MiB packet inside gzip: larger than the 1 MiB stream chunk.
    let big = vec![0x60u8; 3 << 20];
    let mut ng = Ng::new();
    ng.shb(false)
        .idb(101, 0, &[])
        .epb(0, 1, big.len() as u32, &big)
        .epb(0, 2, 28, &udp_packet(3));
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&ng.bytes).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.pcapng.gz");
    std::fs::write(&path, gz.finish().unwrap()).unwrap();
    let mut r = TraceReader::open(&path).unwrap();
    assert_eq!(r.next_packet().unwrap().unwrap().data.len(), 3 << 20);
    assert_eq!(r.next_packet().unwrap().unwrap().data, &udp_packet(3)[..]);
    assert!(r.next_packet().unwrap().is_none());
}

// ---------- differential: pcap-file's reader as an oracle ----------

#[test]
fn records_match_pcap_file_reader_on_clean_captures() {
    let bytes = synth_bytes(OutputFormat::PcapNs);
    let mut oracle = pcap_file::pcap::PcapReader::new(&bytes[..]).unwrap();
    let (ours, err, _) = read_all(bytes.clone());
    assert!(err.is_none());
    let mut n = 0;
    while let Some(p) = oracle.next_packet() {
        let p = p.unwrap();
        let (ts, _, wire, data) = &ours[n];
        assert_eq!(ts.as_nanos(), p.timestamp.as_nanos() as i128);
        assert_eq!(*wire, p.orig_len);
        assert_eq!(data[..], p.data[..]);
        n += 1;
    }
    assert_eq!(n, ours.len());
}

// ---------- real files ----------

#[test]
fn wits100_same_packets_in_three_containers_give_identical_flow_tables() {
    let Some(dir) =
        shared_traces("wits100_same_packets_in_three_containers_give_identical_flow_tables")
    else {
        return;
    };
    let w = dir.join("formats/wits100");
    let us = scan(&w.join("100_packets.pcap"), Dissector::default());
    let ns = scan(&w.join("100_packetsns.pcap"), Dissector::default());
    let ng = scan(&w.join("100_packets.pcapng"), Dissector::default());
    for s in [&us, &ns, &ng] {
        assert!(s.error.is_none());
        assert_eq!(s.packets, 100);
        assert_eq!(s.table.len(), 61);
    }
    let t = sorted_flows(&us.table, true);
    assert_eq!(t, sorted_flows(&ns.table, true), "pcap-us vs pcap-ns");
    assert_eq!(t, sorted_flows(&ng.table, true), "pcap-us vs pcapng");
    // Every record is snaplen-truncated (pcap-file 2.0 refuses those).
    assert!(
        us.table
            .iter()
            .all(|e| e.stats.captured_bytes < e.stats.wire_bytes)
    );
    // The same packets with other timestamps, and wrapped in Linux SLL.
    let secs = scan(&w.join("100_seconds.pcap"), Dissector::default());
    let sll = scan(
        &w.join("100_sll_wrapping_ethernet.pcap"),
        Dissector::default(),
    );
    assert_eq!(
        sorted_flows(&secs.table, false),
        sorted_flows(&us.table, false)
    );
    assert_eq!(sll.keys_in_order, us.keys_in_order);
}

#[test]
fn pcapng_nanosecond_and_mixed_resolution_interfaces_keep_their_clocks() {
    let Some(dir) =
        shared_traces("pcapng_nanosecond_and_mixed_resolution_interfaces_keep_their_clocks")
    else {
        return;
    };
    // Wireshark sample mix, if_tsresol = ns: pcap-file 2.0 ignores the option.
    let s = scan(
        &dir.join("many_flows/wireshark_samples_mix.pcapng"),
        Dissector::default(),
    );
    assert_eq!(s.packets, 5898);
    let first = s.first_ts.unwrap();
    assert_eq!(
        (first.secs(), first.subsec_nanos() / 1000),
        (1_506_883_716, 995_391)
    );
    // Two interfaces, ns and us, interleaved; one timestamp of
    // 18446744073204277451 us on the us interface, close to 2^64: no
    // overflow, and exact (the manifest's float, 18446744073204.277344,
    // cannot hold microseconds at that magnitude).
    let s = scan(
        &dir.join("formats/pcapng_eth_and_sll.pcapng"),
        Dissector::default(),
    );
    assert_eq!(s.packets, 159);
    assert_eq!(s.first_ts.unwrap().secs(), 1_422_527_998);
    let last = s.last_ts.unwrap();
    assert_eq!(
        (last.secs(), last.subsec_nanos() / 1000),
        (18_446_744_073_204, 277_451)
    );
}

#[test]
fn fast_path_and_general_path_agree_across_release_steps() {
    // About 23 MB: crosses two 8 MiB release steps. The mapped and in-memory
    // readers take the fast path for plain records; the gzip stream never
    // does. All three must deliver the same records.
    let cfg = SynthConfig {
        flows: 2000,
        packets: 40_000,
        format: OutputFormat::PcapNs,
        seed: 8,
        ..SynthConfig::default()
    };
    let mut plain = Vec::new();
    generate(&cfg, &mut plain).unwrap();
    assert!(plain.len() > 16 << 20, "{} bytes", plain.len());
    let dir = tempfile::tempdir().unwrap();
    let mapped = dir.path().join("big.pcap");
    std::fs::write(&mapped, &plain).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&plain).unwrap();
    let zipped = dir.path().join("big.pcap.gz");
    std::fs::write(&zipped, gz.finish().unwrap()).unwrap();
    let digest = |mut r: TraceReader| {
        let mut v = Vec::new();
        while let Some(p) = r.next_packet().unwrap() {
            v.push((
                p.ts,
                p.wire_len,
                p.data.len(),
                p.data
                    .iter()
                    .fold(0u64, |a, b| a.wrapping_mul(31).wrapping_add(u64::from(*b))),
            ));
        }
        v
    };
    let a = digest(TraceReader::open_with(&mapped, ReadMode::Read).unwrap());
    let b = digest(TraceReader::from_bytes("mem.pcap", plain.clone()).unwrap());
    let c = digest(TraceReader::open(&zipped).unwrap());
    let d = digest(TraceReader::open_with(&mapped, ReadMode::Mmap).unwrap());
    assert_eq!(a.len(), 40_000);
    assert_eq!(a, b);
    assert_eq!(a, c);
    assert_eq!(a, d);
}

/// A synthetic classic pcap of `packets` packets in `flows` flows.
fn synth_trace(flows: u64, packets: u64, seed: u64) -> Vec<u8> {
    synth_trace_as(OutputFormat::Pcap, flows, packets, seed)
}

/// A synthetic trace of `packets` packets in `flows` flows, in `format`.
fn synth_trace_as(format: OutputFormat, flows: u64, packets: u64, seed: u64) -> Vec<u8> {
    let cfg = SynthConfig {
        flows,
        packets,
        seed,
        format,
        ..SynthConfig::default()
    };
    let mut bytes = Vec::new();
    generate(&cfg, &mut bytes).unwrap();
    bytes
}

/// Truncates the file at `path` to `len` bytes, as another process would
/// while flowsieve reads it.
fn cut_file(path: &std::path::Path, len: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

/// Defect: a trace truncated while it is read killed the process (SIGBUS
/// on the map). Read through a buffer or through the guarded map (the
/// default), a truncation is a clean error naming the file and the offset:
/// mid-record, the record is cut short; at a record boundary, the file
/// "shrank while it was read". Both modes deliver the same packets before
/// the error, and the same error, read one packet a call or in runs.
#[test]
fn a_trace_truncated_while_it_is_read_ends_in_an_error() {
    let plain = synth_trace(1000, 60_000, 9);
    let dir = tempfile::tempdir().unwrap();
    for (mode, how) in [ReadMode::Read, ReadMode::Mmap]
        .into_iter()
        .flat_map(|m| [(m, Reading::OneByOne), (m, Reading::Runs(256))])
    {
        for cut_mid_record in [true, false] {
            let path = dir
                .path()
                .join(format!("shrinking-{mode:?}-{how:?}-{cut_mid_record}.pcap"));
            std::fs::write(&path, &plain).unwrap();
            let mut r = TraceReader::open_with(&path, mode).unwrap();
            assert!(read_upto(&mut r, how, 10_000, |_| ()).unwrap());
            // Cut well past what the reader has buffered (or touched), at a
            // record boundary or 5 bytes into the next record.
            let at = r.offset() + (4 << 20);
            let boundary = record_boundary_from(&plain, at);
            let cut = if cut_mid_record {
                boundary + 5
            } else {
                boundary
            };
            cut_file(&path, cut);
            let mut delivered = 10_000u64;
            let err = match read_upto(&mut r, how, u64::MAX, |_| delivered += 1) {
                Ok(_) => panic!("{mode:?} {how:?} cut {cut}: a shrunken file read as complete"),
                Err(e) => e,
            };
            assert_eq!(
                delivered,
                records_before(&plain, boundary),
                "{mode:?} {how:?}: every record before the cut, and none after"
            );
            let msg = err.to_string();
            assert!(msg.starts_with(&path.display().to_string()), "{msg}");
            if cut_mid_record {
                assert!(matches!(err, IngestError::Pcap { .. }), "{mode:?}: {msg}");
                assert!(msg.contains(&format!("byte offset {boundary}")), "{msg}");
            } else {
                assert!(
                    matches!(err, IngestError::Shrunk { offset, .. } if offset == cut),
                    "{mode:?}: {msg}"
                );
                assert!(msg.contains("shrank while it was read"), "{msg}");
            }
            assert!(
                !read_upto(&mut r, how, 1, |_| ()).unwrap(),
                "nothing after the error"
            );
        }
    }
}

/// The first record boundary of the synthetic pcap `plain` at or after
/// byte `at`.
fn record_boundary_from(plain: &[u8], at: u64) -> u64 {
    let mut boundary = 24u64;
    while boundary < at {
        let caplen = u32::from_le_bytes(
            plain[boundary as usize + 8..boundary as usize + 12]
                .try_into()
                .unwrap(),
        );
        boundary += 16 + u64::from(caplen);
    }
    boundary
}

/// The records of the synthetic pcap `plain` that end at or before the
/// boundary `end`.
fn records_before(plain: &[u8], end: u64) -> u64 {
    let (mut at, mut n) = (24u64, 0);
    while at < end {
        let caplen =
            u32::from_le_bytes(plain[at as usize + 8..at as usize + 12].try_into().unwrap());
        at += 16 + u64::from(caplen);
        n += 1;
    }
    n
}

/// Records longer than the guarded map's touches ahead (512 KiB) have
/// their pages made resident before they are lent: a mapped file of 600 KiB
/// and 3 MiB records among small ones, in both byte orders and in pcapng,
/// gives the same packets, byte for byte, as the same bytes held in memory
/// and as a buffered read.
#[test]
fn mapped_records_longer_than_the_touches_ahead_are_read_whole() {
    let dir = tempfile::tempdir().unwrap();
    let sizes = [60usize, 600 << 10, 90, 3 << 20, 70, 600 << 10, 50];
    let mut files = Vec::new();
    for big_endian in [false, true] {
        let mut v = pcap_header(big_endian, 0xa1b2_c3d4, 64 << 20, 101);
        for (i, &n) in sizes.iter().enumerate() {
            let data: Vec<u8> = (0..n).map(|j| (j * 7 + i) as u8).collect();
            pcap_record(&mut v, big_endian, i as u32, 0, n as u32, n as u32, &data);
        }
        files.push(v);
    }
    let mut ng = Ng::new();
    ng.shb(false).idb(101, 0, &[]);
    for (i, &n) in sizes.iter().enumerate() {
        let data: Vec<u8> = (0..n).map(|j| (j * 5 + i) as u8).collect();
        ng.epb(0, i as u64, n as u32, &data);
    }
    files.push(ng.bytes);
    for (k, bytes) in files.into_iter().enumerate() {
        let path = dir.path().join(format!("long-{k}.pcap"));
        std::fs::write(&path, &bytes).unwrap();
        let digest = |mut r: TraceReader| {
            let mut out = Vec::new();
            while let Some(p) = r.next_packet().unwrap() {
                out.push((p.ts, p.wire_len, p.data.to_vec()));
            }
            out
        };
        let held = digest(TraceReader::from_bytes("held.pcap", bytes).unwrap());
        let mapped = digest(TraceReader::open_with(&path, ReadMode::Mmap).unwrap());
        let read = digest(TraceReader::open_with(&path, ReadMode::Read).unwrap());
        assert_eq!(held.len(), sizes.len(), "file {k}");
        assert!(held.iter().any(|p| p.2.len() > 512 << 10), "file {k}");
        assert!(mapped == held, "file {k}: mapped differs");
        assert!(read == held, "file {k}: buffered differs");
    }
}

/// A cut near records longer than the guard's touches ahead: inside a
/// 3 MiB record, both modes deliver the records before it and stop at its
/// offset; just past it, both deliver it whole (its pages lie before the
/// new end) and stop at the next record, with the same error.
#[test]
fn a_cut_near_a_long_mapped_record_stops_where_a_buffered_read_does() {
    let sizes = [60usize, 600 << 10, 90, 3 << 20, 70, 600 << 10, 50];
    let mut bytes = pcap_header(false, 0xa1b2_c3d4, 64 << 20, 101);
    let mut starts = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        starts.push(bytes.len() as u64);
        let data: Vec<u8> = (0..n).map(|j| (j * 3 + i) as u8).collect();
        pcap_record(&mut bytes, false, i as u32, 0, n as u32, n as u32, &data);
    }
    let dir = tempfile::tempdir().unwrap();
    // (where the file is cut, the packets delivered, the offset named):
    // two named cases, then a cut every 96 KiB, where the buffered read
    // says what is right.
    let mut cases = vec![
        (starts[3] + 16 + (1 << 20), 3, starts[3]),
        (starts[4] + 16 + 30, 4, starts[4]),
    ];
    let mut cut = starts[2] + (96 << 10);
    while cut < bytes.len() as u64 {
        let i = starts.iter().rposition(|&s| s <= cut).unwrap();
        cases.push((cut, i, starts[i]));
        cut += 96 << 10;
    }
    for (case, (cut, delivered, named)) in cases.into_iter().enumerate() {
        let mut outcomes = Vec::new();
        for mode in [ReadMode::Read, ReadMode::Mmap] {
            let path = dir.path().join(format!("long-cut-{cut}-{mode:?}.pcap"));
            std::fs::write(&path, &bytes).unwrap();
            let mut r = TraceReader::open_with(&path, mode).unwrap();
            let mut lens = Vec::new();
            for _ in 0..2 {
                lens.push(r.next_packet().unwrap().unwrap().data.len());
            }
            cut_file(&path, cut);
            let err = loop {
                match r.next_packet() {
                    Ok(Some(p)) => lens.push(p.data.len()),
                    Ok(None) => panic!("{mode:?} cut {cut}: read as complete"),
                    Err(e) => break e,
                }
            };
            assert_eq!(lens, sizes[..delivered], "{mode:?} cut {cut}");
            let msg = err.to_string();
            assert!(msg.starts_with(&path.display().to_string()), "{msg}");
            assert!(
                msg.contains(&format!("byte offset {named}")),
                "{mode:?}: {msg}"
            );
            outcomes.push(matches!(err, IngestError::Pcap { .. }));
        }
        if case == 1 {
            // Cut in a short record: the map reads up to the new end and
            // the framer reports the record cut short, as the buffer does.
            assert_eq!(outcomes, [true, true], "cut {cut}");
        }
    }
}

/// A mapped trace cut behind the reader's cursor (the bytes it is about to
/// lend are gone): the next call reports the shrink at the cursor, nothing
/// past the cut is lent, and the process is not killed by SIGBUS. Each of
/// the two readers open at once has its own guard.
#[test]
fn a_mapped_trace_cut_behind_the_cursor_ends_in_the_shrink_error() {
    let plain = synth_trace(500, 40_000, 5);
    let dir = tempfile::tempdir().unwrap();
    let cut_path = dir.path().join("cut.pcap");
    let whole_path = dir.path().join("whole.pcap");
    std::fs::write(&cut_path, &plain).unwrap();
    std::fs::write(&whole_path, &plain).unwrap();
    let mut cut = TraceReader::open_with(&cut_path, ReadMode::Mmap).unwrap();
    let mut whole = TraceReader::open_with(&whole_path, ReadMode::Mmap).unwrap();
    for _ in 0..20_000 {
        cut.next_packet().unwrap().unwrap();
        whole.next_packet().unwrap().unwrap();
    }
    let cursor = cut.offset();
    assert!(cursor > 8192, "the reader has gone past the first pages");
    cut_file(&cut_path, 4096);
    let err = cut.next_packet().unwrap_err();
    assert!(
        matches!(err, IngestError::Shrunk { offset, size, .. }
            if offset == cursor && size == plain.len() as u64),
        "{err}"
    );
    assert!(cut.next_packet().unwrap().is_none());
    let mut rest = 20_000u64;
    while whole.next_packet().unwrap().is_some() {
        rest += 1;
    }
    assert_eq!(rest, 40_000, "the other map was not touched by the cut");
}

/// As above, but read in runs (`read_packets`, as the replay reads): the
/// cut pages lie behind the frontier the map was touched to, so the run
/// frames the next record from a page the cut took, notes the fault only
/// once it has read the header, and must then settle it rather than lend
/// what it framed. The same shrink error at the cursor, for classic pcap
/// and for pcapng, and nothing handed.
#[test]
fn a_mapped_trace_cut_behind_the_cursor_ends_runs_in_the_shrink_error() {
    for format in [OutputFormat::Pcap, OutputFormat::PcapNg] {
        let plain = synth_trace_as(format, 500, 40_000, 5);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cut.trace");
        std::fs::write(&path, &plain).unwrap();
        let mut r = TraceReader::open_with(&path, ReadMode::Mmap).unwrap();
        let mut read = 0;
        while read < 20_000 {
            read += r.read_packets(20_000 - read, |_| true).unwrap();
        }
        let cursor = r.offset();
        assert!(
            cursor > 8192,
            "{format:?}: the reader has gone past the first pages"
        );
        cut_file(&path, 4096);
        let mut handed = 0;
        let err = r.read_packets(256, |_| {
            handed += 1;
            true
        });
        assert_eq!(handed, 0, "{format:?}: a packet past the cut was lent");
        let err = err.unwrap_err();
        assert!(
            matches!(err, IngestError::Shrunk { offset, size, .. }
                if offset == cursor && size == plain.len() as u64),
            "{format:?}: {err}"
        );
        assert_eq!(r.read_packets(256, |_| true).unwrap(), 0);
    }
}

/// The guard passes on a SIGBUS that is not in a guarded map: a plain
/// memmap2 map of a truncated file still kills the process with SIGBUS
/// (through Rust's own handler, then the default action), as it would
/// without flowsieve's handler. Runs itself in a child process.
#[test]
fn a_fault_outside_the_guarded_maps_still_kills_with_sigbus() {
    const CHILD: &str = "FLOWSIEVE_SIGBUS_CHILD";
    let dir = tempfile::tempdir().unwrap();
    if let Some(dir) = std::env::var_os(CHILD) {
        let dir = std::path::PathBuf::from(dir);
        let guarded = dir.join("guarded.pcap");
        let mut bytes = Vec::new();
        let small = SynthConfig {
            flows: 10,
            packets: 100,
            ..SynthConfig::default()
        };
        generate(&small, &mut bytes).unwrap();
        std::fs::write(&guarded, &bytes).unwrap();
        // The handler is installed by the first guarded map.
        let mut r = TraceReader::open_with(&guarded, ReadMode::Mmap).unwrap();
        r.next_packet().unwrap().unwrap();
        let plain = dir.join("plain.bin");
        std::fs::write(&plain, vec![7u8; 1 << 20]).unwrap();
        let file = std::fs::File::open(&plain).unwrap();
        // SAFETY: the test wants the fault; the process dies of it.
        let map = unsafe { memmap2::Mmap::map(&file).unwrap() };
        cut_file(&plain, 0);
        let b = std::hint::black_box(&map[512 << 10]);
        println!("read {b} from a truncated map and lived");
        std::process::exit(0);
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "ingest::a_fault_outside_the_guarded_maps_still_kills_with_sigbus",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD, dir.path())
        .output()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGBUS),
        "status {:?}, stdout {}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

    /// A compressed trace, decompressed ahead in chunks, gives the same
    /// records, byte for byte, as its plain bytes held whole in memory,
    /// wherever the chunks' ends cut the records: records of up to 256 KiB
    /// (longer than the room a chunk keeps for the previous chunk's tail,
    /// so that both ways of joining two chunks happen) among small ones,
    /// through gzip and zstd, whose reads end at different places. The
    /// plain file, read in place in 256 KiB refills, too.
    #[test]
    fn stream_chunks_join_records_exactly(
        sizes in proptest::collection::vec(
            proptest::prop_oneof![3 => 20usize..1600, 1 => 60_000usize..262_144],
            8..40,
        ),
        fill in 0u8..255,
    ) {
        let mut bytes = pcap_header(false, MAGIC_US, 262_144, 101);
        for (i, &n) in sizes.iter().enumerate() {
            let data: Vec<u8> = (0..n).map(|j| (j as u8) ^ fill ^ ((j >> 9) as u8) ^ (i as u8)).collect();
            pcap_record(&mut bytes, false, i as u32, 0, n as u32, n as u32, &data);
        }
        let dir = tempfile::tempdir().unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&bytes).unwrap();
        let gz_path = dir.path().join("chunks.pcap.gz");
        std::fs::write(&gz_path, gz.finish().unwrap()).unwrap();
        let zst_path = dir.path().join("chunks.pcap.zst");
        std::fs::write(&zst_path, zstd::encode_all(&bytes[..], 1).unwrap()).unwrap();
        let plain_path = dir.path().join("chunks.pcap");
        std::fs::write(&plain_path, &bytes).unwrap();
        let (whole, err, _) = read_all(bytes);
        proptest::prop_assert!(err.is_none());
        for path in [&gz_path, &zst_path, &plain_path] {
            let mut r = TraceReader::open(path).unwrap();
            let mut n = 0;
            while let Some(p) = r.next_packet().unwrap() {
                proptest::prop_assert!(n < whole.len());
                proptest::prop_assert_eq!(p.ts, whole[n].0);
                proptest::prop_assert_eq!(p.data, &whole[n].3[..]);
                n += 1;
            }
            proptest::prop_assert_eq!(n, sizes.len());
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]

    /// Arbitrary bytes behind every magic number (and behind a valid pcap or
    /// pcapng header): the reader never panics and always ends, with at most
    /// one packet per 12 input bytes.
    #[test]
    fn arbitrary_bytes_never_panic_or_loop(
        which in 0usize..8,
        tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600),
    ) {
        let mut f = match which {
            0 => pcap_header(false, MAGIC_US, 65535, 1),
            1 => pcap_header(true, MAGIC_NS, 0, 101),
            2 => pcap_header(false, MAGIC_MODIFIED, 96, 113),
            3 => {
                let mut ng = Ng::new();
                ng.shb(false).idb(1, 0, &[(9, vec![9])]);
                ng.bytes
            }
            4 => {
                let mut ng = Ng::new();
                ng.shb(true);
                ng.bytes
            }
            5 => vec![0x0a, 0x0d, 0x0d, 0x0a],
            6 => vec![0xd4, 0xc3, 0xb2, 0xa1],
            _ => vec![0x1f, 0x8b],
        };
        f.extend_from_slice(&tail);
        let total = f.len();
        if let Ok(mut r) = TraceReader::from_bytes("fuzz", f) {
            let mut n = 0usize;
            while let Ok(Some(p)) = r.next_packet() {
                let _ = Dissector::default().dissect(p.link_type, p.data);
                n += 1;
                proptest::prop_assert!(n <= total / 12 + 1, "more packets than bytes allow");
            }
        }
    }
}

#[test]
fn pcapng_interface_names_come_with_each_packet() {
    let p = udp_packet(9);
    let mut ng = Ng::new();
    ng.shb(false)
        .idb(101, 0, &[(2, b"eth0".to_vec()), (9, vec![9])])
        .idb(101, 0, &[]) // no if_name
        .idb(101, 0, &[(2, b"wan\0\0".to_vec())]) // NUL padding kept by some writers
        .idb(101, 0, &[(2, vec![0xff, 0xfe])]) // not UTF-8: no name
        .epb(0, 1, 28, &p)
        .epb(1, 2, 28, &p)
        .epb(2, 3, 28, &p)
        .epb(3, 4, 28, &p);
    // A new section forgets the old section's names.
    ng.shb(true).idb(101, 0, &[]).epb(0, 5, 28, &p);
    let mut r = TraceReader::from_bytes("names.pcapng", ng.bytes).unwrap();
    let mut names = Vec::new();
    while let Some(pk) = r.next_packet().unwrap() {
        names.push((pk.interface, pk.interface_name.map(str::to_string)));
    }
    assert_eq!(
        names,
        vec![
            (0, Some("eth0".into())),
            (1, None),
            (2, Some("wan".into())),
            (3, None),
            (0, None),
        ]
    );
    // Classic pcap has no interface names.
    let mut bytes = pcap_header(false, MAGIC_US, 65535, 101);
    let len = p.len() as u32;
    pcap_record(&mut bytes, false, 1, 0, len, len, &p);
    let mut r = TraceReader::from_bytes("plain.pcap", bytes).unwrap();
    assert_eq!(r.next_packet().unwrap().unwrap().interface_name, None);
}

/// `container_magic`, which keeps reports from being written over traces,
/// names what the manifest's independent parser found in each shared
/// capture: pcap (any variant) or pcapng, and nothing for the text files
/// whose magic it did not know.
#[test]
fn container_magic_agrees_with_the_manifest() {
    let Some(dir) = shared_traces("container_magic_agrees_with_the_manifest") else {
        return;
    };
    let mut seen = std::collections::BTreeMap::<&str, usize>::new();
    let entries = common::manifest(&dir);
    for e in &entries {
        let mut head = Vec::new();
        use std::io::Read;
        std::fs::File::open(dir.join(&e.file))
            .unwrap_or_else(|err| panic!("{}: {err}", e.file))
            .take(4)
            .read_to_end(&mut head)
            .unwrap();
        let expected = match e.format() {
            "pcapng" => Some("pcapng"),
            f if f.starts_with("pcap") => Some("pcap"),
            f if f.starts_with("unknown magic") => None,
            f => panic!("{}: manifest format {f:?} not expected here", e.file),
        };
        assert_eq!(
            flowsieve::ingest::container_magic(&head),
            expected,
            "{}: manifest says {}",
            e.file,
            e.format()
        );
        *seen.entry(expected.unwrap_or("none")).or_default() += 1;
    }
    // Each kind is there, so each branch was compared at least once.
    assert!(seen.len() == 3 && seen.values().all(|&n| n > 0), "{seen:?}");
}

/// `plain_trace_bytes`, the size `--huge-pages auto` looks at before a
/// run: each shared capture the manifest's independent parser read as pcap
/// or pcapng counts its manifest size, the text files count as unknown,
/// and so does a list holding any one of them. A gzip copy of a trace, a
/// folder, a missing path, standard input and an empty list are unknown.
#[test]
fn plain_trace_bytes_are_the_manifests_sizes_of_plain_captures() {
    use flowsieve::ingest::plain_trace_bytes;
    let Some(dir) = shared_traces("plain_trace_bytes_are_the_manifests_sizes_of_plain_captures")
    else {
        return;
    };
    let entries = common::manifest(&dir);
    let (mut plain, mut other) = (Vec::new(), Vec::new());
    for e in &entries {
        let path = dir.join(&e.file);
        let size = e.stats["bytes"]
            .as_u64()
            .unwrap_or_else(|| panic!("{}: manifest has no stats.bytes", e.file));
        let trace = e.format().starts_with("pcap");
        let expected = trace.then_some(size);
        assert_eq!(plain_trace_bytes(&[&path]), expected, "{}", e.file);
        if trace {
            plain.push((path, size));
        } else {
            other.push(path);
        }
    }
    assert!(
        plain.len() > 100 && !other.is_empty(),
        "{} {}",
        plain.len(),
        other.len()
    );
    let paths: Vec<&std::path::PathBuf> = plain.iter().map(|(p, _)| p).collect();
    let total: u64 = plain.iter().map(|(_, s)| s).sum();
    assert_eq!(plain_trace_bytes(&paths), Some(total));
    let mut with_text = paths.clone();
    with_text.insert(1, &other[0]);
    assert_eq!(plain_trace_bytes(&with_text), None);

    let tmp = tempfile::tempdir().unwrap();
    let gz = tmp.path().join("t.pcap.gz");
    common::gzip_file(paths[0], &gz);
    let missing = tmp.path().join("missing.pcap");
    for unknown in [
        gz.as_path(),
        tmp.path(),
        &missing,
        std::path::Path::new("-"),
    ] {
        assert_eq!(plain_trace_bytes(&[unknown]), None, "{}", unknown.display());
        assert_eq!(plain_trace_bytes(&[paths[0].as_path(), unknown]), None);
    }
    assert_eq!(plain_trace_bytes::<&std::path::Path>(&[]), None);
}

/// `page_cache_state` reads a file in through a map and reports it whole:
/// every page cached (the length rounded up to whole pages), the 2 MiB
/// part a whole number of 2 MiB entries within it. An empty file is
/// reported as nothing cached; a missing file and a directory are errors,
/// not a panic or a wait.
#[test]
fn page_cache_state_reports_a_file_read_in_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bytes.bin");
    let len: u64 = 5 * 1024 * 1024 + 123;
    std::fs::write(&path, vec![0x5a; len as usize]).unwrap();
    let s = match flowsieve::ingest::page_cache_state(&path) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {
            crate::common::skip::skipped(
                "page_cache_state_reports_a_file_read_in_whole",
                &e.to_string(),
            );
            return;
        }
        Err(e) => panic!("{}: {e}", path.display()),
    };
    assert_eq!(s.file_bytes, len);
    assert_eq!(s.cached_bytes, len.next_multiple_of(4096), "{s:?}");
    assert!(s.huge_mapped_bytes <= s.cached_bytes, "{s:?}");
    assert_eq!(s.huge_mapped_bytes % (2 << 20), 0, "{s:?}");

    let empty = dir.path().join("empty.bin");
    std::fs::write(&empty, b"").unwrap();
    let e = flowsieve::ingest::page_cache_state(&empty).unwrap();
    assert_eq!(
        (e.file_bytes, e.cached_bytes, e.huge_mapped_bytes),
        (0, 0, 0)
    );

    let missing = flowsieve::ingest::page_cache_state(&dir.path().join("absent")).unwrap_err();
    assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
    // A directory (and so a FIFO or a device) is refused, not opened.
    let not_file = flowsieve::ingest::page_cache_state(dir.path()).unwrap_err();
    assert_eq!(not_file.kind(), std::io::ErrorKind::Unsupported);
}

// ---------- runs (`TraceReader::read_packets`) against one packet a call ----------

/// How a test reads a trace.
#[derive(Clone, Copy, Debug)]
enum Reading {
    /// `next_packet`, one packet a call.
    OneByOne,
    /// `read_packets` in runs of up to this many.
    Runs(usize),
    /// Runs of up to `.0`, the visitor asking to stop at every `.1`-th packet.
    RunsStopping(usize, u64),
}

/// Reads up to `limit` more packets by `how`, handing each to `f`;
/// `Ok(false)` once the trace ended.
fn read_upto(
    r: &mut TraceReader,
    how: Reading,
    limit: u64,
    mut f: impl FnMut(flowsieve::ingest::Packet<'_>),
) -> Result<bool, IngestError> {
    let mut n = 0u64;
    while n < limit {
        let want = usize::try_from(limit - n).unwrap_or(usize::MAX);
        let got = match how {
            Reading::OneByOne => match r.next_packet()? {
                Some(p) => {
                    f(p);
                    1
                }
                None => 0,
            },
            Reading::Runs(size) => r.read_packets(size.min(want), |p| {
                f(p);
                true
            })?,
            Reading::RunsStopping(size, every) => {
                let mut seen = n;
                r.read_packets(size.min(want), |p| {
                    f(p);
                    seen += 1;
                    !seen.is_multiple_of(every)
                })?
            }
        };
        if got == 0 {
            return Ok(false);
        }
        n += got as u64;
    }
    Ok(true)
}

/// Everything a reader says about a trace: each packet (time, whether
/// stamped, link type, wire length, interface and its name, captured
/// bytes' length and digest), the
/// error that ended it, the reader's packet count, anomalies and final
/// offset, and that a call after the end or the error gives nothing.
type ReadingDigest = (
    Vec<(
        Timestamp,
        bool,
        LinkType,
        u32,
        u32,
        Option<String>,
        usize,
        u64,
    )>,
    Option<String>,
    u64,
    Vec<(String, u64)>,
    u64,
);

fn read_whole_by(reader: Result<TraceReader, IngestError>, how: Reading) -> ReadingDigest {
    let mut r = match reader {
        Ok(r) => r,
        Err(e) => return (Vec::new(), Some(e.to_string()), 0, Vec::new(), 0),
    };
    let mut packets = Vec::new();
    let ended = read_upto(&mut r, how, u64::MAX, |p| {
        packets.push((
            p.ts,
            p.timestamped,
            p.link_type,
            p.wire_len,
            p.interface,
            p.interface_name.map(String::from),
            p.data.len(),
            p.data.iter().fold(0xcbf2_9ce4_8422_2325u64, |a, &b| {
                (a ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
            }),
        ))
    });
    let error = ended.err().map(|e| e.to_string());
    let mut after = 0;
    let _ = read_upto(&mut r, how, 1, |_| after += 1);
    assert_eq!(after, 0, "{how:?}: a packet after the end or the error");
    let anomalies = r
        .anomalies()
        .entries()
        .iter()
        .map(|a| (format!("{:?}", a.first), a.count))
        .collect();
    (packets, error, r.packets(), anomalies, r.offset())
}

const RUNS: [Reading; 4] = [
    Reading::Runs(1),
    Reading::Runs(7),
    Reading::Runs(256),
    Reading::RunsStopping(256, 5),
];

/// `read_packets`, the run the replay reads with, delivers exactly what
/// `next_packet` does, one packet a call: the same packets, bytes, errors,
/// anomalies and offsets, in runs of 1, 7 and 256 and with the visitor
/// stopping runs early, on every capture of the shared folder (damaged,
/// compressed and pcapng ones included), mapped and buffered.
#[test]
fn runs_deliver_what_one_packet_a_call_delivers_on_every_shared_capture() {
    let Some(dir) =
        shared_traces("runs_deliver_what_one_packet_a_call_delivers_on_every_shared_capture")
    else {
        return;
    };
    let (mut files, mut packets, mut damaged) = (0, 0, 0);
    for path in common::manifest_paths(&dir) {
        for mode in [ReadMode::Mmap, ReadMode::Read] {
            let want = read_whole_by(TraceReader::open_with(&path, mode), Reading::OneByOne);
            for how in RUNS {
                let got = read_whole_by(TraceReader::open_with(&path, mode), how);
                assert!(
                    got == want,
                    "{} {mode:?} {how:?}: {} packets, error {:?}; one a call: {} packets, error {:?}",
                    path.display(),
                    got.0.len(),
                    got.1,
                    want.0.len(),
                    want.1
                );
            }
            files += 1;
            packets += want.0.len();
            damaged += usize::from(want.1.is_some());
        }
    }
    assert!(
        files > 200 && packets > 100_000 && damaged > 0,
        "{files} readings, {packets} packets, {damaged} damaged"
    );
}

/// The crafted damage of this file's tests, in both byte orders, the
/// modified format and nanoseconds: runs agree with one packet a call on
/// each, held in memory, mapped and read through a buffer.
#[test]
fn runs_deliver_what_one_packet_a_call_delivers_on_crafted_damage() {
    let mut files = Vec::new();
    for (big_endian, magic) in [(false, MAGIC_US), (true, MAGIC_NS), (false, MAGIC_MODIFIED)] {
        let modified = magic == MAGIC_MODIFIED;
        let mut v = pcap_header(big_endian, magic, 96, 1);
        for (i, (caplen, wire, frac)) in [
            (60u32, 60u32, 5u32),
            (90, 120, 7),
            (200, 200, 9),           // above the snaplen: an anomaly, read on
            (40, 40, 2_000_000_000), // fraction out of range
            (70, 70, 3),
        ]
        .into_iter()
        .enumerate()
        {
            let data = udp_packet(i as u16 + 1000);
            let mut data = data.clone();
            data.resize(caplen as usize, 0xab);
            pcap_record(&mut v, big_endian, i as u32, frac, caplen, wire, &data);
            if modified {
                // The modified format's 8 extra header bytes.
                let at = v.len() - caplen as usize;
                v.splice(at..at, [0u8; 8]);
            }
        }
        files.push(v.clone());
        // Cut in the last record's data, and in its header.
        files.push(v[..v.len() - 10].to_vec());
        files.push(v[..v.len() - 70 - 6].to_vec());
        // A caplen of gigabytes in the middle.
        let mut huge = v.clone();
        let second = 24 + 16 + if modified { 8 } else { 0 } + 60 + 8;
        huge[second..second + 4].copy_from_slice(&if big_endian {
            0x4000_0000u32.to_be_bytes()
        } else {
            0x4000_0000u32.to_le_bytes()
        });
        files.push(huge);
    }
    for (k, bytes) in files.into_iter().enumerate() {
        assert_runs_agree(&format!("crafted-{k}.pcap"), &bytes);
    }
}

/// Compares runs with one packet a call on a crafted trace, held in
/// memory, mapped and buffered.
fn assert_runs_agree(name: &str, bytes: &[u8]) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).unwrap();
    let held = || TraceReader::from_bytes(name, bytes.to_vec());
    let want = read_whole_by(held(), Reading::OneByOne);
    for how in RUNS {
        assert_eq!(read_whole_by(held(), how), want, "{name} held, {how:?}");
        for mode in [ReadMode::Mmap, ReadMode::Read] {
            assert_eq!(
                read_whole_by(TraceReader::open_with(&path, mode), how),
                read_whole_by(TraceReader::open_with(&path, mode), Reading::OneByOne),
                "{name} {mode:?}, {how:?}"
            );
        }
    }
}

/// An Enhanced Packet Block whose caplen field says `caplen`, whatever the
/// data holds.
fn epb_claiming(ng: &mut Ng, iface: u32, caplen: u32, data: &[u8]) {
    let mut b = ng.u32(iface).to_vec();
    b.extend_from_slice(&ng.u32(0));
    b.extend_from_slice(&ng.u32(1_000_000));
    b.extend_from_slice(&ng.u32(caplen));
    b.extend_from_slice(&ng.u32(data.len() as u32));
    b.extend_from_slice(data);
    ng.block(6, &b);
}

/// pcapng in runs (`PcapNgFramer::fast_block`) against one packet a call
/// (the general framer), in both byte orders: interfaces with names, a
/// snaplen, nanosecond, millisecond and binary clocks and a time offset;
/// blocks the fast path leaves to the general one (simple, obsolete,
/// unknown, a new section, a caplen above the snaplen); and damage of each
/// kind in the middle of packets the fast path takes. The same packets,
/// times, interfaces and names, anomalies, errors and offsets.
#[test]
fn runs_deliver_what_one_packet_a_call_delivers_on_crafted_pcapng() {
    let p = udp_packet(7);
    let long: Vec<u8> = (0..200u8).collect();
    for big in [false, true] {
        let build = |damage: u32| {
            let mut ng = Ng::new();
            let minus_five = if big {
                (-5i64).to_be_bytes()
            } else {
                (-5i64).to_le_bytes()
            };
            ng.shb(big)
                .idb(101, 0, &[(2, b"eth0".to_vec())])
                .idb(101, 64, &[(9, vec![9]), (14, minus_five.to_vec())])
                .idb(228, 0, &[(9, vec![0x80 | 20]), (2, b"bin".to_vec())])
                .idb(101, 0, &[(9, vec![3])]);
            for i in 0..40u64 {
                let iface = (i % 4) as u32;
                match i {
                    5 => {
                        ng.spb(28, &p);
                    }
                    9 => {
                        ng.opb(1, 77, &p);
                    }
                    13 => {
                        ng.block(0x0000_0004, &[1, 2, 3, 4]);
                    }
                    17 => {
                        // Above interface 1's snaplen of 64: an anomaly.
                        ng.epb(1, i << 40 | 12345, 200, &long);
                    }
                    21 if damage == 1 => epb_claiming(&mut ng, 0, 400, &p), // caplen past the block
                    21 if damage == 2 => {
                        ng.epb(9, 1, 28, &p); // an interface never described
                    }
                    21 if damage == 3 => {
                        ng.epb(0, 1, 28, &p);
                        let end = ng.bytes.len();
                        ng.bytes[end - 1] ^= 0x40; // the trailing length differs
                    }
                    21 if damage == 4 => {
                        let at = ng.bytes.len();
                        ng.epb(0, 1, 28, &p);
                        let len = ng.u32(49);
                        ng.bytes[at + 4..at + 8].copy_from_slice(&len); // not a multiple of 4
                    }
                    25 => {
                        // A new section in the other byte order.
                        ng.shb(!big)
                            .idb(1, 0, &[(2, b"eth1".to_vec())])
                            .idb(101, 0, &[]);
                    }
                    _ if i > 25 => {
                        ng.epb((i % 2) as u32, i * 1_000_003, 28 + i as u32, &p);
                    }
                    _ => {
                        ng.epb(iface, i * 999_999_937, 28 + i as u32, &p);
                    }
                }
            }
            ng.bytes
        };
        for damage in 0..5 {
            let bytes = build(damage);
            let name = format!("crafted-{big}-{damage}.pcapng");
            assert_runs_agree(&name, &bytes);
            // Cut inside the last block, and inside the one before.
            assert_runs_agree(&name, &bytes[..bytes.len() - 10]);
            assert_runs_agree(&name, &bytes[..bytes.len() - 70]);
        }
        // The undamaged trace reads whole, with its names and anomaly.
        let (packets, error, count, anomalies, _) = read_whole_by(
            TraceReader::from_bytes("x.pcapng", build(0)),
            Reading::Runs(256),
        );
        assert_eq!(error, None);
        assert_eq!((packets.len(), count), (38, 38));
        assert_eq!(anomalies.len(), 1, "{anomalies:?}");
        assert_eq!(packets[0].5.as_deref(), Some("eth0"));
        assert_eq!(packets[2].5.as_deref(), Some("bin"));
        assert_eq!(
            packets[36].5.as_deref(),
            Some("eth1"),
            "the second section's"
        );
        assert_eq!(packets[37].5, None);
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]

    /// A synthetic trace with a handful of bytes overwritten anywhere
    /// (headers, lengths, times, data): runs of any size, stopped or not,
    /// deliver what one packet a call delivers, held in memory, mapped and
    /// buffered.
    /// Every pcapng clock: decimal and binary `if_tsresol` of any
    /// exponent, any `if_tsoffset`, any 64-bit time, either byte order, a
    /// snaplen below or above the caplen. Runs (the fast path, where it
    /// takes the interface) give each packet the time one packet a call
    /// (`Timestamp::from_units`) gives it.
    #[test]
    fn runs_keep_every_pcapng_clock(
        big in proptest::prelude::any::<bool>(),
        tsresol in proptest::prop_oneof![
            0u8..=20,
            proptest::strategy::Strategy::prop_map(0u8..=64, |v| 0x80 | v)
        ],
        offset in proptest::prelude::any::<i64>(),
        times in proptest::collection::vec(proptest::prelude::any::<u64>(), 1..20),
        snaplen in 0u32..40,
    ) {
        let p = udp_packet(3);
        let mut ng = Ng::new();
        ng.shb(big);
        let offset = if big { offset.to_be_bytes() } else { offset.to_le_bytes() };
        ng.idb(101, snaplen, &[(9, vec![tsresol]), (14, offset.to_vec())]);
        for (i, &t) in times.iter().enumerate() {
            // Some near the boundaries of a second in common resolutions.
            let t = match i % 3 {
                0 => t,
                1 => t / 1_000_000 * 1_000_000 + 999_999,
                _ => t / 1_000_000_000 * 1_000_000_000,
            };
            ng.epb(0, t, 28, &p);
        }
        let held = || TraceReader::from_bytes("clock.pcapng", ng.bytes.clone());
        let want = read_whole_by(held(), Reading::OneByOne);
        proptest::prop_assert_eq!(want.0.len(), times.len());
        for how in RUNS {
            proptest::prop_assert_eq!(&read_whole_by(held(), how), &want, "{:?}", how);
        }
    }

    #[test]
    fn runs_agree_with_one_packet_a_call_on_damaged_bytes(
        seed in 0u64..1000,
        pcapng in proptest::prelude::any::<bool>(),
        hits in proptest::collection::vec((0.0f64..1.0, proptest::prelude::any::<u8>()), 0..6),
        run in 1usize..300,
        every in 1u64..50,
    ) {
        let format = if pcapng { OutputFormat::PcapNg } else { OutputFormat::Pcap };
        let mut bytes = synth_trace_as(format, 20, 300, seed);
        let len = bytes.len();
        for (at, b) in hits {
            bytes[((at * len as f64) as usize).min(len - 1)] = b;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hit.pcap");
        std::fs::write(&path, &bytes).unwrap();
        let held = || TraceReader::from_bytes("hit.pcap", bytes.clone());
        let want = read_whole_by(held(), Reading::OneByOne);
        for how in [Reading::Runs(run), Reading::RunsStopping(run, every)] {
            proptest::prop_assert_eq!(&read_whole_by(held(), how), &want, "held {:?}", how);
            for mode in [ReadMode::Mmap, ReadMode::Read] {
                proptest::prop_assert_eq!(
                    read_whole_by(TraceReader::open_with(&path, mode), how),
                    read_whole_by(TraceReader::open_with(&path, mode), Reading::OneByOne),
                    "{:?} {:?}", mode, how
                );
            }
        }
    }
}

proptest::proptest! {
    /// `LinkTypeCounts` (counts by runs) against a plain map counted one
    /// step at a time: the same counts and the same types listed (the
    /// map's keys), for any
    /// steps (zero-packet steps among them, which list a type with no
    /// packets), and a merge adds every count.
    #[test]
    fn link_type_counts_are_a_plain_maps_counts(
        steps in proptest::collection::vec((0u16..4, 0u64..3), 0..60),
        more in proptest::collection::vec((0u16..4, 0u64..3), 0..20),
    ) {
        use flowsieve::ingest::LinkTypeCounts;
        use std::collections::BTreeMap;
        let count = |steps: &[(u16, u64)]| {
            let (mut runs, mut plain) = (LinkTypeCounts::default(), BTreeMap::new());
            for &(lt, n) in steps {
                if n == 1 { runs.add(LinkType(lt)) } else { runs.add_n(LinkType(lt), n) }
                *plain.entry(lt).or_insert(0u64) += n;
            }
            (runs, plain)
        };
        let (mut runs, mut plain) = count(&steps);
        let listed = |r: &LinkTypeCounts| r.iter().map(|(lt, n)| (lt.0, n)).collect::<BTreeMap<_, _>>();
        proptest::prop_assert_eq!(listed(&runs), plain.clone());
        let (other, other_plain) = count(&more);
        runs.merge(&other);
        for (lt, n) in other_plain {
            *plain.entry(lt).or_insert(0) += n;
        }
        proptest::prop_assert_eq!(listed(&runs), plain);
    }
}

/// A timestamp drawn mostly from a few seconds (so that equal stamps and
/// small steps both happen), sometimes from the representable extremes.
fn any_timestamp() -> impl proptest::strategy::Strategy<Value = Timestamp> {
    use proptest::prelude::*;
    prop_oneof![
        8 => (0i64..4, 0u32..3).prop_map(|(s, n)| Timestamp::new(s, n * 400_000_000).unwrap()),
        1 => Just(Timestamp::MAX),
        1 => Just(Timestamp::MIN),
        1 => (any::<i64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Timestamp::new(s, n).unwrap()),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

    /// [`TimeOrder`] against the plain definition over any sequence, the
    /// extremes included (a first record stamped `Timestamp::MAX` takes the
    /// common path, unlike any other first record): steps back are records
    /// stamped before the record just ahead of them, the largest step is
    /// the largest such difference, and the span is the minimum and the
    /// maximum.
    #[test]
    fn time_order_is_the_plain_definition(
        stamps in proptest::collection::vec(any_timestamp(), 0..60),
    ) {
        let mut order = TimeOrder::new();
        for &t in &stamps {
            order.see(t);
        }
        let steps: Vec<i128> = stamps
            .windows(2)
            .filter(|w| w[1] < w[0])
            .map(|w| w[0].as_nanos() - w[1].as_nanos())
            .collect();
        proptest::prop_assert_eq!(order.steps_back(), steps.len() as u64);
        proptest::prop_assert_eq!(order.largest_step_back_ns(), steps.iter().copied().max().unwrap_or(0));
        let span = stamps.iter().min().copied().zip(stamps.iter().max().copied());
        proptest::prop_assert_eq!(order.span(), span);
    }
}
