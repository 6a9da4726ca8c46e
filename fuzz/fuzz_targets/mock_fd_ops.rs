//! `mock_fd_ops`: the body is `davinci_fuzz_harness::mock_fd_ops` (fuzz/harness/src/mock_fd_ops.rs), which also
//! runs on stable: the harness crate's test replays every seed and regression input.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| davinci_fuzz_harness::mock_fd_ops::run(data));
