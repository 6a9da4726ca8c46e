//! Golden values: every ioctl request number and every struct size, pinned in hex. A change
//! here is an ABI break (bump `ABI_VERSION_MAJOR`) or a new command (bump the minor).

use davinci_uapi::*;

#[test]
fn ioctl_request_numbers() {
    assert_eq!(DRIVER_CMD_CREATE_CONTEXT, 0xC010_6401);
    assert_eq!(DRIVER_CMD_DESTROY_CONTEXT, 0x4008_6402);
    assert_eq!(DRIVER_CMD_SUBMIT_TASK, 0xC050_6403);
    assert_eq!(DRIVER_CMD_ALLOC_MEMORY, 0xC028_6404);
    assert_eq!(DRIVER_CMD_FREE_MEMORY, 0x4008_6405);
    assert_eq!(DRIVER_CMD_WAIT_EVENT, 0xC028_6406);
    assert_eq!(DRIVER_CMD_CREATE_STREAM, 0xC0B8_6407);
    assert_eq!(DRIVER_CMD_DESTROY_STREAM, 0x4008_6408);
    assert_eq!(DRIVER_CMD_GET_INFO, 0x8070_6409);
    assert_eq!(DRIVER_CMD_QUERY_DEVICE_SHARE, 0x8010_640A);
    assert_eq!(DRIVER_CMD_SET_DEVICE_SHARE, 0x4010_640B);
    assert_eq!(DRIVER_CMD_LIST_CLIENTS, 0xC018_640C);
    assert_eq!(DRIVER_CMD_CREATE_EVENT, 0xC010_640D);
    assert_eq!(DRIVER_CMD_DESTROY_EVENT, 0x4008_640E);
    assert_eq!(DRIVER_CMD_NOTIFY, 0x4008_640F);
    assert_eq!(DRIVER_CMD_GET_LAST_ERROR, 0x8080_6410);
    assert_eq!(DRIVER_CMD_GET_COUNTERS, 0x8058_6411);
    assert_eq!(DRIVER_CMD_EXPORT_MEMORY, 0xC018_6412);
    assert_eq!(DRIVER_CMD_IMPORT_MEMORY, 0xC028_6413);
    assert_eq!(DRIVER_CMD_GET_IDENTITY, 0x8078_6414);
    assert_eq!(DRIVER_CMD_GET_USAGE, 0x8060_6415);
    assert_eq!(DRIVER_CMD_TENANT_SHARE, 0xC060_6416);
    assert_eq!(DRIVER_CMD_LIST_KERNELS, 0xC018_6417);
    assert_eq!(DRIVER_CMD_EXPORT_EVENT, 0xC018_6419);
    assert_eq!(DRIVER_CMD_IMPORT_EVENT, 0xC018_641A);
    assert_eq!(DRIVER_CMD_EXPORT_RANGE, 0xC028_641B);
    assert_eq!(DRIVER_CMD_UNEXPORT_MEMORY, 0xC020_641C);
    assert_eq!(DRIVER_CMD_GET_SENSORS, 0x8040_641D);
    assert_eq!(DRIVER_CMD_TRACE, 0xC038_641E);
    assert_eq!(DRIVER_CMD_READ_EVENTS, 0xC030_641F);
    assert_eq!(RESERVED_NRS, [0x18]);
    assert_eq!(
        COMMANDS.len(),
        30,
        "a new command needs a golden value here"
    );
}

