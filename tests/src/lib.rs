//! Cross-crate integration and conformance tests, run against every device backend.
//!
//! The tests build their devices with [`open_backend`], named by `DAVINCI_TEST_BACKEND`
//! (default `embedded`, the in-process mock device; `mockd`: a fresh device of a
//! `davinci-mockd` process started for the test run, see [`mockd`]; or any device path), so
//! the same assertions run against each. [`model`] (from
//! `davinci-workload`) holds the CPU reference the results are checked against; [`workload`]
//! the workload itself.
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod descs;
pub mod hoard;
pub mod ipc;
pub mod mockd;
pub mod raw;
pub use davinci_workload::model;
pub use davinci_workload::run as workload;

use davinci_shim::{Device, MockConfig, Result};

/// The backend the tests run against: `DAVINCI_TEST_BACKEND`, default `"embedded"`.
pub fn backend_name() -> String {
    std::env::var("DAVINCI_TEST_BACKEND").unwrap_or_else(|_| "embedded".to_string())
}

/// Opens a device on the backend `name`: `"embedded"` (a new in-process mock device with
/// `config`), or a device path for the others (`/dev/davinciN`, `mock:SOCKET`), where
/// `config` does not apply.
pub fn open_backend(name: &str, config: MockConfig) -> Result<Device> {
    match name {
        "embedded" => Device::embedded_with(config),
        "mockd" => {
            Device::open(&mockd::next_device().map_err(|e| davinci_shim::Error::other("open", e))?)
        }
        path => Device::open(path),
    }
}

/// A device on the configured backend with the default configuration.
pub fn open_default() -> Result<Device> {
    open_backend(&backend_name(), MockConfig::default())
}

/// A control (operator) open of the same device as `dev`, as `davinci-smi` would make.
pub fn control_of(dev: &Device) -> Result<davinci_shim::Control> {
    match dev.mock_device() {
        Some(mock) => davinci_shim::Control::attach(mock),
        None if backend_name() == "mockd" => davinci_shim::Control::open(
            &mockd::shared_path(dev.info().device_id)
                .map_err(|e| davinci_shim::Error::other("open", e))?,
        ),
        None => davinci_shim::Control::open(&backend_name()),
    }
}

/// A client of the same device as `dev` that is another *tenant* (docs/security.md,
/// "Tenants": the quotas bind a tenant, and this process's clients are all one): on the
/// embedded backend a client of user `uid`; `None` elsewhere, where a tenant is another user
/// or container, which takes another process (the noisy-neighbour suite runs those), with
/// the reason said on stderr.
pub fn other_tenant(dev: &Device, uid: u32) -> Option<Device> {
    match dev.mock_device() {
        Some(mock) => Some(Device::attach_as_user(mock, uid).expect("another user's client")),
        None => {
            eprintln!(
                "{}: another tenant takes another user's process here; this test checks only \
                 what one tenant sees",
                backend_name()
            );
            None
        }
    }
}

/// A second client of the same device as `dev` (for isolation tests): on the embedded
/// backend another open of the same in-process device; elsewhere another open of the path.
pub fn second_client(dev: &Device) -> Result<Device> {
    match dev.mock_device() {
        Some(mock) => Device::attach(mock),
        None if backend_name() == "mockd" => Device::open(
            &mockd::shared_path(dev.info().device_id)
                .map_err(|e| davinci_shim::Error::other("open", e))?,
        ),
        None => Device::open(&backend_name()),
    }
}
