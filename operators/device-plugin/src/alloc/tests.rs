//! Allocate and GetPreferredAllocation against an inventory of fake devices: what a container
//! is given, the refusals, the spreading of replicas, and the record of allocations.

use super::*;
use crate::inventory::Probe;
use davinci_uapi::ShareMode;

/// davinci0 (mock, shared), davinci1 (kernel, exclusive), davinci2 (mock, unhealthy).
fn inventory() -> Inventory {
    let mut inv = Inventory::new(4);
    inv.discovered(&[
        (0, "mock:/run/davinci/davinci0.sock".into()),
        (1, "/dev/davinci1".into()),
        (2, "mock:/run/davinci/davinci2.sock".into()),
    ]);
    inv.checked(
        0,
        Ok(Probe {
            mode: ShareMode::Shared,
            clients: 0,
            numa_node: None,
            uuid: None,
        }),
    );
    inv.checked(
        1,
        Ok(Probe {
            mode: ShareMode::Exclusive,
            clients: 0,
            numa_node: None,
            uuid: None,
        }),
    );
    inv.checked(2, Err("ENODEV: the daemon is gone".into()));
    inv
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_mock_replica_is_given_as_its_socket_and_the_device_variable() {
    let inv = inventory();
    let a =
        container_allocation(&inv, &strings(&["davinci0::2"]), &AllocOptions::default()).unwrap();
    let r = &a.response;
    assert_eq!(
        r.mounts,
        [api::Mount {
            container_path: "/run/davinci/davinci0.sock".into(),
            host_path: "/run/davinci/davinci0.sock".into(),
            read_only: false
        }]
    );
    assert!(r.devices.is_empty() && r.cdi_devices.is_empty());
    assert_eq!(r.envs[DEVICE_ENV], "mock:/run/davinci/davinci0.sock");
    assert_eq!(
        r.envs[VISIBLE_DEVICES_ENV],
        "mock:/run/davinci/davinci0.sock"
    );
    assert_eq!(r.envs.len(), 2);
    assert_eq!(a.ids, [DeviceId::replica(0, 2)]);
    assert_eq!(a.devices, [0]);
}

#[test]
fn several_devices_name_the_first_and_list_all_once() {
    let inv = inventory();
    let a = container_allocation(
        &inv,
        &strings(&["davinci1", "davinci0::1", "davinci0::3"]),
        &AllocOptions::default(),
    )
    .unwrap();
    let r = &a.response;
    assert_eq!(
        r.devices,
        [api::DeviceSpec {
            container_path: "/dev/davinci1".into(),
            host_path: "/dev/davinci1".into(),
            permissions: "rw".into()
        }]
    );
    assert_eq!(r.mounts.len(), 1, "the socket once for two replicas");
    assert_eq!(r.envs[DEVICE_ENV], "/dev/davinci1");
    assert_eq!(
        r.envs[VISIBLE_DEVICES_ENV],
        "/dev/davinci1,mock:/run/davinci/davinci0.sock"
    );
    assert_eq!(a.devices, [1, 0]);
    assert_eq!(a.ids.len(), 3);
}

#[test]
fn cdi_names_the_devices_instead() {
    let inv = inventory();
    let opts = AllocOptions {
        cdi_kind: Some("davinci.ai/npu".into()),
    };
    let a = container_allocation(&inv, &strings(&["davinci0::0", "davinci1"]), &opts).unwrap();
    let names: Vec<&str> = a
        .response
        .cdi_devices
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(
        names,
        ["davinci.ai/npu=davinci0", "davinci.ai/npu=davinci1"]
    );
    assert!(a.response.devices.is_empty() && a.response.mounts.is_empty());
    assert_eq!(
        a.response.envs[DEVICE_ENV],
        "mock:/run/davinci/davinci0.sock"
    );
    // The same names in the CDI annotation, for kubelets without cdi_devices.
    let want: HashMap<String, String> = [(
        "cdi.k8s.io/davinci-device-plugin_davinci0".to_string(),
        "davinci.ai/npu=davinci0,davinci.ai/npu=davinci1".to_string(),
    )]
    .into();
    assert_eq!(a.response.annotations, want);
}

#[test]
fn no_cdi_no_annotation() {
    let inv = inventory();
    let a = container_allocation(&inv, &strings(&["davinci1"]), &AllocOptions::default()).unwrap();
    assert!(a.response.annotations.is_empty(), "{:?}", a.response);
}

/// The key follows CDI's `AnnotationKey` rules for every device number.
#[test]
fn the_cdi_annotation_key_follows_cdis_rules() {
    for n in [0, 7, u32::MAX] {
        let key = cdi_annotation_key(&crate::ids::device_name(n));
        let name = key.strip_prefix("cdi.k8s.io/").unwrap();
        assert!(name.len() <= 63, "{name}");
        let b = name.as_bytes();
        assert!(b[0].is_ascii_alphanumeric() && b[b.len() - 1].is_ascii_alphanumeric());
        assert!(
            b.iter()
                .all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(c)),
            "{name}"
        );
    }
    assert_eq!(
        cdi_annotation_key("davinci3"),
        "cdi.k8s.io/davinci-device-plugin_davinci3"
    );
}

