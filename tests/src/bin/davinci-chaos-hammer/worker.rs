//! One worker of `davinci-chaos-hammer`: its own open, objects and mappings, and a round of
//! hammering picked by its seeded PRNG; the counts of each outcome per operation.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;

use davinci_uapi::args::commands::COMMANDS;
use davinci_uapi::{
    AllocMemoryArgs, CreateContextArgs, CreateEventArgs, CreateStreamArgs, ExportMemoryArgs,
    HandleArgs, ImportMemoryArgs, ListClientsArgs, SubmitTaskArgs, TaskDesc, WaitEventArgs, Wire,
    DRIVER_CMD_ALLOC_MEMORY, DRIVER_CMD_CREATE_CONTEXT, DRIVER_CMD_CREATE_EVENT,
    DRIVER_CMD_CREATE_STREAM, DRIVER_CMD_DESTROY_CONTEXT, DRIVER_CMD_DESTROY_EVENT,
    DRIVER_CMD_DESTROY_STREAM, DRIVER_CMD_EXPORT_MEMORY, DRIVER_CMD_FREE_MEMORY,
    DRIVER_CMD_IMPORT_MEMORY, DRIVER_CMD_LIST_CLIENTS, DRIVER_CMD_NOTIFY,
    DRIVER_CMD_SET_DEVICE_SHARE, DRIVER_CMD_SUBMIT_TASK, DRIVER_CMD_WAIT_EVENT,
};
use nix::libc;
use serde_json::{json, Value};

use crate::errno_name;
use crate::sys::{drain, open_node, pipe, Map, Node, GUARD, GUARD_BYTE, PAGE};

/// Most objects of each kind a worker keeps.
const KEEP: usize = 6;

#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) ops: BTreeMap<String, BTreeMap<String, u64>>,
    pub(crate) overruns: u64,
    pub(crate) signals: BTreeMap<String, u64>,
}

impl Tally {
    pub(crate) fn count(&mut self, op: &str, e: i32) {
        *self
            .ops
            .entry(op.to_string())
            .or_default()
            .entry(errno_name(e))
            .or_insert(0) += 1;
    }

    pub(crate) fn json(&self) -> Value {
        json!({"ops": self.ops, "overruns": self.overruns, "signals": self.signals})
    }

    pub(crate) fn merge(&mut self, v: &Value) {
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

#[derive(Clone, Copy)]
pub(crate) struct StreamObj {
    handle: u32,
    cmd: (u64, u64),
    event: (u64, u64),
    doorbell: (u64, u64),
}

#[derive(Clone, Copy)]
pub(crate) struct MemObj {
    handle: u32,
    cookie: u64,
    size: u64,
}

pub(crate) struct Worker {
    pub(crate) path: String,
    pub(crate) rng: fastrand::Rng,
    pub(crate) node: Option<Node>,
    pub(crate) ctxs: Vec<u32>,
    pub(crate) streams: Vec<StreamObj>,
    pub(crate) events: Vec<u32>,
    pub(crate) mems: Vec<MemObj>,
    pub(crate) tokens: Vec<u64>,
    pub(crate) maps: Vec<Map>,
    pub(crate) pipe: (OwnedFd, OwnedFd),
    pub(crate) tally: Tally,
    pub(crate) lost: bool,
}

fn lost_errno(e: i32) -> bool {
    matches!(e, libc::ENODEV | libc::ENOENT | libc::ENXIO)
}

impl Worker {
    pub(crate) fn new(path: &str, seed: u64) -> Worker {
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

    pub(crate) fn reopen(&mut self) {
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

    /// After a call failed with `e`: `ENODEV` or `EIO` may be the device lost (a protocol
    /// violation is `EIO` for the call that saw it, `ENODEV` for every later one), so the
    /// file is reopened at once, and an open refused says the device is lost (a device that
    /// only answered with one of those errnos gets a fresh open, harmless). Without this a
    /// worker went on with calls failing on the lost device until its next reopen.
    fn after(&mut self, e: i32) {
        if matches!(e, libc::ENODEV | libc::EIO) {
            self.tally.count("reopen-after-error", 0);
            self.reopen();
        }
    }

    pub(crate) fn call<T: Wire>(&mut self, name: &str, request: u32, arg: &T) -> Option<T> {
        let node = self.node.as_ref()?;
        let mut b = vec![0u8; T::SIZE];
        arg.encode(&mut b);
        let (e, over) = node.ioctl_guarded(request, &mut b);
        self.tally.count(name, e);
        if over {
            self.tally.overruns += 1;
            self.tally.count(&format!("{name}:guard-overrun"), 0);
        }
        self.after(e);
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

    pub(crate) fn round(&mut self) {
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
        self.after(e);
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
            Err(e) => {
                self.tally.count("mmap", e);
                self.after(e);
            }
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
        let len = self.maps[i].len;
        let pages = len / PAGE;
        let start = self.rng.usize(..pages.max(1));
        let n = self.rng.usize(1..=pages.saturating_sub(start).clamp(1, 32));
        for p in start..start + n {
            let at = p * PAGE + self.rng.usize(..PAGE / 8) * 8;
            let k = 8.min(len.saturating_sub(at));
            let (e, w) = self.maps[i].copy_to_pipe(&self.pipe.1, at, k);
            self.tally.count("touch-read", e);
            if w > 0 && self.rng.bool() {
                // Back into the page: a write fault (the bytes that were there: harmless to
                // memory and rings alike, a doorbell write is a spurious wake-up).
                let e = self.maps[i].fill_from_pipe(&self.pipe.0, at, w);
                self.tally.count("touch-write", e);
            } else {
                drain(&self.pipe.0);
            }
        }
    }
}
