//! The chaos device (`--chaos SEED,RATE`) survives its own lies and a guest that sees them:
//! with every reply mutated, an in-process guest's requests of every kind all get an answer
//! (or a completion it refuses), the device keeps serving, counts every class it used and
//! stops cleanly.

mod support;

use davinci_hwif::AdminOp;
use davinci_pcidev::chaos::ChaosConfig;
use davinci_pcidev::DeviceConfig;
use davinci_uapi::{
    AllocMemoryArgs, CreateContextArgs, CreateStreamArgs, DeviceInfo, ListClientsArgs,
    DRIVER_CMD_ALLOC_MEMORY, DRIVER_CMD_CREATE_CONTEXT, DRIVER_CMD_CREATE_STREAM,
    DRIVER_CMD_GET_INFO, DRIVER_CMD_LIST_CLIENTS,
};
use support::{Guest, Running};

#[test]
fn the_chaos_device_serves_a_guest_while_lying_to_it() {
    let dev = Running::start_with(DeviceConfig {
        size: 4 << 20,
        chaos: Some(ChaosConfig {
            seed: 3,
            rate: 1.0,
            classes: davinci_pcidev::chaos::ALL_CLASSES,
        }),
        ..DeviceConfig::default()
    });
    let mut g = Guest::connect(&dev);
    let mut answered = 0;
    let mut client = 0;
    for i in 0..300u64 {
        let r = match i % 6 {
            0 => g.q.open(1234, 1000, "chaos").map(|c| {
                client = c;
            }),
            1 => {
                g.q.ioctl(client, DRIVER_CMD_GET_INFO, &mut DeviceInfo::default())
                    .map(drop)
            }
            2 => {
                g.q.ioctl(
                    client,
                    DRIVER_CMD_CREATE_CONTEXT,
                    &mut CreateContextArgs::default(),
                )
                .map(drop)
            }
            3 => {
                let mut m = AllocMemoryArgs {
                    size: 8192,
                    ..Default::default()
                };
                g.q.ioctl(client, DRIVER_CMD_ALLOC_MEMORY, &mut m)
                    .and_then(|_| g.q.map(client, m.mmap_offset, m.alloc_size))
                    .map(drop)
            }
            4 => {
                g.q.ioctl(
                    client,
                    DRIVER_CMD_CREATE_STREAM,
                    &mut CreateStreamArgs {
                        cmd_entries: 64,
                        event_entries: 64,
                        ..Default::default()
                    },
                )
                .map(drop)
            }
            _ => {
                g.q.ioctl(
                    client,
                    DRIVER_CMD_LIST_CLIENTS,
                    &mut ListClientsArgs::default(),
                )
                .map(drop)
            }
        };
        // Any outcome but a timeout: the device answered (wrongly, as it should here), or
        // the rings are full of its extra completions.
        match r {
            Err(davinci_pcidev::guest::GuestError::Timeout(w)) => panic!("no answer: {w}"),
            _ => answered += 1,
        }
        if i % 50 == 49 {
            let _ = g.q.call(client, AdminOp::Close);
        }
    }
    assert_eq!(answered, 300);
    drop(g);
    let d = dev.stop();
    let summary = d.chaos_summary().unwrap();
    assert!(summary.contains("mutated"), "{summary}");
    // (This guest takes one completion per request, so the extra ones fill the completion
    // ring and then its submission ring: later calls fail to post, which is its problem.)
    assert!(d.stats().admin_requests >= 50, "{:?}", d.stats());
}
