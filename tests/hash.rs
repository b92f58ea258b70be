//! The hash module: pinned test vectors, the encoding, uniformity of filter
//! indices and shards on real keys, and index ranges.

use crate::common;

use common::{scan, shared_traces};
use flowsieve::dissect::{Dissector, FlowKey};
use flowsieve::hash::{
    BlockedIndexer, PartitionedIndexer, encode, flow_hash, fmix64, second_mix, shard_of,
};
use flowsieve::synth::{SynthConfig, generate};
use proptest::prelude::*;

const V6_A: [u8; 16] = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const V6_B: [u8; 16] = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
const LL: [u8; 16] = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const MLD: [u8; 16] = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x16];

/// Known keys to known hashes. A change here changes every filter's indices
/// and every shard assignment: it must be deliberate.
#[test]
fn hash_is_pinned() {
    let vectors = [
        (
            FlowKey::v4([192, 0, 2, 1], [198, 51, 100, 7], 40000, 443, 6),
            0x6ab7_2908_4629_3245u64,
            0x9852_d7e9_1d77_5365u64,
        ),
        (
            FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], 53, 53, 17),
            0xe3f1_6ccd_861d_7418,
            0x21b2_6aaf_7be6_cf39,
        ),
        (
            FlowKey::v4([0, 0, 0, 0], [0, 0, 0, 0], 0, 0, 0),
            0x227e_cf62_ee75_6f08,
            0x3278_4b8c_0d91_f370,
        ),
        (
            FlowKey::v4([255; 4], [255; 4], 65535, 65535, 255),
            0x820a_b0a4_8450_bec6,
            0x3f2d_1d84_8f33_a2c3,
        ),
        (
            FlowKey::v6(V6_A, V6_B, 546, 547, 17),
            0x0864_3223_1a4f_62f3,
            0x427a_3e05_9023_c128,
        ),
        (
            FlowKey::v6(LL, MLD, 0, 0, 58),
            0x54f5_b6c7_bc99_e297,
            0x45bc_b936_68f5_180a,
        ),
    ];
    for (k, h, h2) in vectors {
        assert_eq!(flow_hash(&k), h, "{k}");
        assert_eq!(second_mix(h), h2, "{k}");
    }
}

#[test]
fn encoding_is_the_documented_five_words() {
    let k = FlowKey::v4([192, 0, 2, 1], [198, 51, 100, 7], 40000, 443, 6);
    assert_eq!(
        encode(&k),
        [
            0,
            0xc000_0201,
            0,
            0xc633_6407,
            (40000u64 << 48) | (443 << 32) | (6 << 8) | 4
        ]
    );
    let k6 = FlowKey::v6(V6_A, V6_B, 1, 2, 17);
    assert_eq!(
        encode(&k6),
        [
            0x2001_0db8_0000_0000,
            1,
            0x2001_0db8_0000_0000,
            2,
            (1u64 << 48) | (2 << 32) | (17 << 8) | 6
        ]
    );
    // An IPv4 key and the IPv6 key with the same 128-bit addresses differ.
    let v4 = FlowKey::v4([0, 0, 0, 1], [0, 0, 0, 2], 1, 2, 17);
    let mut a = [0u8; 16];
    a[15] = 1;
    let mut b = [0u8; 16];
    b[15] = 2;
    assert_ne!(flow_hash(&v4), flow_hash(&FlowKey::v6(a, b, 1, 2, 17)));
}

/// Pearson chi-square statistic of counts against a uniform expectation.
fn chi_square(counts: &[u64]) -> f64 {
    let n: u64 = counts.iter().sum();
    let e = n as f64 / counts.len() as f64;
    counts.iter().map(|&c| (c as f64 - e).powi(2) / e).sum()
}

/// Upper bound for a chi-square with `df` degrees of freedom at about
/// six standard deviations (a false alarm below one in 10^8 or so).
fn chi_square_bound(df: usize) -> f64 {
    df as f64 + 6.0 * (2.0 * df as f64).sqrt()
}

