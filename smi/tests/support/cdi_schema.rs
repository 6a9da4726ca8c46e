//! The upstream CDI JSON schema (vendored in `smi/cdi-schema/`, see its README), as a
//! validator for tests: davinci-smi's unit tests (`smi/src/cdi.rs`) and the tests package's
//! `smi_cdi` tests include this file with `#[path]`.
//!
//! As upstream's Go package does, `schema.json` is loaded as `file:///schema.json`, so its
//! `$ref`s to `defs.json#/definitions/...` resolve to `file:///defs.json`, registered here
//! (neither file has an `$id`). Nothing is fetched: a reference that is not registered fails
//! the build of the validator.
#![allow(dead_code)]

use serde_json::Value;

/// `schema/schema.json` at the vendored tag.
pub const SCHEMA: &str = include_str!("../../cdi-schema/schema.json");
/// `schema/defs.json` at the vendored tag.
pub const DEFS: &str = include_str!("../../cdi-schema/defs.json");
/// Upstream's own test data: specs the schema accepts and rejects.
pub const GOOD: [(&str, &str); 2] = [
    (
        "good/minimal.json",
        include_str!("../../cdi-schema/testdata/good/minimal.json"),
    ),
    (
        "good/spec-example.json",
        include_str!("../../cdi-schema/testdata/good/spec-example.json"),
    ),
];
/// See [`GOOD`].
pub const BAD: [(&str, &str); 1] = [(
    "bad/explicit-empty.json",
    include_str!("../../cdi-schema/testdata/bad/explicit-empty.json"),
)];

/// The URI `schema.json` is loaded as (upstream: `builtinSchemaFile`).
pub const SCHEMA_URI: &str = "file:///schema.json";
/// Where its relative `$ref`s to `defs.json` point.
pub const DEFS_URI: &str = "file:///defs.json";

/// A compiled CDI schema.
pub struct CdiSchema {
    validator: jsonschema::Validator,
}

impl CdiSchema {
    /// Compiles the vendored schema.
    ///
    /// # Panics
    /// If the vendored files are not JSON or the schema does not compile (a broken vendoring).
    pub fn load() -> CdiSchema {
        let schema: Value = serde_json::from_str(SCHEMA).expect("schema.json is JSON");
        let defs: Value = serde_json::from_str(DEFS).expect("defs.json is JSON");
        let registry = jsonschema::Registry::new()
            .draft(jsonschema::Draft::Draft7)
            .add(DEFS_URI, defs)
            .expect("defs.json registers")
            .prepare()
            .expect("the registry prepares");
        let validator = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft7)
            .offline()
            .with_base_uri(SCHEMA_URI)
            .with_registry(&registry)
            .build(&schema)
            .expect("the CDI schema compiles with defs.json");
        CdiSchema { validator }
    }

    /// Every violation of the schema by `spec` (empty: valid), as `path: message`.
    pub fn errors(&self, spec: &Value) -> Vec<String> {
        self.validator
            .iter_errors(spec)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect()
    }

    /// Asserts `spec` is valid, printing it with the violations otherwise.
    ///
    /// # Panics
    /// If it is not.
    pub fn assert_valid(&self, spec: &Value) {
        let errors = self.errors(spec);
        assert!(
            errors.is_empty(),
            "not a valid CDI spec: {errors:#?}\n{spec:#}"
        );
    }
}