#[test]
fn struct_sizes() {
    let expect: &[(&str, usize)] = &[
        ("davinci_ring_header", 0xC0),
        ("davinci_ring_offsets", 0x28),
        ("davinci_ring_mapping", 0x40),
        ("davinci_task_desc", 0x40),
        ("davinci_event_record", 0x20),
        ("davinci_handle_args", 0x08),
        ("davinci_create_context_args", 0x10),
        ("davinci_submit_task_args", 0x50),
        ("davinci_alloc_memory_args", 0x28),
        ("davinci_wait_event_args", 0x28),
        ("davinci_create_stream_args", 0xB8),
        ("davinci_create_event_args", 0x10),
        ("davinci_device_info", 0x70),
        ("davinci_device_share_args", 0x10),
        ("davinci_list_clients_args", 0x18),
        ("davinci_client_usage", 0xA0),
        ("davinci_last_error", 0x80),
        ("davinci_device_counters", 0x58),
        ("davinci_export_memory_args", 0x18),
        ("davinci_import_memory_args", 0x28),
        ("davinci_export_event_args", 0x18),
        ("davinci_import_event_args", 0x18),
        ("davinci_export_range_args", 0x28),
        ("davinci_unexport_memory_args", 0x20),
        ("davinci_device_identity", 0x78),
        ("davinci_usage", 0x60),
        ("davinci_device_sensors", 0x40),
        ("davinci_trace_args", 0x38),
        ("davinci_trace_record", 0x38),
        ("davinci_read_events_args", 0x30),
        ("davinci_device_event", 0x30),
        ("davinci_tenant_share_args", 0x60),
        ("davinci_list_kernels_args", 0x18),
        ("davinci_kernel_info", 0x48),
        ("davinci_gemm_params", 0x80),
        ("davinci_elementwise_params", 0xB0),
        ("davinci_reduce_params", 0x90),
        ("davinci_softmax_params", 0x40),
        ("davinci_norm_params", 0x60),
    ];
    assert_eq!(STRUCTS.len(), expect.len());
    for (info, (name, size)) in STRUCTS.iter().zip(expect) {
        assert_eq!(info.c_name, *name);
        assert_eq!(info.size, *size, "{name}");
    }
}

/// The fields 1.4 gave meanings to inside structs whose size did not change: pinned by
/// offset, so a field that moves (or a reserved word that shrinks) is caught here.
#[test]
fn field_offsets_of_1_4_fields() {
    let offsets = |c_name: &str| -> Vec<(&'static str, usize, usize)> {
        STRUCTS
            .iter()
            .find(|s| s.c_name == c_name)
            .map(|s| {
                s.fields
                    .iter()
                    .map(|f| (f.name, f.offset, f.size))
                    .collect()
            })
            .unwrap_or_default()
    };
    let info = offsets("davinci_device_info");
    assert_eq!(
        info[info.len() - 2..],
        [("doorbell_offset", 0x68, 4), ("doorbell_value", 0x6c, 4)]
    );
    let id = offsets("davinci_device_identity");
    assert_eq!(
        id[id.len() - 4..],
        [
            ("bus_id", 0x58, 16),
            ("pci_vendor", 0x68, 2),
            ("pci_device", 0x6a, 2),
            ("chip_name", 0x6c, 12)
        ]
    );
    assert_eq!(
        core::mem::offset_of!(DeviceInfo, doorbell_value),
        0x6c,
        "the Rust struct agrees"
    );
    assert_eq!(core::mem::offset_of!(DeviceIdentity, pci_device), 0x6a);
}

/// GET_SENSORS' struct (ABI 1.5), pinned field by field.
#[test]
fn sensors_layout_1_5() {
    let s = STRUCTS
        .iter()
        .find(|s| s.c_name == "davinci_device_sensors")
        .expect("davinci_device_sensors");
    let fields: Vec<(&str, usize)> = s.fields.iter().map(|f| (f.name, f.offset)).collect();
    assert_eq!(
        fields,
        [
            ("temperature_mc", 0x00),
            ("memory_temperature_mc", 0x04),
            ("power_mw", 0x08),
            ("power_limit_mw", 0x0c),
            ("voltage_mv", 0x10),
            ("throttle", 0x14),
            ("slowdown_temperature_mc", 0x18),
            ("shutdown_temperature_mc", 0x1c),
            ("energy_mj", 0x20),
            ("now_ns", 0x28),
            ("pcie_link_gen", 0x30),
            ("pcie_link_width", 0x32),
            ("pcie_link_gen_max", 0x34),
            ("pcie_link_width_max", 0x36),
            ("reserved", 0x38),
        ]
    );
    let s = DeviceSensors {
        temperature_mc: 38_500,
        memory_temperature_mc: -1_500,
        ..DeviceSensors::default()
    };
    assert_eq!((s.temperature_c(), s.memory_temperature_c()), (39, -2));
}

