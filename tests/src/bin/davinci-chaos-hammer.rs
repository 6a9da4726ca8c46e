//! `davinci-chaos-hammer`: the guest-side client of the chaos device (issue 42, item 2). Against
//! a kernel node backed by `davinci-pcidev --chaos` it drives every ioctl, mmap and fault path
//! for a fixed number of rounds, each call ending in success or an errno (never a hang: every
//! blocking call runs under `alarm`, whose handler only interrupts it), and reports the count of
//! each outcome per operation.
//!
//! `davinci-chaos-hammer --device PATH --rounds N [--workers W] [--seed S] [--timeout SECS]`
//! runs W worker processes (4 by default) of N/W rounds each and waits for them at most SECS
//! (default 900); a worker still there is reported with its kernel wait channel and state, then
//! SIGKILLed (one that does not die in 10 s is reported unkillable). Each worker, every round,
//! picks with its own seeded PRNG one of: an ioctl of the ABI's table with a plausible argument
//! (its own handles) or random bytes, in a buffer guarded past `_IOC_SIZE` (a write beyond it
//! is reported: the kernel let the device size a user copy); `mmap` of one of its objects
//! (rings, doorbell page, memory) at its size, a page, or more; touching mapped pages through
//! a pipe (the kernel's copies fault them in, and a refused fault is an `EFAULT`, not a
//! signal); `munmap`; WAIT_EVENT with a short timeout; LIST_CLIENTS with a guarded buffer;
//! closing and reopening its file (its mappings kept); and, every so often, a child process
//! (`touch` mode) that maps its own objects and touches every page directly, where a refused
//! fault is SIGBUS (counted, never an error).
//!
//! Output: JSON lines; the last is `{"event":"done",...}` with rounds, the outcome counts per
//! operation (`ok`, or an errno name), guard overruns, signals, and whether the device was
//! lost (an open refused with `ENODEV`/`ENOENT`/`ENXIO`). Exit status: 0 every worker ended;
//! 3 the same, but the device was lost (the guest may re-probe it and run again); 1 a worker
//! hung, was unkillable, or died of a signal other than SIGBUS (a panic is SIGABRT); 2 usage.
#![deny(unsafe_op_in_unsafe_fn)]

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use davinci_uapi::args::commands::COMMANDS;
use davinci_uapi::{
    AllocMemoryArgs, CreateContextArgs, CreateEventArgs, CreateStreamArgs, DeviceShareArgs,
    ExportMemoryArgs, HandleArgs, ImportMemoryArgs, ListClientsArgs, SubmitTaskArgs, TaskDesc,
    WaitEventArgs, Wire, DRIVER_CMD_ALLOC_MEMORY, DRIVER_CMD_CREATE_CONTEXT,
    DRIVER_CMD_CREATE_EVENT, DRIVER_CMD_CREATE_STREAM, DRIVER_CMD_DESTROY_CONTEXT,
    DRIVER_CMD_DESTROY_EVENT, DRIVER_CMD_DESTROY_STREAM, DRIVER_CMD_EXPORT_MEMORY,
    DRIVER_CMD_FREE_MEMORY, DRIVER_CMD_IMPORT_MEMORY, DRIVER_CMD_LIST_CLIENTS, DRIVER_CMD_NOTIFY,
    DRIVER_CMD_SET_DEVICE_SHARE, DRIVER_CMD_SUBMIT_TASK, DRIVER_CMD_WAIT_EVENT,
};
use nix::libc;
use serde_json::{json, Value};

/// Guard bytes past every ioctl argument.
const GUARD: usize = 512;
const GUARD_BYTE: u8 = 0xa5;
const PAGE: usize = 4096;
/// Most objects of each kind a worker keeps.
const KEEP: usize = 6;

