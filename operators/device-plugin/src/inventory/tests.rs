//! The inventory: the list it advertises as health and modes change, devices found and moved,
//! IDs resolved, and its bound.

use super::*;

fn shared(clients: u32) -> Result<Probe, Unfit> {
    Ok(Probe {
        mode: ShareMode::Shared,
        clients,
        numa_node: None,
        uuid: None,
    })
}

fn exclusive() -> Result<Probe, Unfit> {
    Ok(Probe {
        mode: ShareMode::Exclusive,
        clients: 0,
        numa_node: None,
        uuid: None,
    })
}

fn ids(inv: &Inventory) -> Vec<(String, String)> {
    inv.advertised()
        .into_iter()
        .map(|d| (d.id, d.health))
        .collect()
}

#[test]
fn the_list_follows_health_and_mode() {
    let mut inv = Inventory::new(3);
    let changes = inv.discovered(&[
        (0, "mock:/s/davinci0.sock".into()),
        (1, "/dev/davinci1".into()),
    ]);
    assert_eq!(changes.len(), 2);
    // Not checked yet: one Unhealthy ID each.
    assert_eq!(
        ids(&inv),
        [
            ("davinci0".to_string(), UNHEALTHY.to_string()),
            ("davinci1".to_string(), UNHEALTHY.to_string())
        ]
    );
    let c = inv.checked(0, shared(0));
    assert_eq!(
        c,
        [
            Change::Healthy {
                name: "davinci0".into()
            },
            Change::Mode {
                name: "davinci0".into(),
                mode: ShareMode::Shared,
                ids: 3
            }
        ]
    );
    // Exclusive from the start: no mode change (the IDs were already one).
    assert_eq!(
        inv.checked(1, exclusive()),
        [Change::Healthy {
            name: "davinci1".into()
        }]
    );
    let h = HEALTHY.to_string();
    assert_eq!(
        ids(&inv),
        [
            ("davinci0::0".to_string(), h.clone()),
            ("davinci0::1".to_string(), h.clone()),
            ("davinci0::2".to_string(), h.clone()),
            ("davinci1".to_string(), h.clone()),
        ]
    );
    // Nothing changed: nothing to log.
    assert!(inv.checked(0, shared(2)).is_empty());
    assert_eq!(inv.get(0).unwrap().clients, Some(2));
    // Unreachable: the IDs stay (last mode), Unhealthy; the reason is logged once.
    let c = inv.checked(0, Err("ENODEV: no daemon".into()));
    assert_eq!(
        c,
        [Change::Unhealthy {
            name: "davinci0".into(),
            reason: "ENODEV: no daemon".into()
        }]
    );
    assert!(inv.checked(0, Err("ENODEV: no daemon".into())).is_empty());
    assert_eq!(inv.checked(0, Err("EPERM".into())).len(), 1);
    assert_eq!(
        ids(&inv)[..3]
            .iter()
            .map(|(i, h)| format!("{i} {h}"))
            .collect::<Vec<_>>(),
        [
            "davinci0::0 Unhealthy",
            "davinci0::1 Unhealthy",
            "davinci0::2 Unhealthy"
        ]
    );
    // Back, now exclusive.
    assert_eq!(inv.checked(0, exclusive()).len(), 2);
    assert_eq!(ids(&inv)[0], ("davinci0".to_string(), h));
    assert_eq!(inv.advertised().len(), 2);
    // A check of an unknown device changes nothing.
    assert!(inv.checked(9, exclusive()).is_empty());
}

