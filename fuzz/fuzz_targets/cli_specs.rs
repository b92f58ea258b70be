//! Every command-line mini-language: windows, durations, recycle policies,
//! sweeps, sizes, stage lists, layouts, widths, size models, protocol
//! mixes, hash keys. Any string parses or is an error; nothing panics.
#![no_main]
use flowsieve::filter::{CounterLayout, CounterWidth};
use flowsieve::hash::HashKey;
use flowsieve::ingest::DurationNs;
use flowsieve::pipeline::{
    ByteSize, DirectoryKind, QueryUnit, RecycleSpec, StageList, SweepSpec, WindowSpec,
};
use flowsieve::synth::{OutputFormat, ProtoMix, SizeModel};
use libfuzzer_sys::fuzz_target;
use std::str::FromStr;

fn all(s: &str) {
    if let Ok(w) = WindowSpec::from_str(s) {
        // What parses prints back to something that parses to the same.
        assert_eq!(WindowSpec::from_str(&w.to_string()).ok(), Some(w));
    }
    let _ = DurationNs::from_str(s);
    let _ = RecycleSpec::from_str(s);
    let _ = SweepSpec::from_str(s);
    let _ = ByteSize::from_str(s);
    let _ = StageList::from_str(s);
    let _ = DirectoryKind::from_str(s);
    let _ = QueryUnit::from_str(s);
    let _ = CounterLayout::from_str(s);
    let _ = CounterWidth::from_str(s);
    let _ = SizeModel::from_str(s);
    let _ = ProtoMix::from_str(s);
    let _ = OutputFormat::from_str(s);
    if s != "random" {
        let _ = HashKey::from_str(s);
    }
    let _ = flowsieve::pipeline::parse_duration_ns(s);
}

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        all(s);
    }
});