fn say(v: Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

fn errno_name(e: i32) -> String {
    if e == 0 {
        return "ok".into();
    }
    format!("{:?}", nix::errno::Errno::from_raw(e))
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

extern "C" fn on_alarm(_: libc::c_int) {}

/// SIGALRM interrupts a blocked call (no SA_RESTART): the call ends with EINTR.
fn arm_alarm_handler() {
    let sa = nix::sys::signal::SigAction::new(
        nix::sys::signal::SigHandler::Handler(on_alarm),
        nix::sys::signal::SaFlags::empty(),
        nix::sys::signal::SigSet::empty(),
    );
    // SAFETY: the handler does nothing (async-signal-safe); it replaces no handler this
    // program relies on.
    let _ = unsafe { nix::sys::signal::sigaction(nix::sys::signal::Signal::SIGALRM, &sa) };
}

/// Runs `f` with an alarm of `secs` armed (so a blocking call in it ends with EINTR).
fn bounded<T>(secs: u32, f: impl FnOnce() -> T) -> T {
    // SAFETY: alarm has no memory-safety preconditions.
    unsafe { libc::alarm(secs) };
    let r = f();
    // SAFETY: as above.
    unsafe { libc::alarm(0) };
    r
}

struct Args {
    device: String,
    rounds: u64,
    workers: u32,
    seed: u64,
    timeout: u64,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut a = Args {
        device: "/dev/davinci0".into(),
        rounds: 1000,
        workers: 4,
        seed: 1,
        timeout: 900,
    };
    let mut it = args.iter();
    while let Some(k) = it.next() {
        let mut v = || it.next().cloned().ok_or(format!("{k} needs a value"));
        let num = |s: String| s.parse::<u64>().map_err(|_| format!("{k}: not a number"));
        match k.as_str() {
            "--device" => a.device = v()?,
            "--rounds" => a.rounds = num(v()?)?,
            "--workers" => a.workers = num(v()?)?.clamp(1, 64) as u32,
            "--seed" => a.seed = num(v()?)?,
            "--timeout" => a.timeout = num(v()?)?,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(a)
}

#[derive(Default)]
struct Tally {
    ops: BTreeMap<String, BTreeMap<String, u64>>,
    overruns: u64,
    signals: BTreeMap<String, u64>,
}

impl Tally {
    fn count(&mut self, op: &str, e: i32) {
        *self
            .ops
            .entry(op.to_string())
            .or_default()
            .entry(errno_name(e))
            .or_insert(0) += 1;
    }

    fn json(&self) -> Value {
        json!({"ops": self.ops, "overruns": self.overruns, "signals": self.signals})
    }

    fn merge(&mut self, v: &Value) {
        if let Some(ops) = v.get("ops").and_then(Value::as_object) {
            for (op, m) in ops {
                for (e, n) in m.as_object().into_iter().flatten() {
                    *self
                        .ops
                        .entry(op.clone())
                        .or_default()
                        .entry(e.clone())
                        .or_insert(0) += n.as_u64().unwrap_or(0);
                }
            }
        }
        self.overruns += v.get("overruns").and_then(Value::as_u64).unwrap_or(0);
        if let Some(s) = v.get("signals").and_then(Value::as_object) {
            for (k, n) in s {
                *self.signals.entry(k.clone()).or_insert(0) += n.as_u64().unwrap_or(0);
            }
        }
    }
}

/// An open of the node.
struct Node {
    fd: OwnedFd,
}

fn open_node(path: &str, write: bool) -> Result<Node, i32> {
    let c = CString::new(path).map_err(|_| libc::EINVAL)?;
    let flags = if write { libc::O_RDWR } else { libc::O_RDONLY } | libc::O_CLOEXEC;
    // SAFETY: a NUL-terminated path; the descriptor returned is owned below.
    let fd = bounded(20, || unsafe { libc::open(c.as_ptr(), flags) });
    if fd < 0 {
        return Err(last_errno());
    }
    // SAFETY: a fresh descriptor this process owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    Ok(Node { fd })
}

impl Node {
    /// `ioctl(fd, request, buf)` with `buf` holding the argument followed by [`GUARD`] bytes:
    /// the errno (0 on success) and whether the guard was written.
    fn ioctl_guarded(&self, request: u32, arg: &mut [u8]) -> (i32, bool) {
        let mut buf = vec![GUARD_BYTE; arg.len() + GUARD];
        buf[..arg.len()].copy_from_slice(arg);
        // SAFETY: the buffer holds `_IOC_SIZE(request)` bytes (`arg.len()`) and more; the
        // kernel writes at most that (a write past it is what the guard catches).
        let rc = bounded(30, || unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                request as _,
                buf.as_mut_ptr().cast::<libc::c_void>(),
            )
        });
        let e = if rc < 0 { last_errno() } else { 0 };
        let overrun = buf[arg.len()..].iter().any(|b| *b != GUARD_BYTE);
        arg.copy_from_slice(&buf[..arg.len()]);
        (e, overrun)
    }

    fn mmap(&self, len: usize, cookie: u64) -> Result<Map, i32> {
        // SAFETY: a new mapping chosen by the kernel (no MAP_FIXED), owned by the `Map`.
        let p = bounded(30, || unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                self.fd.as_raw_fd(),
                cookie as libc::off_t,
            )
        });
        if p == libc::MAP_FAILED {
            Err(last_errno())
        } else {
            Ok(Map { ptr: p, len })
        }
    }
}