fn check_uniform(keys: &[FlowKey], what: &str) {
    assert!(keys.len() >= 10_000, "{what}: only {} keys", keys.len());
    const BUCKETS: usize = 512;
    // Each of k = 4 partitions of a 4 x 512-cell filter, and 8/16-way shards.
    let ix = PartitionedIndexer::new(4 * BUCKETS, 4);
    let mut per_part = vec![vec![0u64; BUCKETS]; 4];
    let mut idx = [0usize; 4];
    let (mut shards8, mut shards16) = (vec![0u64; 8], vec![0u64; 16]);
    for k in keys {
        let h = flow_hash(k);
        ix.indices(h, &mut idx);
        for (i, &x) in idx.iter().enumerate() {
            per_part[i][x - i * BUCKETS] += 1;
        }
        shards8[shard_of(h, 8)] += 1;
        shards16[shard_of(h, 16)] += 1;
    }
    for (i, counts) in per_part.iter().enumerate() {
        let c = chi_square(counts);
        assert!(
            c < chi_square_bound(BUCKETS - 1),
            "{what}: partition {i} chi-square {c:.1}"
        );
        // Not suspiciously uniform either (a broken test harness, say).
        assert!(
            c > (BUCKETS as f64 - 1.0) - 6.0 * (2.0 * (BUCKETS as f64 - 1.0)).sqrt(),
            "{what}: partition {i} chi-square {c:.1} too small"
        );
    }
    assert!(
        chi_square(&shards8) < chi_square_bound(7),
        "{what}: 8 shards {shards8:?}"
    );
    assert!(
        chi_square(&shards16) < chi_square_bound(15),
        "{what}: 16 shards {shards16:?}"
    );
    // Indices of one key in different partitions are not correlated: the
    // pair (partition 0, partition 1) over 32 x 32 coarse cells is uniform.
    let mut joint = vec![0u64; 32 * 32];
    for k in keys {
        let h = flow_hash(k);
        joint[(ix.index(h, 0) * 32 / BUCKETS) * 32 + (ix.index(h, 1) - BUCKETS) * 32 / BUCKETS] +=
            1;
    }
    assert!(
        chi_square(&joint) < chi_square_bound(1023),
        "{what}: joint chi-square {:.1}",
        chi_square(&joint)
    );
}

