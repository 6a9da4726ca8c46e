//! The upstream CDI JSON schema (vendored in `operators/ops/cdi-schema/`, see its README) as a
//! validator, for tests (feature `cdi-schema`): davinci-ops' and davinci-smi's unit tests and
//! the tests package's `smi_cdi` tests. Nothing of it is in a tool's binary.
//!
//! As upstream's Go package does, `schema.json` is loaded as `file:///schema.json`, so its
//! `$ref`s to `defs.json#/definitions/...` resolve to `file:///defs.json`, registered here
//! (neither file has an `$id`). Nothing is fetched: a reference that is not registered fails
//! the build of the validator.
#![forbid(unsafe_code)]

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

/// The device named `name` of a spec as JSON.
///
/// # Panics
/// If the spec has no such device.
pub fn device<'a>(spec: &'a Value, name: &str) -> &'a Value {
    spec["devices"]
        .as_array()
        .and_then(|a| a.iter().find(|d| d["name"] == name))
        .unwrap_or_else(|| panic!("no device {name}: {spec:#}"))
}

/// The names of a spec's devices (as JSON), in order.
///
/// # Panics
/// If the spec has no device list, or a device has no name.
pub fn device_names(spec: &Value) -> Vec<&str> {
    spec["devices"]
        .as_array()
        .unwrap_or_else(|| panic!("no devices: {spec:#}"))
        .iter()
        .map(|d| d["name"].as_str().unwrap_or_else(|| panic!("no name: {d}")))
        .collect()
}