struct Map {
    ptr: *mut libc::c_void,
    len: usize,
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: the mapping this value owns.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

#[derive(Clone, Copy)]
struct StreamObj {
    handle: u32,
    cmd: (u64, u64),
    event: (u64, u64),
    doorbell: (u64, u64),
}

#[derive(Clone, Copy)]
struct MemObj {
    handle: u32,
    cookie: u64,
    size: u64,
}

struct Worker {
    path: String,
    rng: fastrand::Rng,
    node: Option<Node>,
    ctxs: Vec<u32>,
    streams: Vec<StreamObj>,
    events: Vec<u32>,
    mems: Vec<MemObj>,
    tokens: Vec<u64>,
    maps: Vec<Map>,
    pipe: (OwnedFd, OwnedFd),
    tally: Tally,
    lost: bool,
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: `fds` holds two ints; the descriptors are owned below.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) };
    if rc != 0 {
        eprintln!("pipe2: {}", std::io::Error::last_os_error());
        std::process::exit(1);
    }
    // SAFETY: fresh descriptors this process owns.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

fn lost_errno(e: i32) -> bool {
    matches!(e, libc::ENODEV | libc::ENOENT | libc::ENXIO)
}

impl Worker {
    fn new(path: &str, seed: u64) -> Worker {
        Worker {
            path: path.to_string(),
            rng: fastrand::Rng::with_seed(seed),
            node: None,
            ctxs: Vec::new(),
            streams: Vec::new(),
            events: Vec::new(),
            mems: Vec::new(),
            tokens: Vec::new(),
            maps: Vec::new(),
            pipe: pipe(),
            tally: Tally::default(),
            lost: false,
        }
    }

    fn reopen(&mut self) {
        self.node = None;
        self.ctxs.clear();
        self.streams.clear();
        self.events.clear();
        self.mems.clear();
        self.tokens.clear();
        match open_node(&self.path, true) {
            Ok(n) => {
                self.tally.count("open", 0);
                self.node = Some(n);
            }
            Err(e) => {
                self.tally.count("open", e);
                if lost_errno(e) {
                    self.lost = true;
                }
            }
        }
    }

    fn call<T: Wire>(&mut self, name: &str, request: u32, arg: &T) -> Option<T> {
        let node = self.node.as_ref()?;
        let mut b = vec![0u8; T::SIZE];
        arg.encode(&mut b);
        let (e, over) = node.ioctl_guarded(request, &mut b);
        self.tally.count(name, e);
        if over {
            self.tally.overruns += 1;
            self.tally.count(&format!("{name}:guard-overrun"), 0);
        }
        (e == 0).then(|| T::decode(&b))
    }

    fn pick<T: Copy>(&mut self, v: &[T]) -> Option<T> {
        if v.is_empty() {
            None
        } else {
            Some(v[self.rng.usize(..v.len())])
        }
    }

    fn any_handle(&mut self) -> u32 {
        match self.rng.u8(..6) {
            0 => self.pick(&self.ctxs.clone()).unwrap_or(0),
            1 => self.pick(&self.events.clone()).unwrap_or(0),
            2 => self.streams.first().map_or(0, |s| s.handle),
            3 => self.mems.first().map_or(0, |m| m.handle),
            4 => 0,
            _ => self.rng.u32(..),
        }
    }