/// TRACE's and READ_EVENTS' structs (ABI 1.5), pinned field by field.
#[test]
fn observe_layouts_1_5() {
    let offsets = |name: &str| -> Vec<(&'static str, usize)> {
        let s = STRUCTS
            .iter()
            .find(|s| s.c_name == name)
            .unwrap_or_else(|| panic!("{name}"));
        s.fields.iter().map(|f| (f.name, f.offset)).collect()
    };
    assert_eq!(
        offsets("davinci_trace_args"),
        [
            ("buf", 0x00),
            ("capacity", 0x08),
            ("count", 0x0c),
            ("entry_size", 0x10),
            ("op", 0x14),
            ("scope", 0x18),
            ("pad", 0x1c),
            ("cursor", 0x20),
            ("lost", 0x28),
            ("now_ns", 0x30),
        ]
    );
    assert_eq!(
        offsets("davinci_trace_record"),
        [
            ("seq", 0x00),
            ("user_data", 0x08),
            ("start_ns", 0x10),
            ("end_ns", 0x18),
            ("client_id", 0x20),
            ("stream", 0x24),
            ("index", 0x28),
            ("status", 0x2c),
            ("opcode", 0x30),
            ("kind", 0x31),
            ("chunk", 0x32),
            ("tasks", 0x34),
        ]
    );
    assert_eq!(
        offsets("davinci_read_events_args"),
        [
            ("buf", 0x00),
            ("capacity", 0x08),
            ("count", 0x0c),
            ("entry_size", 0x10),
            ("pad", 0x14),
            ("cursor", 0x18),
            ("lost", 0x20),
            ("now_ns", 0x28),
        ]
    );
    assert_eq!(
        offsets("davinci_device_event"),
        [
            ("seq", 0x00),
            ("time_ns", 0x08),
            ("code", 0x10),
            ("client_id", 0x14),
            ("pid", 0x18),
            ("uid", 0x1c),
            ("stream", 0x20),
            ("detail", 0x24),
            ("value", 0x28),
        ]
    );
}

/// GET_USAGE's struct (ABI 1.5), pinned field by field.
#[test]
fn usage_layout_1_5() {
    let s = STRUCTS
        .iter()
        .find(|s| s.c_name == "davinci_usage")
        .expect("davinci_usage");
    let fields: Vec<(&str, usize)> = s.fields.iter().map(|f| (f.name, f.offset)).collect();
    assert_eq!(
        fields,
        [
            ("memory_bytes", 0x00),
            ("memory_limit", 0x08),
            ("contexts", 0x10),
            ("quota_contexts", 0x14),
            ("streams", 0x18),
            ("quota_streams", 0x1c),
            ("events", 0x20),
            ("quota_events", 0x24),
            ("allocations", 0x28),
            ("quota_allocations", 0x2c),
            ("exports", 0x30),
            ("quota_exports", 0x34),
            ("share_mode", 0x38),
            ("client_id", 0x3c),
            ("tenant_memory_bytes", 0x40),
            ("tenant_contexts", 0x48),
            ("tenant_streams", 0x4c),
            ("tenant_events", 0x50),
            ("tenant_allocations", 0x54),
            ("tenant_exports", 0x58),
            ("tenant_flags", 0x5c),
        ]
    );
    assert_eq!(Features::USAGE.bits(), 1 << 15);
    assert_eq!(Features::TENANT_SHARE.bits(), 1 << 16);
    assert_eq!(Features::EXPORT_FD.bits(), 1 << 17);
    assert_eq!(
        (EXPORT_FLAG_FD, IMPORT_FLAG_FD),
        (1, 1),
        "the export and import fd flags"
    );
    assert_eq!(
        (TENANT_USER, TENANT_CONTAINER, TENANT_SLOTTED),
        (1, 2, 4),
        "the tenant values"
    );
    let c = STRUCTS
        .iter()
        .find(|s| s.c_name == "davinci_client_usage")
        .expect("davinci_client_usage");
    let kind = c.fields.iter().find(|f| f.name == "tenant_kind");
    assert_eq!(
        kind.map(|f| f.offset),
        Some(0x0c),
        "LIST_CLIENTS' tenant_kind"
    );
}

