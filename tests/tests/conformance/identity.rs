//! What a device is and how busy it is (issue 24, ABI 1.4 `DAVINCI_FEAT_IDENTITY`), on every
//! backend: GET_IDENTITY's UUID is the same for every open and after a share-mode change, and
//! the busy time the engines spent on this client's tasks shows in GET_COUNTERS and in this
//! client's LIST_CLIENTS entry.

use std::time::Duration;

use davinci_shim::{task, Features, ShareMode};
use davinci_tests::{backend_name, control_of, open_default};

const T: Duration = Duration::from_secs(60);

#[test]
fn the_device_names_itself_the_same_to_every_open() {
    let dev = open_default().expect("open the test device");
    let ctl = control_of(&dev).expect("control open");
    assert!(ctl.info().unwrap().features.contains(Features::IDENTITY));
    let id = ctl.identity().expect("GET_IDENTITY");
    assert_ne!(id.uuid, [0; 16], "a device has a UUID");
    let text = id.uuid_string();
    assert_eq!(text.as_str().len(), 36, "{text}");
    assert!(
        !id.model().is_empty() && !id.driver_version().is_empty(),
        "{id:?}"
    );
    assert!(id.numa_node >= -1, "{id:?}");
    // Another open, and the same after the sharing changes (where this user may change it).
    let again = control_of(&dev).unwrap().identity().unwrap();
    assert_eq!(again, id);
    let was = ctl.share().unwrap().mode;
    let other = match was {
        ShareMode::Exclusive => ShareMode::Shared,
        ShareMode::Shared => ShareMode::Exclusive,
    };
    if ctl.set_share_mode(other).is_ok() {
        assert_eq!(ctl.identity().unwrap().uuid, id.uuid);
        ctl.set_share_mode(was).unwrap();
    }
    let k = ctl.counters().unwrap();
    assert!(k.engines >= 1, "{k:?}");
    assert_eq!(k.health, davinci_uapi::HEALTH_OK, "{k:?}");
}

#[test]
fn busy_time_counts_this_clients_tasks() {
    let dev = open_default().expect("open the test device");
    let ctl = control_of(&dev).expect("control open");
    let client_id = dev.client_id().expect("the client id");
    let before = ctl.counters().unwrap();
    let busy_of_me = || {
        ctl.clients()
            .unwrap()
            .into_iter()
            .find(|c| c.client_id == client_id)
            .map(|c| c.busy_ns)
            .expect("this client is listed")
    };
    assert_eq!(busy_of_me(), 0, "nothing ran yet");
    let ctx = dev.create_context().unwrap();
    let mut s = ctx.create_stream().unwrap();
    let b = dev.alloc(1 << 20).unwrap();
    for i in 0..8u32 {
        s.submit(&task::fill(&b, i).unwrap()).unwrap();
    }
    s.synchronize(T).unwrap();
    let mine = busy_of_me();
    let after = ctl.counters().unwrap();
    assert!(mine > 0, "8 MiB of FILL took no time?");
    assert!(after.now_ns > before.now_ns);
    let device = after.busy_ns - before.busy_ns;
    if backend_name().starts_with("/dev/") {
        // Other tests may share the kernel's device.
        assert!(device >= mine, "{before:?} -> {after:?}, mine {mine}");
    } else {
        assert_eq!(device, mine, "{before:?} -> {after:?}");
    }
    // Idle, it stays.
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(busy_of_me(), mine);
    // It stays with the client when its stream is gone.
    drop(s);
    assert_eq!(busy_of_me(), mine);
}