    fn round(&mut self) {
        if self.node.is_none() {
            self.reopen();
            if self.node.is_none() {
                return;
            }
        }
        match self.rng.u8(..24) {
            0 | 1 => {
                if self.ctxs.len() < KEEP {
                    if let Some(a) = self.call(
                        "CREATE_CONTEXT",
                        DRIVER_CMD_CREATE_CONTEXT,
                        &CreateContextArgs::default(),
                    ) {
                        self.ctxs.push(a.handle);
                    }
                } else {
                    let h = self.ctxs.remove(0);
                    self.call(
                        "DESTROY_CONTEXT",
                        DRIVER_CMD_DESTROY_CONTEXT,
                        &HandleArgs { handle: h, pad: 0 },
                    );
                }
            }
            2 | 3 => {
                let ctx = self.pick(&self.ctxs.clone()).unwrap_or(0);
                if self.streams.len() < KEEP {
                    let a = CreateStreamArgs {
                        ctx,
                        cmd_entries: 64,
                        event_entries: 64,
                        ..Default::default()
                    };
                    if let Some(r) = self.call("CREATE_STREAM", DRIVER_CMD_CREATE_STREAM, &a) {
                        self.streams.push(StreamObj {
                            handle: r.handle,
                            cmd: (r.cmd_ring.mmap_offset, r.cmd_ring.mmap_size),
                            event: (r.event_ring.mmap_offset, r.event_ring.mmap_size),
                            doorbell: (r.doorbell_offset, r.doorbell_size),
                        });
                    }
                } else {
                    let s = self.streams.remove(0);
                    self.call(
                        "DESTROY_STREAM",
                        DRIVER_CMD_DESTROY_STREAM,
                        &HandleArgs {
                            handle: s.handle,
                            pad: 0,
                        },
                    );
                }
            }
            4 | 5 => {
                if self.mems.len() < KEEP {
                    let size = (self.rng.u64(1..=64) * PAGE as u64) >> self.rng.u8(0..2);
                    let a = AllocMemoryArgs {
                        size,
                        ..Default::default()
                    };
                    if let Some(r) = self.call("ALLOC_MEMORY", DRIVER_CMD_ALLOC_MEMORY, &a) {
                        self.mems.push(MemObj {
                            handle: r.handle,
                            cookie: r.mmap_offset,
                            size: r.alloc_size,
                        });
                    }
                } else {
                    let m = self.mems.remove(self.rng.usize(..self.mems.len()));
                    self.call(
                        "FREE_MEMORY",
                        DRIVER_CMD_FREE_MEMORY,
                        &HandleArgs {
                            handle: m.handle,
                            pad: 0,
                        },
                    );
                }
            }
            6 => {
                let ctx = self.pick(&self.ctxs.clone()).unwrap_or(0);
                if self.events.len() < KEEP {
                    let a = CreateEventArgs {
                        ctx,
                        ..Default::default()
                    };
                    if let Some(r) = self.call("CREATE_EVENT", DRIVER_CMD_CREATE_EVENT, &a) {
                        self.events.push(r.handle);
                    }
                } else {
                    let h = self.events.remove(0);
                    self.call(
                        "DESTROY_EVENT",
                        DRIVER_CMD_DESTROY_EVENT,
                        &HandleArgs { handle: h, pad: 0 },
                    );
                }
            }
            7 => {
                let stream = self.streams.first().map_or(0, |s| s.handle);
                let a = SubmitTaskArgs {
                    stream,
                    desc: TaskDesc::nop(self.rng.u64(..)),
                    ..Default::default()
                };
                self.call("SUBMIT_TASK", DRIVER_CMD_SUBMIT_TASK, &a);
                self.call(
                    "NOTIFY",
                    DRIVER_CMD_NOTIFY,
                    &HandleArgs {
                        handle: stream,
                        pad: 0,
                    },
                );
            }
            8 => {
                let (kind, handle) = if self.rng.bool() {
                    (1, self.streams.first().map_or(0, |s| s.handle))
                } else {
                    (2, self.pick(&self.events.clone()).unwrap_or(0))
                };
                let a = WaitEventArgs {
                    kind,
                    handle,
                    value: self.rng.u64(0..3),
                    timeout_ns: self.rng.u64(0..50_000_000),
                    ..Default::default()
                };
                self.call("WAIT_EVENT", DRIVER_CMD_WAIT_EVENT, &a);
            }
            9 => {
                let m = self.mems.first().copied();
                if let Some(m) = m {
                    let a = ExportMemoryArgs {
                        handle: m.handle,
                        ..Default::default()
                    };
                    if let Some(r) = self.call("EXPORT_MEMORY", DRIVER_CMD_EXPORT_MEMORY, &a) {
                        if self.tokens.len() < KEEP {
                            self.tokens.push(r.token);
                        }
                    }
                }
                let token = self.pick(&self.tokens.clone()).unwrap_or(self.rng.u64(..));
                let a = ImportMemoryArgs {
                    token,
                    ..Default::default()
                };
                if let Some(r) = self.call("IMPORT_MEMORY", DRIVER_CMD_IMPORT_MEMORY, &a) {
                    if self.mems.len() < KEEP {
                        self.mems.push(MemObj {
                            handle: r.handle,
                            cookie: r.mmap_offset,
                            size: r.size,
                        });
                    }
                }
            }
            10 => self.list_clients(),
            11..=14 => self.map_something(),
            15..=17 => self.touch_something(),
            18 => {
                if !self.maps.is_empty() {
                    let i = self.rng.usize(..self.maps.len());
                    self.maps.swap_remove(i);
                    self.tally.count("munmap", 0);
                }
            }
            19 => {
                // Close with the mappings kept; later touches fault on a closed file.
                self.tally.count("close", 0);
                self.reopen();
            }
            _ => self.any_ioctl(),
        }
        if self.maps.len() > 24 {
            self.maps.remove(0);
        }
    }