#[test]
fn abi_version() {
    assert_eq!((ABI_VERSION_MAJOR, ABI_VERSION_MINOR), (1, 5));
    assert!(abi_compatible(1));
    assert!(!abi_compatible(2));
}

#[test]
fn every_struct_is_8_byte_aligned_or_smaller_and_padded_explicitly() {
    for s in STRUCTS {
        let sum: usize = s.fields.iter().map(|f| f.size).sum();
        assert_eq!(sum, s.size, "{} has implicit padding", s.c_name);
        // Fields are contiguous and in order.
        let mut at = 0;
        for f in s.fields {
            assert_eq!(f.offset, at, "{}.{}", s.c_name, f.name);
            at += f.size;
        }
        // u64 fields are naturally aligned, so i386 and x86_64 agree.
        for f in s.fields {
            if f.ty == "u64" {
                assert_eq!(f.offset % 8, 0, "{}.{} misaligned", s.c_name, f.name);
            }
        }
    }
}

#[test]
fn wire_codec_matches_memory_layout() {
    use zerocopy::IntoBytes;
    let mut d = TaskDesc::add(
        0x1122_3344_5566_7788,
        Dtype::F32,
        DevAddr(0x10),
        DevAddr(0x20),
        DevAddr(0x30),
        0x40,
    );
    // Addresses land in their named fields, destination first.
    assert_eq!((d.dst, d.src0, d.src1, d.len), (0x10, 0x20, 0x30, 0x40));
    assert_eq!(DevAddr(0x10) + 0x20, DevAddr(0x30));
    assert_eq!(DevAddr(0x1f).to_string(), "0x1f");
    d.handle = 0xdead_beef;
    let mut buf = [0u8; 64];
    d.encode(&mut buf);
    assert_eq!(&buf[..], d.as_bytes());
    assert_eq!(TaskDesc::from_bytes(&buf), Some(d));
    assert_eq!(TaskDesc::from_bytes(&buf[..63]), None);

    let mut a = CreateStreamArgs {
        reserved: [0, 9],
        ..Default::default()
    };
    a.cmd_ring.offsets.slot_size = 64;
    a.event_ring.mmap_offset = 7;
    let mut b = [0u8; core::mem::size_of::<CreateStreamArgs>()];
    a.encode(&mut b);
    assert_eq!(&b[..], a.as_bytes());
    assert_eq!(CreateStreamArgs::decode(&b), a);

    let mut h = RingHeader {
        flags: RingFlags::NEED_WAKEUP | RingFlags::ERROR,
        ..Default::default()
    };
    h.pad_tail[59] = 1;
    let mut hb = [0u8; 192];
    h.encode(&mut hb);
    assert_eq!(&hb[..], h.as_bytes());
}

#[test]
fn client_usage_names_its_container_and_itself() {
    use davinci_uapi::ClientUsage;
    let mut u = ClientUsage {
        pid: 42,
        uid: 1000,
        ..ClientUsage::default()
    };
    assert_eq!(u.container_id(), None);
    assert_eq!(u.to_string(), "pid 42 (uid 1000, no container)");
    u.container = ClientUsage::container_field("abcd");
    assert_eq!(u.container_id(), Some("abcd"));
    assert_eq!(u.to_string(), "pid 42 (uid 1000, container abcd)");
    // A full field has no NUL; bytes that are not UTF-8 end the id.
    u.container = [b'x'; 64];
    assert_eq!(u.container_id().map(str::len), Some(64));
    u.container[3] = 0xff;
    assert_eq!(u.container_id(), Some("xxx"));
    u.container[0] = 0xff;
    assert_eq!(u.container_id(), None);
    assert_eq!(ClientUsage::container_field(&"y".repeat(70)), [b'y'; 64]);
}

