//! A socket that accepts connections and never answers (a hung daemon, or something that is
//! not davinci-mockd): every client of a socket gives up with a clear error within its
//! reply timeout (`$DAVINCI_SOCKET_TIMEOUT`), instead of hanging (issue 24: `davinci-smi
//! info` and the test client waited past 60 s).
#![forbid(unsafe_code)]

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use davinci_mockd_proto::sockio::SeqListener;
use davinci_tests::mockd::bin;

/// A listener in a directory of its own that accepts every connection and holds it silent.
struct Silent {
    dir: std::path::PathBuf,
    stop: Arc<AtomicBool>,
}

impl Silent {
    fn start() -> Silent {
        let dir = std::env::temp_dir().join(format!("davinci-silent-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let listener = SeqListener::bind(&dir.join("davinci0.sock"), 0o600).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            while !s.load(Ordering::Relaxed) {
                if let Ok(c) = listener.accept() {
                    held.push(c);
                }
            }
        });
        Silent { dir, stop }
    }

    fn device(&self) -> String {
        format!("mock:{}/davinci0.sock", self.dir.display())
    }
}

impl Drop for Silent {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn gives_up(name: &str, args: &[&str], device: &str) {
    let start = Instant::now();
    let out = Command::new(bin(name))
        .args(args)
        .env("DAVINCI_DEVICE", device)
        .env("DAVINCI_SOCKET_TIMEOUT", "0.5")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {name}: {e}"));
    let took = start.elapsed();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{name}: {text}");
    assert!(
        text.contains("did not answer within 0.5 s"),
        "{name} says why: {text}"
    );
    assert!(took < Duration::from_secs(20), "{name} took {took:?}");
}

#[test]
fn tools_and_clients_give_up_on_a_socket_that_never_answers() {
    let s = Silent::start();
    let dev = s.device();
    gives_up("testbin-davinci-smi", &["info"], &dev);
    gives_up("davinci-testclient", &["hold"], &dev);
}