    /// Any command of the ABI's table: a plausible argument (a handle of ours in its first
    /// word), zeros, or random bytes.
    fn any_ioctl(&mut self) {
        let Some(cmd) = self.pick(COMMANDS) else {
            return;
        };
        // Not SET_DEVICE_SHARE back to exclusive: the other workers would be locked out.
        if cmd.request == DRIVER_CMD_SET_DEVICE_SHARE {
            return;
        }
        let mut b = vec![0u8; cmd.size];
        match self.rng.u8(..3) {
            0 => {}
            1 => self.rng.fill(&mut b),
            _ => {
                let h = self.any_handle();
                if b.len() >= 4 {
                    b[..4].copy_from_slice(&h.to_le_bytes());
                }
            }
        }
        // A random LIST_CLIENTS buffer pointer would be a user pointer the kernel writes.
        if cmd.request == DRIVER_CMD_LIST_CLIENTS {
            return self.list_clients();
        }
        let Some(node) = self.node.as_ref() else {
            return;
        };
        let (e, over) = node.ioctl_guarded(cmd.request, &mut b);
        self.tally.count(cmd.name, e);
        if over {
            self.tally.overruns += 1;
            self.tally.count(&format!("{}:guard-overrun", cmd.name), 0);
        }
    }

    fn list_clients(&mut self) {
        let stride = [8u32, 64, 128, 256][self.rng.usize(..4)];
        let cap = self.rng.u32(0..16);
        let mut buf = vec![GUARD_BYTE; (stride * cap) as usize + GUARD];
        let a = ListClientsArgs {
            buf: if cap == 0 && self.rng.bool() {
                0
            } else {
                buf.as_mut_ptr() as u64
            },
            capacity: cap,
            entry_size: stride,
            ..Default::default()
        };
        self.call("LIST_CLIENTS", DRIVER_CMD_LIST_CLIENTS, &a);
        if buf[(stride * cap) as usize..]
            .iter()
            .any(|b| *b != GUARD_BYTE)
        {
            self.tally.overruns += 1;
            self.tally.count("LIST_CLIENTS:buffer-overrun", 0);
        }
    }

    /// A cookie of ours and its size.
    fn some_cookie(&mut self) -> Option<(u64, u64)> {
        let mut all = Vec::new();
        for s in &self.streams {
            all.extend([s.cmd, s.event, s.doorbell]);
        }
        for m in &self.mems {
            all.push((m.cookie, m.size));
        }
        let c = self.pick(&all)?;
        Some(if self.rng.u8(..8) == 0 {
            (self.rng.u64(..) & !(PAGE as u64 - 1), c.1)
        } else {
            c
        })
    }