#[test]
fn device_identity_prints_its_uuid_and_names() {
    let mut id = DeviceIdentity {
        uuid: [
            0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0x8d, 0xef, 0x80, 0x01, 0x02, 0x03, 0x04, 0x05,
            0x06, 0xff,
        ],
        model: DeviceIdentity::text_field("davinci mock"),
        driver_version: DeviceIdentity::text_field("davinci-mockd 0.1.0\n\x1b[2J"),
        numa_node: -1,
        ..DeviceIdentity::default()
    };
    assert_eq!(
        id.uuid_string().as_str(),
        "12345678-9abc-8def-8001-0203040506ff"
    );
    assert_eq!(format!("{}", id.uuid_string()), id.uuid_string().as_str());
    assert_eq!(id.model(), "davinci mock");
    // Control characters never reach a field; a long text is cut so a NUL ends it.
    assert_eq!(id.driver_version(), "davinci-mockd 0.1.0??[2J");
    id.model = DeviceIdentity::text_field(&"m".repeat(40));
    assert_eq!(id.model(), "m".repeat(31));
    // A driver that wrote a control byte: the name ends there.
    id.model[2] = 0x1b;
    assert_eq!(id.model(), "mm");
    // No bus: all zero, an empty bus id; a PCI address reads back as written.
    assert_eq!(id.bus_id(), "");
    id.bus_id = DeviceIdentity::text_field("0000:00:04.0");
    assert_eq!(id.bus_id(), "0000:00:04.0");
    assert_eq!(id.bus_id[12..], [0; 4]);
    assert_eq!(health_name(HEALTH_WARNING), Some("Warning"));
    assert_eq!(health_name(7), None);
}

/// The one table of what undoes a create (preload, driver-core and the module follow it).
#[test]
fn every_create_but_export_has_its_undo() {
    fn reply<T: Wire>(args: &T) -> Vec<u8> {
        let mut b = vec![0u8; T::SIZE];
        args.encode(&mut b);
        b
    }
    let cases = [
        (
            DRIVER_CMD_CREATE_CONTEXT,
            reply(&CreateContextArgs {
                handle: 11,
                ..Default::default()
            }),
            DRIVER_CMD_DESTROY_CONTEXT,
        ),
        (
            DRIVER_CMD_CREATE_STREAM,
            reply(&CreateStreamArgs {
                handle: 12,
                ..Default::default()
            }),
            DRIVER_CMD_DESTROY_STREAM,
        ),
        (
            DRIVER_CMD_CREATE_EVENT,
            reply(&CreateEventArgs {
                handle: 13,
                ..Default::default()
            }),
            DRIVER_CMD_DESTROY_EVENT,
        ),
        (
            DRIVER_CMD_ALLOC_MEMORY,
            reply(&AllocMemoryArgs {
                handle: 14,
                ..Default::default()
            }),
            DRIVER_CMD_FREE_MEMORY,
        ),
        (
            DRIVER_CMD_IMPORT_MEMORY,
            reply(&ImportMemoryArgs {
                handle: 15,
                ..Default::default()
            }),
            DRIVER_CMD_FREE_MEMORY,
        ),
        (
            DRIVER_CMD_IMPORT_EVENT,
            reply(&ImportEventArgs {
                handle: 16,
                ..Default::default()
            }),
            DRIVER_CMD_DESTROY_EVENT,
        ),
    ];
    for (i, (create, bytes, undo)) in cases.iter().enumerate() {
        assert_eq!(undo_of(*create, bytes), Some((*undo, 11 + i as u32)));
        // A short reply, or one with no handle, names nothing to undo.
        assert_eq!(undo_of(*create, &bytes[..bytes.len() - 1]), None);
        assert_eq!(undo_of(*create, &vec![0u8; bytes.len()]), None);
    }
    let export = ExportMemoryArgs {
        handle: 3,
        token: 9,
        ..Default::default()
    };
    assert_eq!(undo_of(DRIVER_CMD_EXPORT_MEMORY, &reply(&export)), None);
    assert_eq!(undo_of(DRIVER_CMD_WAIT_EVENT, &[0u8; 40]), None);
}

