//! `ioctl_dispatch`: the body is `davinci_fuzz_harness::ioctl_dispatch` (fuzz/harness/src/ioctl_dispatch/), which also
//! runs on stable: the harness crate's test replays every seed and regression input.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| davinci_fuzz_harness::ioctl_dispatch::run(data));
