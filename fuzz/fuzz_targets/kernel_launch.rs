//! `kernel_launch`: the body is `davinci_fuzz_harness::kernel_launch` (fuzz/harness/src/kernel_launch.rs), which also
//! runs on stable: the harness crate's test replays every seed and regression input.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| davinci_fuzz_harness::kernel_launch::run(data));