#[test]
fn indices_and_shards_are_uniform_on_synthetic_keys() {
    let cfg = SynthConfig {
        flows: 40_000,
        packets: 40_000,
        seed: 5,
        ..SynthConfig::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.pcap");
    generate(&cfg, std::fs::File::create(&path).unwrap()).unwrap();
    let s = scan(&path, Dissector::default());
    let keys: Vec<FlowKey> = s.table.iter().map(|e| e.key).collect();
    check_uniform(&keys, "synthetic");
}

#[test]
fn indices_and_shards_are_uniform_on_real_keys() {
    let Some(dir) = shared_traces("indices_and_shards_are_uniform_on_real_keys") else {
        return;
    };
    // Spoofed SYN flood: 37,669 real keys, sources random, one destination.
    let s = scan(
        &dir.join("many_flows/ddos_tcp_synflood_spoofed.pcap"),
        Dissector::default(),
    );
    let keys: Vec<FlowKey> = s.table.iter().map(|e| e.key).collect();
    check_uniform(&keys, "synflood");
    // A structured real trace: anonymised 10/8 addresses, few ports.
    let mut keys = Vec::new();
    for f in [
        "backbone_like/auckland2000_uplink_rawip_hdr52.pcap",
        "backbone_like/wand_isp_vlan_snaplen_10k.pcap",
        "many_flows/ddos_tcp_syn_ecn_cwr__is_pcap.pcapng",
    ] {
        keys.extend(
            scan(&dir.join(f), Dissector::default())
                .table
                .iter()
                .map(|e| e.key),
        );
    }
    check_uniform(&keys, "backbone_like + ecn flood");
}

#[test]
fn sequential_keys_spread_over_shards() {
    // Adjacent addresses and ports (a scan) must not pile into one shard.
    let mut counts = [0u64; 4];
    for i in 0..40_000u32 {
        let k = FlowKey::v4(
            [10, 0, (i >> 8) as u8, i as u8],
            [10, 1, 0, 1],
            1024 + (i % 7) as u16,
            80,
            6,
        );
        counts[shard_of(flow_hash(&k), 4)] += 1;
    }
    assert!(chi_square(&counts) < chi_square_bound(3), "{counts:?}");
}

proptest! {
    #[test]
    fn every_index_lies_in_its_own_partition(h in any::<u64>(), m in 1usize..1 << 24, k in 1usize..16) {
        let ix = PartitionedIndexer::new(m, k);
        let n = ix.partition_len();
        let mut out = vec![0usize; k];
        ix.indices(h, &mut out);
        for (i, &x) in out.iter().enumerate() {
            prop_assert!(x >= i * n && x < (i + 1) * n, "index {} of partition {} (len {})", x, i, n);
            prop_assert_eq!(x, ix.index(h, i));
        }
    }

    #[test]
    fn partitions_above_2_pow_32_use_the_wide_path(h in any::<u64>(), k in 1usize..8) {
        let m = (1usize << 40) * k;
        let ix = PartitionedIndexer::new(m, k);
        let mut walked = Vec::new();
        ix.for_each(h, |x| walked.push(x));
        prop_assert_eq!(walked.len(), k);
        for (i, &w) in walked.iter().enumerate() {
            let x = ix.index(h, i);
            prop_assert!(x >= i << 40 && x < (i + 1) << 40);
            prop_assert_eq!(w, x);
        }
    }

    /// `indices` into a slot array shorter than `k` writes only those slots,
    /// with the first indices.
    #[test]
    fn indices_into_a_short_array_write_the_first_ones(h in any::<u64>(), m in 1usize..1 << 24, k in 2usize..16, short in 1usize..16) {
        let ix = PartitionedIndexer::new(m, k);
        let short = short.min(k - 1);
        let mut out = vec![usize::MAX; short + 1];
        ix.indices(h, &mut out[..short]);
        for (i, &x) in out[..short].iter().enumerate() {
            prop_assert_eq!(x, ix.index(h, i));
        }
        prop_assert_eq!(out[short], usize::MAX);
    }

    /// The blocked layout's cells are the documented ones, computed here
    /// from the formula alone: cell `j` is `j * s + (c_j * s >> 16)`, with
    /// `c_j` the 16-bit chunk `j % 4` of `fmix64(second_mix(h) + (j / 4 +
    /// 1) * GOLDEN)`. `cells` and the walk `for_each_cell` both give them,
    /// a short output array takes the first ones, and every cell lies in
    /// its own sub-block. A walk that took its chunks from the wrong group,
    /// or in the wrong order, fails it.
    #[test]
    fn blocked_cells_follow_the_documented_formula(
        h in any::<u64>(),
        blocks in 1usize..1 << 20,
        per_block in prop::sample::select(vec![16usize, 32, 64, 128]),
        k in 1usize..40,
        short in 0usize..40,
    ) {
        const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;
        let ix = BlockedIndexer::new(blocks, per_block, k);
        let k = ix.k();
        let s = ix.sub_block_len() as u64;
        prop_assert_eq!(s, (per_block / k) as u64);
        let expected: Vec<usize> = (0..k as u64)
            .map(|j| {
                let bits = fmix64(second_mix(h).wrapping_add((j / 4 + 1).wrapping_mul(GOLDEN)));
                let chunk = (bits >> (16 * (j % 4))) & 0xffff;
                (j * s + ((chunk * s) >> 16)) as usize
            })
            .collect();
        let mut walked = Vec::new();
        ix.for_each_cell(h, |c| walked.push(c));
        prop_assert_eq!(&walked, &expected);
        let mut written = vec![usize::MAX; k];
        ix.cells(h, &mut written);
        prop_assert_eq!(&written, &expected);
        let short = short.min(k);
        let mut first = vec![usize::MAX; short];
        ix.cells(h, &mut first);
        prop_assert_eq!(&first[..], &expected[..short]);
        for (j, &c) in expected.iter().enumerate() {
            prop_assert!(c >= j * s as usize && c < (j + 1) * s as usize);
        }
        prop_assert!(ix.block(h) < blocks);
    }

    #[test]
    fn shards_are_in_range(h in any::<u64>(), s in 1usize..1000) {
        prop_assert!(shard_of(h, s) < s);
    }
}

#[test]
fn wide_path_reaches_the_top_of_large_partitions() {
    // With 2^40 cells per partition, 32-bit halves could only reach the
    // bottom 2^32 slots' granularity; the wide path must use the high range.
    let ix = PartitionedIndexer::new(1 << 41, 2);
    let high = (0..1000u64)
        .map(|i| {
            ix.index(
                flow_hash(&FlowKey::v4([1, 2, 3, 4], [5, 6, 7, 8], i as u16, 1, 6)),
                0,
            )
        })
        .filter(|&x| x >= 1 << 39)
        .count();
    assert!(
        (400..=600).contains(&high),
        "{high} of 1000 in the upper half"
    );
}

// ---------- keyed hashing (`--hash-key`) ----------

mod keyed {
    use flowsieve::dissect::FlowKey;
    use flowsieve::filter::{CounterWidth, CountingBloomFilter};
    use flowsieve::hash::{FlowHasher, HashKey, flow_hash};
    use proptest::prelude::*;

    /// The first public constant (see the hash module's documentation).
    const K0: u64 = 0x243f_6a88_85a3_08d3;

    /// IPv6 sources whose upper half is `K0`: the first folded product is
    /// `0 * x` whatever the lower half, so under the public constants every
    /// such source hashes alike. An attacker can send a flood of these.
    fn crafted(n: u64) -> Vec<FlowKey> {
        (0..n)
            .map(|i| {
                let mut src = [0u8; 16];
                src[..8].copy_from_slice(&K0.to_be_bytes());
                src[8..].copy_from_slice(&(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)).to_be_bytes());
                FlowKey::v6(
                    src,
                    [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
                    40000,
                    443,
                    6,
                )
            })
            .collect()
    }

    #[test]
    fn crafted_keys_collide_under_the_fixed_hash_and_not_under_a_key() {
        let keys = crafted(1000);
        let fixed: std::collections::HashSet<u64> = keys.iter().map(flow_hash).collect();
        assert_eq!(fixed.len(), 1, "the crafted keys all collide, unkeyed");
        let hasher = FlowHasher::new("8f3a0c1e5d7b92466e1f0a3b5c7d9e21".parse().unwrap());
        let keyed: std::collections::HashSet<u64> = keys.iter().map(|k| hasher.hash(k)).collect();
        assert_eq!(keyed.len(), 1000, "no two collide under a key");
        // What that means to the heavy stage: 1000 one-packet flows look
        // like one flow of 1000 packets to a counting filter unkeyed (a
        // false heavy flow at any theta up to 255), and like 1000 one-packet
        // flows keyed.
        let theta = 100;
        let count = |h: &dyn Fn(&FlowKey) -> u64| {
            let mut f = CountingBloomFilter::new(1 << 16, 4, CounterWidth::W8);
            keys.iter().map(|k| f.insert(h(k))).max().unwrap()
        };
        assert!(count(&flow_hash) >= theta);
        assert!(count(&|k| hasher.hash(k)) < 5);
    }

    proptest! {
        /// The all-zero key is the fixed hash, bit for bit (the default
        /// reports do not move), and a nonzero key changes the hash.
        #[test]
        fn the_zero_key_is_the_fixed_hash(src in any::<[u8; 16]>(), dst in any::<[u8; 16]>(), sp in any::<u16>(), dp in any::<u16>(), key in any::<[u64; 2]>()) {
            let k = FlowKey::v6(src, dst, sp, dp, 17);
            prop_assert_eq!(FlowHasher::new(HashKey::FIXED).hash(&k), flow_hash(&k));
            prop_assume!(key != [0, 0]);
            prop_assert_ne!(FlowHasher::new(HashKey(key)).hash(&k), flow_hash(&k));
        }

        /// Keys round-trip through their hex form.
        #[test]
        fn hash_keys_round_trip_through_hex(key in any::<[u64; 2]>()) {
            let k = HashKey(key);
            prop_assert_eq!(k.to_string().parse::<HashKey>().unwrap(), k);
        }
    }
}
