//! What a device is, in `<stdint.h>` types: `davinci_device_props`, GET_INFO's fields as
//! `uint16_t`/`uint32_t`/`uint64_t`, so that `PRIu64` prints them (uapi.h's
//! `struct davinci_device_info` has the kernel's `__u64`, `unsigned long long` on every Linux,
//! which is not `uint64_t` on 64-bit Linux: `PRIu64` on it fails `-Wformat`). Its entry
//! points, `davinci_device_get_info` and `_query_info`, are in `device.rs`.

use davinci_shim::DeviceInfo;

/// The device's GET_INFO (`struct davinci_device_info` of `<davinci/uapi.h>`, field for
/// field, same layout) in `<stdint.h>` types: print them with `PRIu16`/`PRIu32`/`PRIu64`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct davinci_device_props {
    /// ABI major version of the driver. A client refuses another major.
    pub abi_major: u16,
    /// ABI minor version of the driver.
    pub abi_minor: u16,
    /// `DAVINCI_FEAT_*` bits.
    pub features: u32,
    /// Device index N of /dev/davinciN.
    pub device_id: u32,
    /// Page size of mappings.
    pub page_size: u32,
    /// Total device memory in bytes.
    pub memory_size: u64,
    /// Device memory allocated by all clients.
    pub memory_used: u64,
    /// Device memory one client may hold now, in bytes: the operator's limit, or without
    /// one (since 1.4) a quarter of `memory_size` while the device is shared and all of
    /// it while it is exclusive.
    pub client_memory_limit: u64,
    /// Most clients attached at once.
    pub max_clients: u32,
    /// Most contexts on the device.
    pub max_contexts: u32,
    /// Most streams on the device.
    pub max_streams: u32,
    /// Most events on the device.
    pub max_events: u32,
    /// Most allocations on the device.
    pub max_allocations: u32,
    /// Deepest command ring.
    pub max_cmd_entries: u32,
    /// Deepest event ring.
    pub max_event_entries: u32,
    /// Alignment of every allocation's device address and size.
    pub mem_align: u32,
    /// `DAVINCI_SHARE_*` mode now in force.
    pub share_mode: u32,
    /// Clients attached now.
    pub clients: u32,
    /// The caller's own client id, as LIST_CLIENTS reports it in `client_id` (0 for a
    /// control open, which is not a client); valid with `DAVINCI_FEAT_CALLER_ID`. ABI 1.1.
    /// The code calls it the caller's `client_id` (`davinci_device_client_id`).
    pub caller_id: u32,
    /// Bit `n` set: opcode `n` (`DAVINCI_OP_*`) runs on this device; a descriptor with
    /// another opcode fails with `EBADMSG`. Valid with `DAVINCI_FEAT_OPCODE_MASK`
    ///. ABI 1.1.
    pub opcodes: u32,
    /// Most contexts the caller's tenant (its container, else its user) may hold at once
    /// now: the tenant's share while the device is shared, `max_contexts` while it is exclusive. Valid with
    /// `DAVINCI_FEAT_QUOTAS`. ABI 1.4.
    pub quota_contexts: u32,
    /// Most streams the caller may hold at once now (as `quota_contexts`).
    /// ABI 1.4.
    pub quota_streams: u32,
    /// Most events the caller may hold at once now (as `quota_contexts`).
    /// ABI 1.4.
    pub quota_events: u32,
    /// Most allocations the caller may hold at once now (as `quota_contexts`)
    ///. ABI 1.4.
    pub quota_allocations: u32,
    /// With `DAVINCI_FEAT_DOORBELL_MMIO`: the byte offset of the doorbell register in
    /// the stream's mapped doorbell page (4-byte aligned, the register inside the page);
    /// 0 without it. ABI 1.4.
    pub doorbell_offset: u32,
    /// With `DAVINCI_FEAT_DOORBELL_MMIO`: the value the client stores into the doorbell
    /// register to ring it, the same for every ring (not the command ring's tail); 0
    /// without it. ABI 1.4.
    pub doorbell_value: u32,
}

impl From<&DeviceInfo> for davinci_device_props {
    fn from(i: &DeviceInfo) -> Self {
        davinci_device_props {
            abi_major: i.abi_major,
            abi_minor: i.abi_minor,
            features: i.features.bits(),
            device_id: i.device_id,
            page_size: i.page_size,
            memory_size: i.memory_size,
            memory_used: i.memory_used,
            client_memory_limit: i.client_memory_limit,
            max_clients: i.max_clients,
            max_contexts: i.max_contexts,
            max_streams: i.max_streams,
            max_events: i.max_events,
            max_allocations: i.max_allocations,
            max_cmd_entries: i.max_cmd_entries,
            max_event_entries: i.max_event_entries,
            mem_align: i.mem_align,
            share_mode: i.share_mode,
            clients: i.clients,
            caller_id: i.caller_id,
            opcodes: i.opcodes,
            quota_contexts: i.quota_contexts,
            quota_streams: i.quota_streams,
            quota_events: i.quota_events,
            quota_allocations: i.quota_allocations,
            doorbell_offset: i.doorbell_offset,
            doorbell_value: i.doorbell_value,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A field added to GET_INFO must be added here too: the layouts stay the same.
    #[test]
    fn props_mirror_the_abi_struct() {
        assert_eq!(size_of::<davinci_device_props>(), size_of::<DeviceInfo>());
        assert_eq!(align_of::<davinci_device_props>(), align_of::<DeviceInfo>());
        let i = DeviceInfo {
            memory_size: 1 << 40,
            doorbell_value: 7,
            ..DeviceInfo::default()
        };
        let p = davinci_device_props::from(&i);
        assert_eq!((p.memory_size, p.doorbell_value), (1 << 40, 7));
    }
}
