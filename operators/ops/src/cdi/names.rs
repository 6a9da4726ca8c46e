//! The CDI words: the default kind, the versions, the environment variables a container
//! gets, the mount options of a socket, the annotations, and [`CdiVersion`], the versions a
//! spec may declare.
#![forbid(unsafe_code)]

use std::fmt;
use std::str::FromStr;

/// The kind written unless `--kind` says otherwise (and the device plugin's resource name).
pub const DEFAULT_KIND: &str = "davinci.ai/npu";

/// The newest `cdiVersion` written: 0.6.0 added annotations (and dots in the class of a
/// kind), the newest field this module writes; a runtime whose CDI library knows 0.6.0 or
/// later loads such a spec (upstream's library refuses a version it does not know, and a
/// field it does not know: Debian 12's podman 4.3 refuses the whole spec for `annotations`).
/// The default is [`CdiVersion::default`], 0.5.0, which every CDI runtime loads.
pub const CDI_VERSION: &str = "0.6.0";

/// The CDI versions upstream's library knows (`specs-go/version.go` at v1.1.0).
pub const KNOWN_VERSIONS: [&str; 10] = [
    "0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0",
];

/// The name of the device that has every device.
pub const ALL: &str = "all";

/// The environment variable naming the device a client opens (the shim's `DAVINCI_DEVICE`).
pub use davinci_shim::DEVICE_ENV;

/// The environment variable listing every device path of a container, comma-separated (set
/// by `all`; the device plugin sets the same).
pub const VISIBLE_ENV: &str = "DAVINCI_VISIBLE_DEVICES";

/// The mount options of a `davinci-mockd` socket: a private recursive bind mount, without
/// set-uid, device files or execution; writable, as connecting needs write permission.
pub const SOCKET_MOUNT_OPTIONS: [&str; 5] = ["nosuid", "nodev", "rbind", "rprivate", "noexec"];

/// Device annotation: the device path, as `DAVINCI_DEVICE` takes it.
pub const PATH_ANNOTATION: &str = "davinci.ai/device-path";

/// Spec annotation: what wrote the spec.
pub const GENERATOR_ANNOTATION: &str = "davinci.ai/generated-by";

/// The `cdiVersion` a spec declares (`davinci-smi cdi generate --cdi-version`); 0.5.0 unless
/// told otherwise, the version every CDI runtime in use loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CdiVersion {
    /// 0.5.0: without annotations (the default).
    #[default]
    V0_5_0,
    /// 0.6.0: with annotations.
    V0_6_0,
}

impl CdiVersion {
    /// Every version, oldest first.
    pub const ALL: [CdiVersion; 2] = [CdiVersion::V0_5_0, CdiVersion::V0_6_0];

    /// `"0.5.0"` or `"0.6.0"`.
    pub fn as_str(self) -> &'static str {
        match self {
            CdiVersion::V0_5_0 => "0.5.0",
            CdiVersion::V0_6_0 => CDI_VERSION,
        }
    }

    /// What a spec of this version is for, for `--help`.
    pub fn help(self) -> &'static str {
        match self {
            CdiVersion::V0_5_0 => {
                "0.5.0 (default): without annotations; every CDI runtime loads it, those whose \
                 CDI library predates 0.6.0 too (Debian 12's podman 4.3, library 0.5.2); a \
                 kind whose class has a dot needs 0.6.0"
            }
            CdiVersion::V0_6_0 => {
                "0.6.0: with annotations (which device path each entry came from, what \
                 generated it); a runtime whose CDI library predates 0.6.0 refuses the whole \
                 spec (podman 4.3: \"unresolvable CDI devices\"; at debug level: unknown \
                 field \"annotations\")"
            }
        }
    }
}

impl fmt::Display for CdiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// A `cdiVersion` that is not one of [`CdiVersion::ALL`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownCdiVersion;

impl fmt::Display for UnknownCdiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("expected 0.5.0 or 0.6.0")
    }
}

impl std::error::Error for UnknownCdiVersion {}

impl FromStr for CdiVersion {
    type Err = UnknownCdiVersion;

    /// `0.5.0` or `0.6.0`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CdiVersion::ALL
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or(UnknownCdiVersion)
    }
}
