//! Memory shared between two processes (issue 23: the Ray aDAG / HCCL pattern): this process
//! allocates and exports a buffer, another process (`davinci-testclient import`) imports it
//! by its token, reads what this one wrote, and fills it on a stream of its own; this one
//! sees the fill. For every backend that reaches other processes (`davinci-mockd`, the
//! kernel module); the device must be in shared mode.

use std::time::Duration;

use davinci_shim::{Device, DeviceMem, ExportTo};

use crate::mockd::TestClient;

/// Runs the exchange on the device at `path` (a second client opens it). Returns what the
/// importer reported.
///
/// # Panics
/// When any step fails, saying which.
pub fn share_with_another_process(path: &str) -> serde_json::Value {
    let dev = Device::open(path).expect("open the device");
    let buf = dev.alloc(1 << 20).expect("alloc");
    buf.write_slice(0, &[0x1234_5678u32; 16]).expect("write");
    let token = buf.export(ExportTo::SameUser).expect("EXPORT_MEMORY");
    let tok = token.to_string();
    let other = TestClient::start(
        path,
        &["import", "--token", &tok, "--pattern", "3054", "--hold"],
    );
    let ready = other.expect("ready");
    assert_eq!(
        ready["read"], 0x1234_5678u32,
        "the importer reads the exporter's bytes: {ready}"
    );
    let done = other.expect("done");
    assert_eq!(done["ok"], true, "{done}");
    assert!(
        buf.read_vec::<u32>(0, 262_144)
            .expect("read")
            .iter()
            .all(|&w| w == 3054),
        "the importer's FILL reached the exporter's buffer"
    );
    assert!(
        other.pid != std::process::id(),
        "two processes, not two threads"
    );
    // The exporter frees while the importer still holds the import: revoked, the memory
    // goes back, and the importer's process exits cleanly when told to.
    let used = dev.memory_used().expect("GET_INFO");
    drop(buf);
    assert!(dev.memory_used().expect("GET_INFO") < used);
    assert_eq!(
        other.release(),
        0,
        "the importer exits cleanly after the revoke"
    );
    std::thread::sleep(Duration::from_millis(1));
    done
}
