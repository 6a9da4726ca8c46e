//! Benchmarks of the data path against baselines, in one run.
