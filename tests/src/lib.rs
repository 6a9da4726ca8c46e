//! Cross-crate integration and conformance tests (run against every device backend).
