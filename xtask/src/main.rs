//! Workspace tasks: generate the C header (gen-header).

fn main() {}