#[test]
fn discovery_adds_and_follows_devices() {
    let mut inv = Inventory::new(2);
    inv.discovered(&[(2, "mock:/a/davinci2.sock".into())]);
    assert!(inv
        .discovered(&[(2, "mock:/a/davinci2.sock".into())])
        .is_empty());
    assert_eq!(
        inv.discovered(&[(2, "/dev/davinci2".into())]),
        [Change::Moved {
            name: "davinci2".into(),
            from: "mock:/a/davinci2.sock".into(),
            to: "/dev/davinci2".into()
        }]
    );
    assert_eq!(inv.get(2).unwrap().kind(), Kind::Kernel);
    assert_eq!(inv.get(2).unwrap().host_path(), "/dev/davinci2");
    // Not found any more: still known.
    assert!(inv.discovered(&[]).is_empty());
    assert_eq!(inv.len(), 1);
}

#[test]
fn ids_resolve_to_known_devices_only() {
    let mut inv = Inventory::new(4);
    inv.discovered(&[(0, "mock:/s/davinci0.sock".into())]);
    inv.checked(0, shared(0));
    let (id, d) = inv.resolve("davinci0::3").unwrap();
    assert_eq!((id, d.index), (DeviceId::replica(0, 3), 0));
    // The whole-device form of a known device resolves too (handed out before a switch).
    assert!(inv.resolve("davinci0").is_ok());
    let e = inv.resolve("davinci0::4").unwrap_err().0;
    assert!(e.contains("replicas 0 to 3 (--replicas 4)"), "{e}");
    let e = inv.resolve("davinci5::0").unwrap_err().0;
    assert!(
        e.contains("there is no device davinci5 (known: davinci0)"),
        "{e}"
    );
    let e = inv.resolve("gpu-0").unwrap_err().0;
    assert!(
        e.starts_with("unknown device ID \"gpu-0\": this plugin's IDs are"),
        "{e}"
    );
    // A huge ID is cut short in the message.
    let long = "x".repeat(10_000);
    assert!(inv.resolve(&long).unwrap_err().0.len() < 300);
}

#[test]
fn the_device_count_is_bounded() {
    let mut inv = Inventory::new(1);
    let found: Vec<(u32, String)> = (0..MAX_DEVICES as u32 + 5)
        .map(|i| (i, format!("/dev/davinci{i}")))
        .collect();
    inv.discovered(&found);
    assert_eq!(inv.len(), MAX_DEVICES);
}

/// A device's NUMA node goes with every one of its IDs, and stays while it is unreachable.
#[test]
fn every_id_carries_its_devices_numa_node() {
    let mut inv = Inventory::new(2);
    inv.discovered(&[(0, "/dev/davinci0".into()), (1, "/dev/davinci1".into())]);
    let numa = |node| {
        Ok(Probe {
            mode: ShareMode::Shared,
            clients: 0,
            numa_node: node,
            uuid: None,
        })
    };
    inv.checked(0, numa(Some(1)));
    inv.checked(1, numa(None));
    let topo = |inv: &Inventory| -> Vec<(String, Option<Vec<i64>>)> {
        inv.advertised()
            .into_iter()
            .map(|d| {
                (
                    d.id,
                    d.topology.map(|t| t.nodes.iter().map(|n| n.id).collect()),
                )
            })
            .collect()
    };
    let want = vec![
        ("davinci0::0".to_string(), Some(vec![1])),
        ("davinci0::1".to_string(), Some(vec![1])),
        ("davinci1::0".to_string(), None),
        ("davinci1::1".to_string(), None),
    ];
    assert_eq!(topo(&inv), want);
    inv.checked(0, Err("gone".into()));
    assert_eq!(topo(&inv), want);
}

