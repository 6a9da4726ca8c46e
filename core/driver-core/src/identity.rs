//! What a device is (GET_IDENTITY) and how many engines run its tasks at once (GET_COUNTERS
//! `engines`): set by the host at start, the same for every open. A host without a UUID of
//! its own derives one with [`derive_uuid`] from what identifies the device on its host, so
//! the UUID survives share-mode changes, restarts and reboots, and two hosts deriving from
//! the same inputs agree.

use davinci_uapi::DeviceIdentity;

/// A device's identity and engine count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    /// What GET_IDENTITY reports.
    pub identity: DeviceIdentity,
    /// Engines that run tasks at once (at least 1): GET_COUNTERS `engines`.
    pub engines: u32,
}

impl Identity {
    /// Until the host says: a UUID derived from nothing but the name of the engine (the host
    /// sets its own at start), one engine, no NUMA node.
    pub const DEFAULT: Identity = Identity {
        identity: DeviceIdentity {
            uuid: derive_uuid(&[b"davinci-driver-core"]),
            model: [0; 32],
            driver_version: [0; 32],
            numa_node: -1,
            pad: 0,
            bus_id: [0; 16],
            pci_vendor: 0,
            pci_device: 0,
            chip_name: [0; 12],
        },
        engines: 1,
    };

    /// An identity: `uuid`, `model` and `driver` (printable ASCII; cut to 31 bytes), NUMA
    /// node `numa_node` (-1: unknown), `engines` engines (0 counts as 1).
    pub fn new(uuid: [u8; 16], model: &str, driver: &str, numa_node: i32, engines: u32) -> Self {
        Identity {
            identity: DeviceIdentity {
                uuid,
                model: DeviceIdentity::text_field(model),
                driver_version: DeviceIdentity::text_field(driver),
                numa_node,
                pad: 0,
                bus_id: [0; 16],
                pci_vendor: 0,
                pci_device: 0,
                chip_name: [0; 12],
            },
            engines: engines.max(1),
        }
    }

    /// This identity presenting as model `model` and chip `chip` (npu-smi's `Chip Name`; cut
    /// to 11 bytes), printable ASCII: what an operator configures so tooling that keys on a
    /// model sees the one it expects (`davinci-mockd --model --chip-name`).
    pub fn with_names(self, model: &str, chip: &str) -> Self {
        Identity {
            identity: DeviceIdentity {
                model: DeviceIdentity::text_field(model),
                chip_name: DeviceIdentity::text_field(chip),
                ..self.identity
            },
            ..self
        }
    }

    /// This identity on a PCI bus: its address `bus_id` (`DDDD:BB:DD.F`, as text; printable
    /// ASCII, cut to 15 bytes so a NUL ends it) and its PCI vendor and device ids, what
    /// GET_IDENTITY reports in `bus_id`, `pci_vendor` and `pci_device`. Without it (the
    /// software devices) the three are 0: on no bus.
    pub fn with_pci(self, bus_id: &str, vendor: u16, device: u16) -> Self {
        Identity {
            identity: DeviceIdentity {
                bus_id: DeviceIdentity::text_field(bus_id),
                pci_vendor: vendor,
                pci_device: device,
                ..self.identity
            },
            ..self
        }
    }
}

/// A UUID derived from `parts` (FNV-1a over 128 bits of every part, each followed by its
/// length so `["ab", "c"]` and `["a", "bc"]` differ), laid out as an RFC 9562 version 8
/// (custom) UUID. Not secret and not collision-proof against an adversary: it names a
/// device on a host, from inputs the host controls.
pub const fn derive_uuid(parts: &[&[u8]]) -> [u8; 16] {
    const OFFSET: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;
    let mut h = OFFSET;
    let mut p = 0;
    while p < parts.len() {
        let part = parts[p];
        let mut i = 0;
        while i < part.len() {
            h ^= part[i] as u128;
            h = h.wrapping_mul(PRIME);
            i += 1;
        }
        let len = (part.len() as u64).to_le_bytes();
        let mut j = 0;
        while j < len.len() {
            h ^= len[j] as u128;
            h = h.wrapping_mul(PRIME);
            j += 1;
        }
        p += 1;
    }
    let mut out = h.to_be_bytes();
    out[6] = (out[6] & 0x0f) | 0x80; // version 8
    out[8] = (out[8] & 0x3f) | 0x80; // RFC 9562 variant
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_uuids_are_version_8_and_depend_on_every_part() {
        let a = derive_uuid(&[b"host", b"0"]);
        assert_eq!(a, derive_uuid(&[b"host", b"0"]));
        assert_ne!(a, derive_uuid(&[b"host", b"1"]));
        assert_ne!(derive_uuid(&[b"ab", b"c"]), derive_uuid(&[b"a", b"bc"]));
        assert_eq!(a[6] >> 4, 8);
        assert_eq!(a[8] >> 6, 0b10);
    }

    #[test]
    fn an_identity_never_reports_zero_engines() {
        let id = Identity::new([1; 16], "m", "d 1.0", 0, 0);
        assert_eq!(id.engines, 1);
        assert_eq!(id.identity.model(), "m");
        assert_eq!(id.identity.driver_version(), "d 1.0");
        // A software device is on no bus.
        assert_eq!(id.identity.bus_id(), "");
        assert_eq!((id.identity.pci_vendor, id.identity.pci_device), (0, 0));
    }

    #[test]
    fn a_pci_identity_carries_its_address_and_ids_and_keeps_the_rest() {
        let base = Identity::new([1; 16], "m", "d 1.0", 0, 4);
        let id = base.with_pci("0000:00:04.0", 0x1af4, 0x1110);
        assert_eq!(id.identity.bus_id(), "0000:00:04.0");
        assert_eq!(
            (id.identity.pci_vendor, id.identity.pci_device),
            (0x1af4, 0x1110)
        );
        assert_eq!((id.identity.uuid, id.engines), ([1; 16], 4));
        assert_eq!(id.identity.model(), "m");
        // Too long for the field: cut so a NUL still ends it.
        let long = base.with_pci("0000:00:04.0-and-more", 1, 2);
        assert_eq!(long.identity.bus_id(), "0000:00:04.0-an");
    }
}
