//! `mockd_conn`: the body is `davinci_fuzz_harness::mockd_conn` (fuzz/harness/src/mockd_conn.rs), which also
//! runs on stable: the harness crate's test replays every seed and regression input.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| davinci_fuzz_harness::mockd_conn::run(data));