/// A device that reports its UUID is advertised as `UUID::k`: the same IDs across a change of
/// sharing mode (exclusive is `UUID::0`, the first replica's ID) and after the device is
/// found at another index; they resolve back to the device, and the index's names still
/// resolve (IDs a kubelet checkpointed before).
#[test]
fn ids_are_named_after_the_devices_uuid_and_survive_mode_and_index_changes() {
    let uuid = [0x11u8; 16];
    let text = davinci_uapi::uuid_text(&uuid).as_str().to_string();
    let probe = |mode| {
        Ok(Probe {
            mode,
            clients: 0,
            numa_node: None,
            uuid: Some(uuid),
        })
    };
    let mut inv = Inventory::new(3);
    inv.discovered(&[(0, "mock:/run/davinci/davinci0.sock".into())]);
    inv.checked(0, probe(ShareMode::Exclusive));
    let ids =
        |inv: &Inventory| -> Vec<String> { inv.advertised().into_iter().map(|d| d.id).collect() };
    assert_eq!(ids(&inv), [format!("{text}::0")]);
    inv.checked(0, probe(ShareMode::Shared));
    assert_eq!(
        ids(&inv),
        [
            format!("{text}::0"),
            format!("{text}::1"),
            format!("{text}::2")
        ]
    );
    let (id, d) = inv.resolve(&format!("{text}::2")).unwrap();
    assert_eq!((id, d.index), (DeviceId::replica(0, 2), 0));
    assert!(inv.resolve(&format!("{text}::3")).is_err());
    assert!(inv.resolve(&format!("{text}::02")).is_err());
    assert!(inv
        .resolve("00000000-0000-0000-0000-000000000000::0")
        .is_err());
    assert_eq!(inv.resolve("davinci0::1").unwrap().1.index, 0);
    // Unreachable: the UUID is kept, so are the IDs.
    inv.checked(0, Err("gone".into()));
    assert_eq!(ids(&inv).len(), 3);
    assert!(ids(&inv)[0].starts_with(&text));
    // The same device at another index (a daemon restarted with other devices): same IDs.
    let mut moved = Inventory::new(3);
    moved.discovered(&[(5, "mock:/run/davinci/davinci5.sock".into())]);
    moved.checked(5, probe(ShareMode::Shared));
    assert_eq!(ids(&moved), ids(&inv));
    assert_eq!(moved.resolve(&format!("{text}::1")).unwrap().1.index, 5);
}

/// A device that answers but is unfit (a health word, its temperature, a device event) is
/// Unhealthy with the reason, and still named and counted by what it said: its UUID's IDs,
/// as many as its mode gives, so nothing is renamed when it becomes healthy again.
#[test]
fn an_unfit_device_that_answered_keeps_its_ids() {
    let uuid = [0x22u8; 16];
    let text = davinci_uapi::uuid_text(&uuid).as_str().to_string();
    let probe = Probe {
        mode: ShareMode::Shared,
        clients: 1,
        numa_node: Some(0),
        uuid: Some(uuid),
    };
    let mut inv = Inventory::new(2);
    inv.discovered(&[(0, "mock:/s/davinci0.sock".into())]);
    let reason = "device event hung_task (seq 2): stream 0x1 holds a task";
    let c = inv.checked(
        0,
        Err(Unfit {
            probe: Some(probe),
            reason: reason.into(),
        }),
    );
    assert_eq!(
        c[0],
        Change::Unhealthy {
            name: "davinci0".into(),
            reason: reason.into()
        }
    );
    let unhealthy = ids(&inv);
    assert_eq!(
        unhealthy,
        [
            (format!("{text}::0"), UNHEALTHY.to_string()),
            (format!("{text}::1"), UNHEALTHY.to_string())
        ]
    );
    let d = inv.devices().next().unwrap();
    assert_eq!(
        (d.reason.as_deref(), d.clients, d.numa_node),
        (Some(reason), Some(1), Some(0))
    );
    // The same reason again: no change to log.
    let again = Unfit {
        probe: Some(probe),
        reason: reason.into(),
    };
    assert!(inv.checked(0, Err(again)).is_empty());
    // Healthy again: the same IDs.
    assert_eq!(
        inv.checked(0, Ok(probe)),
        [Change::Healthy {
            name: "davinci0".into()
        }]
    );
    let healthy: Vec<String> = ids(&inv).into_iter().map(|(id, _)| id).collect();
    assert_eq!(
        healthy,
        unhealthy.into_iter().map(|(id, _)| id).collect::<Vec<_>>()
    );
}