    fn map_something(&mut self) {
        let Some((cookie, size)) = self.some_cookie() else {
            return self.any_ioctl();
        };
        let size = size.max(PAGE as u64) as usize;
        let len = match self.rng.u8(..4) {
            0 => PAGE,
            1 => size + PAGE,
            _ => size,
        };
        let Some(node) = self.node.as_ref() else {
            return;
        };
        match node.mmap(len, cookie) {
            Ok(m) => {
                self.tally.count("mmap", 0);
                self.maps.push(m);
            }
            Err(e) => self.tally.count("mmap", e),
        }
    }

    /// Touches pages of a mapping through the pipe: `write(pipe, page)` reads it (a read
    /// fault in the kernel's copy), `read(pipe, page)` writes it (a write fault). A fault the
    /// kernel refuses is EFAULT here, not a signal.
    fn touch_something(&mut self) {
        if self.maps.is_empty() {
            return self.map_something();
        }
        let i = self.rng.usize(..self.maps.len());
        let (ptr, len) = (self.maps[i].ptr, self.maps[i].len);
        let pages = len / PAGE;
        let start = self.rng.usize(..pages.max(1));
        let n = self.rng.usize(1..=pages.saturating_sub(start).clamp(1, 32));
        for p in start..start + n {
            let at = p * PAGE + self.rng.usize(..PAGE / 8) * 8;
            let k = 8.min(len - at);
            // SAFETY: `at + k <= len` inside the live mapping this worker owns; the kernel
            // reads it (copy_from_user), faulting it in or failing with EFAULT.
            let w = bounded(30, || unsafe {
                libc::write(self.pipe.1.as_raw_fd(), ptr.cast::<u8>().add(at).cast(), k)
            });
            let e = if w < 0 { last_errno() } else { 0 };
            self.tally.count("touch-read", e);
            if w > 0 && self.rng.bool() {
                // Back into the page: a write fault (the bytes that were there: harmless to
                // memory and rings alike, a doorbell write is a spurious wake-up).
                // SAFETY: as above, the kernel writes `w` bytes at `at` (copy_to_user).
                let r = bounded(30, || unsafe {
                    libc::read(
                        self.pipe.0.as_raw_fd(),
                        ptr.cast::<u8>().add(at).cast(),
                        w as usize,
                    )
                });
                let e = if r < 0 { last_errno() } else { 0 };
                self.tally.count("touch-write", e);
            } else {
                let mut sink = [0u8; 8];
                // SAFETY: reads into a local buffer; drains what was written.
                unsafe { libc::read(self.pipe.0.as_raw_fd(), sink.as_mut_ptr().cast(), 8) };
            }
        }
    }
}

/// `touch` mode: a short-lived child that maps its own objects and touches every page
/// directly (a refused fault kills it with SIGBUS, which its parent counts). Exit 0, or the
/// errno of the first call that failed (capped at 125).
fn touch_mode(path: &str, seed: u64) -> i32 {
    arm_alarm_handler();
    let mut w = Worker::new(path, seed);
    w.reopen();
    let Some(node) = w.node.take() else {
        return 100;
    };
    w.node = Some(node);
    if let Some(c) = w.call(
        "CREATE_CONTEXT",
        DRIVER_CMD_CREATE_CONTEXT,
        &CreateContextArgs::default(),
    ) {
        w.ctxs.push(c.handle);
    }
    let a = CreateStreamArgs {
        ctx: w.ctxs.first().copied().unwrap_or(0),
        cmd_entries: 64,
        event_entries: 64,
        ..Default::default()
    };
    let mut targets = Vec::new();
    if let Some(r) = w.call("CREATE_STREAM", DRIVER_CMD_CREATE_STREAM, &a) {
        targets.push((r.cmd_ring.mmap_offset, r.cmd_ring.mmap_size));
        targets.push((r.event_ring.mmap_offset, r.event_ring.mmap_size));
    }
    let size = w.rng.u64(1..=64) * PAGE as u64;
    if let Some(r) = w.call(
        "ALLOC_MEMORY",
        DRIVER_CMD_ALLOC_MEMORY,
        &AllocMemoryArgs {
            size,
            ..Default::default()
        },
    ) {
        targets.push((r.mmap_offset, r.alloc_size));
    }
    let Some(node) = w.node.as_ref() else {
        return 101;
    };
    for (cookie, size) in targets {
        let len = size.max(PAGE as u64) as usize;
        let m = match node.mmap(len, cookie) {
            Ok(m) => m,
            Err(e) => return e.min(125),
        };
        for p in (0..len).step_by(PAGE) {
            bounded(30, || {
                // SAFETY: `p < len` inside the live mapping; a volatile read and write of one
                // word (a refused fault is SIGBUS, which is what this mode counts).
                unsafe {
                    let q = m.ptr.cast::<u8>().add(p).cast::<u64>();
                    let v = q.read_volatile();
                    q.write_volatile(v);
                }
            });
        }
    }
    0
}

