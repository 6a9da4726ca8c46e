//! A checked workload on a davinci device: vector adds, fills and copies over several streams
//! with cross-stream events, every result compared with a CPU computation ([`model`]), then
//! a latency phase ([`run`]; [`run::run_until`] also stops early on a flag, as the binary
//! does on Ctrl-C). The `davinci-workload` binary runs it and reports tasks/s,
//! round-trip latency p50/p99 and doorbells per 1000 tasks; the integration tests reuse both
//! modules.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod model;
pub mod run;