#[test]
fn bad_requests_are_refused_with_the_reason() {
    let inv = inventory();
    let o = AllocOptions::default();
    let e = container_allocation(&inv, &strings(&["davinci0::0", "davinci7"]), &o).unwrap_err();
    assert!(matches!(e, Refusal::InvalidArgument(_)), "{e:?}");
    assert!(e.message().contains("there is no device davinci7"), "{e:?}");
    let e = container_allocation(&inv, &[], &o).unwrap_err();
    assert!(matches!(e, Refusal::InvalidArgument(_)), "{e:?}");
    let e = container_allocation(&inv, &strings(&["davinci2::0"]), &o).unwrap_err();
    assert!(matches!(e, Refusal::FailedPrecondition(_)), "{e:?}");
    assert_eq!(
        e.message(),
        "davinci2 is unhealthy: ENODEV: the daemon is gone"
    );
    // The whole request: the failing container is named, and nothing is returned.
    let req = api::AllocateRequest {
        container_requests: vec![
            api::ContainerAllocateRequest {
                devices_ids: strings(&["davinci0::0"]),
            },
            api::ContainerAllocateRequest {
                devices_ids: strings(&["nope"]),
            },
        ],
    };
    let e = allocate(&inv, &req, &o).unwrap_err();
    assert!(matches!(e, Refusal::InvalidArgument(_)), "{e:?}");
    assert!(
        e.message()
            .starts_with("container 1: unknown device ID \"nope\""),
        "{e:?}"
    );
    let e = allocate(&inv, &api::AllocateRequest::default(), &o).unwrap_err();
    assert_eq!(e.message(), "the request has no container");
    let ok = allocate(
        &inv,
        &api::AllocateRequest {
            container_requests: vec![req.container_requests[0].clone(); 2],
        },
        &o,
    )
    .unwrap();
    assert_eq!(ok.len(), 2);
}

fn pref(inv: &Inventory, avail: &[&str], must: &[&str], size: i32) -> Result<Vec<String>, Refusal> {
    preferred(
        inv,
        &api::ContainerPreferredAllocationRequest {
            available_device_i_ds: strings(avail),
            must_include_device_i_ds: strings(must),
            allocation_size: size,
        },
    )
}

/// davinci0 and davinci1 both shared, 4 replicas each; davinci2 exclusive.
fn two_shared() -> Inventory {
    let mut inv = Inventory::new(4);
    inv.discovered(&[
        (0, "mock:/s/davinci0.sock".into()),
        (1, "mock:/s/davinci1.sock".into()),
        (2, "mock:/s/davinci2.sock".into()),
    ]);
    for (i, mode) in [
        (0, ShareMode::Shared),
        (1, ShareMode::Shared),
        (2, ShareMode::Exclusive),
    ] {
        inv.checked(
            i,
            Ok(Probe {
                mode,
                clients: 0,
                numa_node: None,
                uuid: None,
            }),
        );
    }
    inv
}

#[test]
fn preferred_takes_replicas_of_the_least_allocated_device() {
    let inv = two_shared();
    // davinci0 has 3 of 4 replicas allocated, davinci1 1 of 4: davinci1 first.
    let avail = ["davinci0::3", "davinci1::0", "davinci1::2", "davinci1::3"];
    assert_eq!(pref(&inv, &avail, &[], 1).unwrap(), ["davinci1::0"]);
    // Two: davinci1 (1 used) then davinci1 again (2 used) ties with... davinci0 has 3:
    // both from davinci1.
    assert_eq!(
        pref(&inv, &avail, &[], 2).unwrap(),
        ["davinci1::0", "davinci1::2"]
    );
    // Three: davinci1 reaches 3 used, ties with davinci0 (3): the lower device.
    assert_eq!(
        pref(&inv, &avail, &[], 3).unwrap(),
        ["davinci1::0", "davinci1::2", "davinci0::3"]
    );
    // Everything free: spread over the devices, lowest first.
    let all = [
        "davinci0::0",
        "davinci0::1",
        "davinci0::2",
        "davinci0::3",
        "davinci1::0",
        "davinci1::1",
        "davinci1::2",
        "davinci1::3",
        "davinci2",
    ];
    assert_eq!(
        pref(&inv, &all, &[], 3).unwrap(),
        ["davinci0::0", "davinci1::0", "davinci2"]
    );
    // Asking for more than there is: all there is.
    assert_eq!(pref(&inv, &avail, &[], 10).unwrap().len(), 4);
    assert!(pref(&inv, &avail, &[], 0).unwrap().is_empty());
}