/// The kernels' ABI (1.5): ids, dtypes, fault values and the parameter blocks' fields, pinned.
#[test]
fn kernels_1_5() {
    let ids: Vec<u32> = davinci_uapi::KernelId::ALL
        .iter()
        .map(|k| *k as u32)
        .collect();
    assert_eq!(ids, [1, 2, 3, 4, 5]);
    let dtypes: Vec<u8> = Dtype::ALL.iter().map(|d| *d as u8).collect();
    assert_eq!(dtypes, [0, 1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(Features::KERNELS.bits(), 1 << 18);
    assert_eq!(Features::DTYPES.bits(), 1 << 19);
    assert_eq!(Features::SHARED_EVENTS.bits(), 1 << 20);
    assert_eq!(Features::EXPORT_LEASE.bits(), 1 << 21);
    assert_eq!(Features::SENSORS.bits(), 1 << 22);
    assert_eq!(Features::TRACE.bits(), 1 << 23);
    assert_eq!(Features::DEVICE_EVENTS.bits(), 1 << 24);
    assert_eq!((TRACE_OP_START, TRACE_OP_STOP, TRACE_OP_READ), (1, 2, 3));
    assert_eq!((TRACE_SCOPE_CLIENT, TRACE_SCOPE_DEVICE), (1, 2));
    assert_eq!((TRACE_KIND_TASK, TRACE_KIND_CHUNK), (1, 2));
    assert_eq!(
        (
            TRACE_RECORDS_MAX,
            TRACE_BUFFERS_MAX,
            DEVICE_EVENTS_MAX,
            QUOTA_STORM_REFUSALS
        ),
        (1024, 4, 256, 16)
    );
    let codes: Vec<(u32, &str)> = DEVICE_EVENT_CODES
        .iter()
        .map(|(c, n, _)| (*c, *n))
        .collect();
    assert_eq!(
        codes,
        [
            (1, "stream_stopped"),
            (2, "hung_task"),
            (3, "device_reset"),
            (4, "device_started"),
            (5, "quota_storm"),
            (6, "import_revoked"),
            (7, "injected_fault"),
        ]
    );
    assert_eq!((THROTTLE_THERMAL, THROTTLE_POWER), (1, 2));
    assert_eq!(EXPORT_FLAG_LEASE, 2);
    assert_eq!(
        (FaultOperand::Params as u8, FaultOperand::Shape as u8),
        (10, 16)
    );
    assert_eq!(
        (FaultKind::Invalid as u8, FaultKind::TooLarge as u8),
        (9, 11)
    );
    let offsets = |c_name: &str| -> Vec<(&'static str, usize)> {
        STRUCTS
            .iter()
            .find(|s| s.c_name == c_name)
            .map(|s| s.fields.iter().map(|f| (f.name, f.offset)).collect())
            .unwrap_or_default()
    };
    assert_eq!(
        offsets("davinci_gemm_params"),
        [
            ("m", 0x00),
            ("n", 0x08),
            ("k", 0x10),
            ("batch", 0x18),
            ("a", 0x20),
            ("b", 0x28),
            ("c", 0x30),
            ("lda", 0x38),
            ("ldb", 0x40),
            ("ldc", 0x48),
            ("stride_a", 0x50),
            ("stride_b", 0x58),
            ("stride_c", 0x60),
            ("dtype_a", 0x68),
            ("dtype_b", 0x69),
            ("dtype_c", 0x6a),
            ("flags", 0x6b),
            ("alpha", 0x6c),
            ("beta", 0x70),
            ("reserved0", 0x74),
            ("reserved1", 0x78),
        ]
    );
    assert_eq!(
        offsets("davinci_elementwise_params")[..6],
        [
            ("op", 0x00),
            ("dtype_dst", 0x04),
            ("dtype_a", 0x05),
            ("dtype_b", 0x06),
            ("reserved0", 0x07),
            ("shape", 0x08),
        ]
    );
    assert_eq!(
        offsets("davinci_kernel_info"),
        [
            ("id", 0x00),
            ("version", 0x04),
            ("params_version", 0x08),
            ("params_size", 0x0c),
            ("dtypes", 0x10),
            ("name", 0x18),
            ("reserved", 0x38),
        ]
    );
}
