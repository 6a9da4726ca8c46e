//! What the daemon's integration tests share: a raw client of one connection (frames by hand,
//! replies checked for their descriptors), one ioctl through it, a new stream, and the
//! `davinci-mockd` binary run in a socket directory of its own with its log collected.
#![allow(dead_code)]

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use davinci_mockd_proto::sockio::SeqPacket;
use davinci_mockd_proto::{Hello, Kind, Reply, Request, WireRole, MAX_REPLY};
use davinci_uapi::{
    CreateContextArgs, CreateStreamArgs, Wire, ABI_VERSION_MAJOR, ABI_VERSION_MINOR,
    DRIVER_CMD_CREATE_CONTEXT, DRIVER_CMD_CREATE_STREAM,
};

/// One connection, spoken to frame by frame.
pub struct Raw {
    pub c: SeqPacket,
    /// The last tag sent.
    pub tag: u32,
}

impl Raw {
    /// Sends one frame with the next tag; that tag.
    pub fn send(&mut self, kind: Kind, request: u32, arg: Vec<u8>) -> u32 {
        self.tag += 1;
        let f = Request {
            kind,
            tag: self.tag,
            request,
            arg,
        };
        self.c.send(&f.encode().unwrap(), &[]).unwrap();
        self.tag
    }

    /// Sends one frame and receives the next reply.
    pub fn call(&mut self, kind: Kind, request: u32, arg: Vec<u8>) -> (Reply, usize) {
        self.send(kind, request, arg);
        self.recv()
    }

    /// The next reply and how many descriptors came with it (as many as it says).
    pub fn recv(&mut self) -> (Reply, usize) {
        let mut buf = vec![0u8; MAX_REPLY];
        let r = self.c.recv(&mut buf, true).unwrap();
        assert!(r.len > 0, "daemon closed the connection");
        let rep = Reply::decode(&buf[..r.len]).unwrap();
        assert_eq!(rep.nfds as usize, r.fds.len());
        (rep, r.fds.len())
    }

    /// Connects to `path` and says HELLO as `role`: the connection and the HELLO reply.
    pub fn open(path: &Path, role: WireRole) -> (Raw, Reply) {
        let mut raw = Raw {
            c: SeqPacket::connect(path).unwrap(),
            tag: 0,
        };
        let h = Hello {
            abi_major: ABI_VERSION_MAJOR,
            abi_minor: ABI_VERSION_MINOR,
            role: role as u32,
            reserved: 0,
        };
        let (r, _) = raw.call(Kind::Hello, 0, h.encode());
        (raw, r)
    }
}

/// One ioctl through the daemon: (errno, the argument after the call).
pub fn ioctl<T: Wire>(raw: &mut Raw, request: u32, args: &T) -> (i32, T) {
    let mut arg = vec![0; T::SIZE];
    args.encode(&mut arg);
    let (r, _) = raw.call(Kind::Ioctl, request, arg);
    (r.errno, T::decode(&r.arg))
}

/// A context and a stream in it (8 entries each way): the stream's handle.
pub fn new_stream(raw: &mut Raw) -> u32 {
    let (e, ctx) = ioctl(
        raw,
        DRIVER_CMD_CREATE_CONTEXT,
        &CreateContextArgs::default(),
    );
    assert_eq!(e, 0);
    let (e, s) = ioctl(
        raw,
        DRIVER_CMD_CREATE_STREAM,
        &CreateStreamArgs {
            ctx: ctx.handle,
            cmd_entries: 8,
            event_entries: 8,
            ..Default::default()
        },
    );
    assert_eq!(e, 0);
    s.handle
}

