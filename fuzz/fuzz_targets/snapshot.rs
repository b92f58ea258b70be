//! Compressed Bloom snapshots, XOR deltas and counting-filter snapshots
//! (both versions each): decoding any bytes is an error or a filter, never
//! a panic, and a decoded snapshot re-encodes and decodes to the same
//! filter.
#![no_main]
use flowsieve::filter::{
    apply_delta, compress_bloom, compress_counting, decompress_bloom_within, decompress_counting,
    BloomFilter, Counters,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Small limits keep each execution fast; the size checks are the same.
    if let Ok(f) = decompress_bloom_within(data, 1 << 16) {
        assert_eq!(
            decompress_bloom_within(&compress_bloom(&f), 1 << 16).unwrap(),
            f
        );
    }
    let mut base = BloomFilter::new(4096, 3);
    for i in 0..100u64 {
        base.insert(i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    }
    let _ = apply_delta(&base, data);
    if let Ok(f) = decompress_counting(data, 1 << 16) {
        let g = decompress_counting(&compress_counting(&f), 1 << 16).unwrap();
        assert!((0..f.m()).all(|i| f.counter(i) == g.counter(i)));
    }
});
