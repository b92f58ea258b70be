//! Compressed Bloom snapshots, XOR deltas and counting-filter snapshots
//! (both versions each): decoding any bytes is an error or a filter, never
//! a panic, and a decoded snapshot re-encodes and decodes to the same
//! filter. A counting snapshot decoded as cells is the same filter as
//! decoded whole, and codes to the same bytes.
#![no_main]
use flowsieve::filter::{
    apply_delta, compress_bloom, compress_counting, decompress_bloom_within,
    decompress_counter_snapshot, decompress_counting, BloomFilter, CounterSnapshot, Counters,
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
        let s = decompress_counter_snapshot(data, 1 << 16).unwrap();
        assert_eq!(s.compress(), compress_counting(&f));
        assert!(s == CounterSnapshot::from(f));
    } else {
        assert!(decompress_counter_snapshot(data, 1 << 16).is_err());
    }
});