#[test]
fn preferred_honours_must_include() {
    let inv = two_shared();
    let avail = ["davinci0::0", "davinci0::1", "davinci1::0", "davinci1::1"];
    // davinci0::1 must be in: it comes first and counts against davinci0.
    assert_eq!(
        pref(&inv, &avail, &["davinci0::1"], 2).unwrap(),
        ["davinci0::1", "davinci1::0"]
    );
    // Named twice, taken once.
    assert_eq!(
        pref(&inv, &avail, &["davinci0::1", "davinci0::1"], 1).unwrap(),
        ["davinci0::1"]
    );
    let e = pref(&inv, &avail, &["davinci0::0", "davinci0::1"], 1).unwrap_err();
    assert!(matches!(e, Refusal::InvalidArgument(_)), "{e:?}");
    assert!(e.message().contains("more than allocation_size 1"), "{e:?}");
    let e = pref(&inv, &avail, &[], -1).unwrap_err();
    assert!(matches!(e, Refusal::InvalidArgument(_)), "{e:?}");
    let e = pref(&inv, &["davinci0::0", "davinci9::0"], &[], 1).unwrap_err();
    assert!(matches!(e, Refusal::InvalidArgument(_)), "{e:?}");
    assert!(e.message().contains("davinci9"), "{e:?}");
}

#[test]
fn preferred_avoids_unhealthy_devices() {
    let mut inv = two_shared();
    inv.checked(0, Err("gone".into()));
    let avail = ["davinci0::0", "davinci1::0", "davinci1::1", "davinci1::2"];
    // davinci1 has 1 used, davinci0 3 used but unhealthy: davinci1's replicas first.
    assert_eq!(
        pref(&inv, &avail, &[], 3).unwrap(),
        ["davinci1::0", "davinci1::1", "davinci1::2"]
    );
}

#[test]
fn the_whole_preferred_response_has_one_answer_per_container() {
    let inv = two_shared();
    let c = |size| api::ContainerPreferredAllocationRequest {
        available_device_i_ds: strings(&["davinci0::0", "davinci1::0"]),
        must_include_device_i_ds: vec![],
        allocation_size: size,
    };
    let r = preferred_allocation(
        &inv,
        &api::PreferredAllocationRequest {
            container_requests: vec![c(1), c(2)],
        },
    )
    .unwrap();
    assert_eq!(r.container_responses.len(), 2);
    assert_eq!(
        r.container_responses[1].device_i_ds,
        ["davinci0::0", "davinci1::0"]
    );
    let e = preferred_allocation(
        &inv,
        &api::PreferredAllocationRequest {
            container_requests: vec![c(1), c(-5)],
        },
    )
    .unwrap_err();
    assert!(e.message().starts_with("container 1: "), "{e:?}");
}

#[test]
fn allocations_are_held_until_offered_again() {
    let mut a = Allocations::default();
    a.record(&[
        DeviceId::replica(0, 1),
        DeviceId::replica(0, 2),
        DeviceId::whole(1),
    ]);
    a.record(&[DeviceId::replica(0, 1)]);
    assert_eq!(
        a.held_on(0),
        [DeviceId::replica(0, 1), DeviceId::replica(0, 2)]
    );
    assert_eq!(a.total(0), 3);
    assert_eq!(a.total(1), 1);
    assert_eq!(a.total(5), 0);
    let released = a.release_available(&[DeviceId::replica(0, 2), DeviceId::replica(0, 3)]);
    assert_eq!(released, [DeviceId::replica(0, 2)]);
    assert_eq!(a.held_on(0), [DeviceId::replica(0, 1)]);
    assert_eq!(a.total(0), 3, "the total counts every allocation");
}
