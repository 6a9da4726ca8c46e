//! `descriptor_engine`: the body is `davinci_fuzz_harness::descriptor_engine` (fuzz/harness/src/descriptor_engine.rs), which also
//! runs on stable: the harness crate's test replays every seed and regression input.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| davinci_fuzz_harness::descriptor_engine::run(data));
