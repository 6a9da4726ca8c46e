//! `ring_device_consumer`: the body is `davinci_fuzz_harness::ring_device_consumer` (fuzz/harness/src/ring_device_consumer.rs), which also
//! runs on stable: the harness crate's test replays every seed and regression input.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| davinci_fuzz_harness::ring_device_consumer::run(data));