/// A fresh scratch path under the temporary directory, for this test process and `tag`
/// (whatever was there removed).
pub fn scratch_path(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("davinci-t-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    let _ = std::fs::remove_file(&p);
    p
}

/// The `davinci-mockd` binary, running with `--socket-dir` and `--exit-with-parent` at
/// `RUST_LOG=info`; its stderr is read as it comes (a daemon that logs a lot never blocks
/// on a full pipe), seen with [`Mockd::wait_for_log`] and returned by [`Mockd::stop`].
pub struct Mockd {
    pub child: Child,
    pub dir: PathBuf,
    log: Arc<Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Mockd {
    /// Starts the binary with `args` in the socket directory `scratch_path(tag)` and waits
    /// for its ready line.
    pub fn start(tag: &str, args: &[&str]) -> Mockd {
        Mockd::start_under(tag, &[], args)
    }

    /// [`start`](Self::start), the binary run by the command `wrapper` (`prlimit ...`, which
    /// execs it: the pid is the daemon's); none when empty.
    pub fn start_under(tag: &str, wrapper: &[&str], args: &[&str]) -> Mockd {
        let dir = scratch_path(tag);
        let bin = env!("CARGO_BIN_EXE_davinci-mockd");
        let mut cmd = match wrapper.split_first() {
            Some((w, rest)) => {
                let mut c = std::process::Command::new(w);
                c.args(rest).arg(bin);
                c
            }
            None => std::process::Command::new(bin),
        };
        let mut child = cmd
            .args(args)
            .arg("--exit-with-parent")
            .arg("--socket-dir")
            .arg(&dir)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let err = std::io::BufReader::new(child.stderr.take().unwrap());
        let log = Arc::new(Mutex::new(String::new()));
        let sink = log.clone();
        let reader = std::thread::spawn(move || {
            for line in err.lines() {
                let Ok(line) = line else { return };
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        let mut ready = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut ready)
            .unwrap();
        let mut d = Mockd {
            child,
            dir,
            log,
            reader: Some(reader),
        };
        if !ready.contains("davinci-mockd: ready") {
            let (status, log) = d.stop();
            panic!("davinci-mockd did not start ({status}): {ready}{log}");
        }
        d
    }

    /// Device `n`'s socket.
    pub fn socket(&self, n: u32) -> PathBuf {
        self.dir.join(format!("davinci{n}.sock"))
    }

    /// The daemon's pid.
    pub fn pid(&self) -> nix::unistd::Pid {
        nix::unistd::Pid::from_raw(self.child.id() as i32)
    }

    /// Sends it `sig`.
    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(self.pid(), sig).unwrap();
    }

    /// The first line of its log so far that contains `what`, waiting up to 10 s for it.
    pub fn wait_for_log(&self, what: &str) -> String {
        let t0 = Instant::now();
        loop {
            let log = self.log.lock().unwrap().clone();
            if let Some(l) = log.lines().find(|l| l.contains(what)) {
                return l.to_string();
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "no {what:?} in the log after 10 s:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGTERM, then its exit status and its whole log (stderr).
    pub fn stop(&mut self) -> (ExitStatus, String) {
        let _ = nix::sys::signal::kill(self.pid(), nix::sys::signal::Signal::SIGTERM);
        let status = self.child.wait().unwrap();
        if let Some(r) = self.reader.take() {
            r.join().unwrap();
        }
        let log = self.log.lock().unwrap().clone();
        (status, log)
    }
}

impl Drop for Mockd {
    fn drop(&mut self) {
        if self.reader.is_some() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The lines of `log` that contain every one of `words`.
pub fn lines_with<'a>(log: &'a str, words: &[&str]) -> Vec<&'a str> {
    log.lines()
        .filter(|l| words.iter().all(|w| l.contains(w)))
        .collect()
}

/// The whole-number value of `field=` in a log line.
pub fn field_u64(line: &str, field: &str) -> Option<u64> {
    let key = format!(" {field}=");
    let at = line.find(&key)? + key.len();
    let digits: String = line[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// A SET_DEVICE_SHARE argument for `mode`.
pub fn share_arg(mode: u32) -> Vec<u8> {
    let mut arg = vec![0; davinci_uapi::DeviceShareArgs::SIZE];
    davinci_uapi::DeviceShareArgs {
        mode,
        ..davinci_uapi::DeviceShareArgs::default()
    }
    .encode(&mut arg);
    arg
}