fn worker_mode(path: &str, rounds: u64, seed: u64, me: &str) -> i32 {
    arm_alarm_handler();
    let mut w = Worker::new(path, seed);
    let mut done = 0;
    let mut last = Instant::now();
    let mut touches = 0u64;
    while done < rounds {
        w.round();
        done += 1;
        if w.lost {
            // The device is gone (an open refused): nothing more to hammer until the guest
            // brings it back.
            break;
        }
        if done % 97 == 0 {
            touches += 1;
            // A direct toucher in a child (mappings are not inherited across fork).
            match Command::new(me)
                .args([
                    "touch",
                    "--device",
                    path,
                    "--seed",
                    &(seed ^ touches).to_string(),
                ])
                .stdout(Stdio::null())
                .spawn()
            {
                Ok(mut c) => {
                    let r = wait_bounded(&mut c, Duration::from_secs(120));
                    match r {
                        Ended::Code(0) => w.tally.count("touch-direct", 0),
                        Ended::Code(e) => w.tally.count("touch-direct", e),
                        Ended::Signal(s) => {
                            *w.tally.signals.entry(s.clone()).or_insert(0) += 1;
                            w.tally.count("touch-direct", 0);
                            w.tally.count(&format!("touch-direct:{s}"), 0);
                        }
                        Ended::Hung(why) => {
                            say(json!({"event": "hung", "what": "touch child", "state": why}));
                            return 1;
                        }
                    }
                }
                Err(e) => eprintln!("spawn toucher: {e}"),
            }
        }
        if last.elapsed() > Duration::from_secs(10) {
            say(json!({"event": "progress", "rounds": done}));
            last = Instant::now();
        }
    }
    w.maps.clear();
    w.node = None;
    let mut v = w.tally.json();
    v["event"] = json!("worker-done");
    v["rounds"] = json!(done);
    v["lost"] = json!(w.lost);
    say(v);
    0
}

enum Ended {
    Code(i32),
    Signal(String),
    Hung(String),
}

/// The kernel's view of a process: its state and wait channel (and stack if readable).
fn kernel_state(pid: u32) -> String {
    let read = |f: &str| std::fs::read_to_string(format!("/proc/{pid}/{f}")).unwrap_or_default();
    let state = read("status")
        .lines()
        .find(|l| l.starts_with("State:"))
        .unwrap_or("")
        .to_string();
    format!(
        "{state}; wchan {}; stack {}",
        read("wchan"),
        read("stack").replace('\n', " | ")
    )
}

