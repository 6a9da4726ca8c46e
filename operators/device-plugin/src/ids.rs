//! The device IDs the plugin advertises to the kubelet.
//!
//! A device in exclusive mode is advertised once, as `davinci<N>`. A device in shared mode
//! is advertised as R replicas (`--replicas R`), `davinci<N>::0` .. `davinci<N>::<R-1>`,
//! so that R containers can be given the same device, as NVIDIA's time-slicing and HAMi do.
//! Every ID is at most 63 characters, as the kubelet requires.
//!
//! Those are the index's names. A device that reports its UUID (ABI 1.4) is advertised
//! under it instead ([`IdScheme::Uuid`], the default): `UUID::0` when exclusive, `UUID::0` ..
//! `UUID::<R-1>` when shared (`crate::inventory::DeviceState::id_string`), so an ID a pod
//! holds survives a change of sharing mode or a daemon restart.
#![forbid(unsafe_code)]

use std::fmt;

use davinci_uapi::ShareMode;

/// What the IDs are named after (`--device-ids`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum IdScheme {
    /// `UUID::k` from the device's UUID (GET_IDENTITY, ABI 1.4): the same IDs across sharing
    /// mode changes, daemon restarts and index changes; a device without a UUID gets the
    /// index's names
    #[default]
    Uuid,
    /// `davinci<N>` / `davinci<N>::<k>` from the device's index (the names before ABI 1.4):
    /// they change with the sharing mode
    Index,
}

/// Most replicas a shared device may be advertised as.
pub const MAX_REPLICAS: u32 = 256;

/// One advertised ID: a device, and for a shared device which replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId {
    /// N of davinciN.
    pub device: u32,
    /// The replica of a shared device; `None` for a device advertised once.
    pub replica: Option<u32>,
}

impl DeviceId {
    /// `davinci<N>`: the whole device.
    pub const fn whole(device: u32) -> DeviceId {
        DeviceId {
            device,
            replica: None,
        }
    }

    /// `davinci<N>::<k>`: replica `k` of a shared device.
    pub const fn replica(device: u32, k: u32) -> DeviceId {
        DeviceId {
            device,
            replica: Some(k),
        }
    }

    /// Parses `davinci<N>` or `davinci<N>::<k>` in the form [`Display`](fmt::Display)
    /// writes (no sign, no leading zeros, no spaces); `None` for anything else.
    pub fn parse(s: &str) -> Option<DeviceId> {
        fn number(d: &str) -> Option<u32> {
            if d.is_empty() || !d.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            if d.len() > 1 && d.starts_with('0') {
                return None;
            }
            d.parse().ok()
        }
        let rest = s.strip_prefix("davinci")?;
        match rest.split_once("::") {
            Some((n, k)) => Some(DeviceId::replica(number(n)?, number(k)?)),
            None => Some(DeviceId::whole(number(rest)?)),
        }
    }
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.replica {
            None => write!(f, "davinci{}", self.device),
            Some(k) => write!(f, "davinci{}::{k}", self.device),
        }
    }
}

/// `davinci<N>`: the name of device N in logs, IDs and CDI names (every tool's).
pub use davinci_ops::device_name;

/// How many IDs a device in `mode` is advertised as.
pub fn replica_count(mode: ShareMode, replicas: u32) -> u32 {
    match mode {
        ShareMode::Exclusive => 1,
        ShareMode::Shared => replicas,
    }
}

/// The IDs device `device` is advertised as in `mode`, in order: `davinci<N>` when
/// exclusive, `davinci<N>::0` .. `davinci<N>::<replicas-1>` when shared.
pub fn advertised_ids(device: u32, mode: ShareMode, replicas: u32) -> Vec<DeviceId> {
    match mode {
        ShareMode::Exclusive => vec![DeviceId::whole(device)],
        ShareMode::Shared => (0..replicas)
            .map(|k| DeviceId::replica(device, k))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_named_per_mode_and_round_trip() {
        assert_eq!(
            advertised_ids(0, ShareMode::Exclusive, 4)
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["davinci0"]
        );
        let shared: Vec<String> = advertised_ids(3, ShareMode::Shared, 4)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            shared,
            ["davinci3::0", "davinci3::1", "davinci3::2", "davinci3::3"]
        );
        assert_eq!(replica_count(ShareMode::Shared, 7), 7);
        assert_eq!(replica_count(ShareMode::Exclusive, 7), 1);
        for id in ["davinci0", "davinci12", "davinci3::0", "davinci3::255"] {
            let parsed = DeviceId::parse(id).unwrap();
            assert_eq!(parsed.to_string(), id);
        }
        assert_eq!(
            DeviceId::parse("davinci3::2"),
            Some(DeviceId::replica(3, 2))
        );
        assert_eq!(DeviceId::parse("davinci7"), Some(DeviceId::whole(7)));
    }

    #[test]
    fn anything_not_written_by_the_plugin_does_not_parse() {
        for bad in [
            "",
            "davinci",
            "davinci01",
            "davinci1::01",
            "davinci-1",
            "davinci+1",
            "davinci1::",
            "davinci::1",
            "davinci1:1",
            "davinci1::1::2",
            "Davinci1",
            " davinci1",
            "davinci1 ",
            "davinci99999999999",
            "gpu0",
        ] {
            assert_eq!(DeviceId::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_longest_id_fits_the_kubelets_limit() {
        let id = DeviceId::replica(u32::MAX, MAX_REPLICAS - 1).to_string();
        assert!(id.len() <= 63, "{id}");
    }
}
