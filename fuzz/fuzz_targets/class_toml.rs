//! The class TOML parser: any text is a config or a one-line error.
#![no_main]
use flowsieve::class::ClassConfig;
use flowsieve::dissect::FlowKey;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match ClassConfig::parse("fuzz.toml", text) {
        Ok(cfg) => {
            let k = FlowKey::v4([10, 0, 0, 1], [192, 0, 2, 9], 1234, 443, 6);
            let _ = cfg.classify(&k, Some("eth0"));
            let _ = cfg.classify(&k, None);
        }
        Err(e) => assert!(!e.to_string().contains('\n'), "a multi-line error: {e}"),
    }
});