/// Waits for `c` at most `limit`; then reports its state, SIGKILLs it and waits 10 s more.
fn wait_bounded(c: &mut Child, limit: Duration) -> Ended {
    use std::os::unix::process::ExitStatusExt;
    let t = Instant::now();
    loop {
        match c.try_wait() {
            Ok(Some(st)) => {
                return match (st.code(), st.signal()) {
                    (Some(code), _) => Ended::Code(code),
                    (None, Some(s)) => Ended::Signal(
                        nix::sys::signal::Signal::try_from(s)
                            .map_or(format!("signal {s}"), |s| s.as_str().to_string()),
                    ),
                    _ => Ended::Code(-1),
                }
            }
            Ok(None) => {}
            Err(e) => return Ended::Hung(format!("wait: {e}")),
        }
        if t.elapsed() > limit {
            let state = kernel_state(c.id());
            let _ = c.kill();
            let t2 = Instant::now();
            while t2.elapsed() < Duration::from_secs(10) {
                if let Ok(Some(_)) = c.try_wait() {
                    return Ended::Hung(format!("{state} (killed)"));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            return Ended::Hung(format!(
                "{state} (UNKILLABLE: still there 10 s after SIGKILL: {})",
                kernel_state(c.id())
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    let me = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| argv[0].clone());
    match argv.get(1).map(String::as_str) {
        Some("touch") => {
            let a = parse(&argv[2..]).unwrap_or_else(|e| {
                eprintln!("davinci-chaos-hammer touch: {e}");
                std::process::exit(2)
            });
            std::process::exit(touch_mode(&a.device, a.seed));
        }
        Some("worker") => {
            let a = parse(&argv[2..]).unwrap_or_else(|e| {
                eprintln!("davinci-chaos-hammer worker: {e}");
                std::process::exit(2)
            });
            std::process::exit(worker_mode(&a.device, a.rounds, a.seed, &me));
        }
        Some("-h" | "--help") => {
            println!(
                "davinci-chaos-hammer --device PATH --rounds N [--workers W] [--seed S] [--timeout SECS]"
            );
            return;
        }
        _ => {}
    }
    let a = parse(&argv[1..]).unwrap_or_else(|e| {
        eprintln!("davinci-chaos-hammer: {e}");
        std::process::exit(2)
    });
    arm_alarm_handler();
    let t0 = Instant::now();
    let mut tally = Tally::default();
    // Shared, so that the workers' opens coexist (an admin's control open; refused or failed
    // calls are counted like any other).
    match open_node(&a.device, false) {
        Ok(n) => {
            let mut b = vec![0u8; DeviceShareArgs::SIZE];
            DeviceShareArgs {
                mode: 1,
                ..Default::default()
            }
            .encode(&mut b);
            let (e, _) = n.ioctl_guarded(DRIVER_CMD_SET_DEVICE_SHARE, &mut b);
            tally.count("SET_DEVICE_SHARE", e);
        }
        Err(e) => tally.count("open-control", e),
    }
    let per = a.rounds.div_ceil(u64::from(a.workers));
    let mut kids = Vec::new();
    for i in 0..a.workers {
        let seed = a.seed.wrapping_mul(1000).wrapping_add(u64::from(i));
        match Command::new(&me)
            .args([
                "worker",
                "--device",
                &a.device,
                "--rounds",
                &per.to_string(),
                "--seed",
                &seed.to_string(),
            ])
            .stdout(Stdio::piped())
            .spawn()
        {
            Ok(c) => kids.push(c),
            Err(e) => {
                say(json!({"event": "error", "message": format!("spawn worker: {e}")}));
                std::process::exit(1);
            }
        }
    }
    // Each worker's lines on a thread of its own (progress echoed, the last kept).
    let mut readers = Vec::new();
    for (i, c) in kids.iter_mut().enumerate() {
        let Some(out) = c.stdout.take() else { continue };
        readers.push(std::thread::spawn(move || {
            let mut last = Value::Null;
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    if v["event"] == "progress" || v["event"] == "hung" {
                        say(json!({"event": v["event"], "worker": i, "detail": v}));
                    }
                    last = v;
                }
            }
            last
        }));
    }
    let deadline = Duration::from_secs(a.timeout);
    let (mut rounds, mut lost, mut bad) = (0u64, false, Vec::new());
    for (i, c) in kids.iter_mut().enumerate() {
        let left = deadline.saturating_sub(t0.elapsed());
        match wait_bounded(c, left) {
            Ended::Code(0) => {}
            Ended::Code(code) => bad.push(format!("worker {i} exited {code}")),
            Ended::Signal(s) if s == "SIGBUS" => {
                *tally.signals.entry(s).or_insert(0) += 1;
            }
            Ended::Signal(s) => bad.push(format!("worker {i} died of {s}")),
            Ended::Hung(state) => bad.push(format!("worker {i} HUNG: {state}")),
        }
    }
    for r in readers {
        if let Ok(v) = r.join() {
            if v["event"] == "worker-done" {
                rounds += v["rounds"].as_u64().unwrap_or(0);
                lost |= v["lost"].as_bool().unwrap_or(false);
                tally.merge(&v);
            }
        }
    }
    let mut v = tally.json();
    v["event"] = json!("done");
    v["rounds"] = json!(rounds);
    v["lost"] = json!(lost);
    v["failures"] = json!(bad);
    v["seconds"] = json!(t0.elapsed().as_secs_f64());
    say(v);
    std::process::exit(if !bad.is_empty() {
        1
    } else if lost {
        3
    } else {
        0
    });
}
