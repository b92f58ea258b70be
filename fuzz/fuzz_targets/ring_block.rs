//! The live ring's block walker fed synthetic TPACKET_V3 blocks: any bytes
//! are walked without reading past the block, and every frame lies inside.
#![no_main]
use flowsieve::ingest::live::walk_block;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let range = data.as_ptr_range();
    let mut frames = 0u32;
    let seen = walk_block(data, &mut |f| {
        let r = f.data.as_ptr_range();
        assert!(
            r.start >= range.start && r.end <= range.end,
            "a frame outside its block"
        );
        frames += 1;
    });
    assert_eq!(seen, frames);
});
