//! `mock_device`: the body is `davinci_fuzz_harness::mock_device` (fuzz/harness/src/mock_device/), which also
//! runs on stable: the harness crate's test replays every seed and regression input.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| davinci_fuzz_harness::mock_device::run(data));
