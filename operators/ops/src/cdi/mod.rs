//! The CDI (Container Device Interface) model of the davinci devices, so that container
//! runtimes with CDI support (containerd, CRI-O, Podman, Docker) give a container a device by
//! name: `--device davinci.ai/npu=davinci0`, or `=all`. `davinci-smi cdi generate` writes the
//! spec; the device plugin's `--cdi` names devices in it.
//!
//! The spec ([`build()`]) has one device per davinci device, named `davinci<N>`
//! ([`crate::device_name`]), and `all` with every device:
//!
//! * a kernel device `/dev/davinciN`: `deviceNodes: [{path: /dev/davinciN}]` and the
//!   environment `DAVINCI_DEVICE=/dev/davinciN`;
//! * a `davinci-mockd` device `mock:SOCKET`: a bind mount of the socket at the same path
//!   (options `nosuid, nodev, rbind, rprivate, noexec`, as NVIDIA's toolkit mounts its IPC
//!   sockets: not read-only, `connect(2)` needs write permission) and
//!   `DAVINCI_DEVICE=mock:SOCKET`;
//! * `all`: every device's nodes and mounts, `DAVINCI_DEVICE` naming the first and
//!   `DAVINCI_VISIBLE_DEVICES` every device path, comma-separated.
//!
//! Each device carries the annotation `davinci.ai/device-path` (its path) and the spec
//! `davinci.ai/generated-by`; annotations are a CDI 0.6.0 field, so the spec declares
//! `cdiVersion: 0.6.0` ([`CDI_VERSION`]; the oldest version that has every field written
//! here, so older runtimes load it too), or 0.5.0 without them ([`CdiVersion`]).
//!
//! Before anything is written the spec is checked as upstream's Go library checks a spec it
//! loads ([`Spec::check`]); the tests also validate it against upstream's JSON schema
//! (vendored in `operators/ops/cdi-schema/`; the module `schema`, feature `cdi-schema`).
//!
//! The files: [`names`] (the constants and [`CdiVersion`]), [`spec`] (the spec's types and
//! their JSON and YAML), [`check`] (upstream's load-time checks and [`parse_kind`]),
//! [`builder`] (the spec of a set of devices), [`spec_file`] (the file format and the atomic
//! write).
#![forbid(unsafe_code)]

pub mod builder;
pub mod check;
pub mod names;
#[cfg(feature = "cdi-schema")]
pub mod schema;
pub mod spec;
pub mod spec_file;

pub use builder::{build, build_for};
pub use check::parse_kind;
pub use names::{
    CdiVersion, UnknownCdiVersion, ALL, CDI_VERSION, DEFAULT_KIND, DEVICE_ENV,
    GENERATOR_ANNOTATION, KNOWN_VERSIONS, PATH_ANNOTATION, SOCKET_MOUNT_OPTIONS, VISIBLE_ENV,
};
pub use spec::{ContainerEdits, Device, DeviceNode, Mount, Node, Spec, SpecDevice};
pub use spec_file::{choose_format, write_atomically, SpecFormat, UnknownSpecFormat, WriteError};

#[cfg(test)]
mod tests;
