//! The harness's state ([`State`]): the device over the checking heap platform, the opens,
//! the handles seen, the user memory; its one checked path into the device
//! ([`State::ioctl`]: every ioctl's outcome against the command table, the caller's role and
//! the user-memory window) and the invariants after every step ([`State::check`]).
#![forbid(unsafe_code)]

use davinci_driver_core::test_util::{device, HeapPlatform};
use davinci_driver_core::{DeviceCore, Reply, Result, Role};
use davinci_uapi::ioctl::ioc_size;
use davinci_uapi::*;

use super::user_mem::{User, USER_LEN};

/// The handles seen so far, by kind (what a `Pick::Seen` picks from).
#[derive(Default)]
pub(super) struct Seen {
    pub(super) ctx: Vec<u32>,
    pub(super) stream: Vec<u32>,
    pub(super) alloc: Vec<u32>,
    pub(super) event: Vec<u32>,
}

/// An open: its `client` (its handle in the device's client table) and role.
pub(super) struct Open {
    pub(super) client: u32,
    pub(super) role: Role,
    /// Who opened: LIST_CLIENTS shows an admin everyone, anyone else its own user's clients.
    pub(super) uid: u32,
    pub(super) admin: bool,
}

/// The device and what the harness knows of it.
pub(super) struct State {
    pub(super) dev: DeviceCore<HeapPlatform>,
    pub(super) opens: Vec<Open>,
    pub(super) seen: Seen,
    pub(super) user: User,
    pub(super) next_pid: u32,
}

impl State {
    /// A fresh device (`test_util::device`) with no opens.
    pub(super) fn new() -> State {
        State {
            dev: device(),
            opens: Vec::new(),
            seen: Seen::default(),
            user: User {
                mem: vec![0; USER_LEN as usize],
                window: None,
                faults: 0,
            },
            next_pid: 0,
        }
    }

    pub(super) fn who(&self, w: u8) -> Option<&Open> {
        if self.opens.is_empty() {
            None
        } else {
            Some(&self.opens[w as usize % self.opens.len()])
        }
    }

    /// One ioctl through the real dispatch path, with the platform's half of `Reply`.
    pub(super) fn ioctl(&mut self, client: u32, request: u32, arg: &mut [u8]) -> Result<Reply> {
        let role = self
            .opens
            .iter()
            .find(|o| o.client == client)
            .map(|o| o.role);
        // LIST_CLIENTS may write [buf, buf + capacity * entry_size) of its own arguments.
        self.user.window = (request == DRIVER_CMD_LIST_CLIENTS)
            .then(|| ListClientsArgs::from_bytes(arg))
            .flatten()
            .map(|a| {
                let len = u64::from(a.capacity) * u64::from(a.entry_size);
                (a.buf, a.buf.saturating_add(len))
            });
        self.user.faults = 0;
        let before = (
            self.dev.info(),
            self.dev.clients().collect::<Vec<_>>(),
            arg.to_vec(),
        );
        let r = self.dev.ioctl(client, request, arg, &mut self.user);
        self.user.window = None;
        if self.user.faults > 0 {
            // A fault in copy_to_user: the ioctl fails with EFAULT and changes nothing (the
            // device, its clients, the argument; bytes already copied out may stay, as with
            // a kernel).
            assert_eq!(
                r.as_ref().map(|_| ()).map_err(|e| e.errno),
                Err(Errno::EFAULT),
                "a faulting user-memory write did not fail the ioctl with EFAULT"
            );
            let after = (
                self.dev.info(),
                self.dev.clients().collect::<Vec<_>>(),
                arg.to_vec(),
            );
            assert!(before == after, "a faulting LIST_CLIENTS changed something");
        }
        let cmd = command_by_request(request);
        match (&r, cmd) {
            (Err(e), _) => {
                assert_ne!(e.errno.code(), 0, "an error with errno 0");
                assert!(!e.msg.is_empty(), "an error without a message");
            }
            (Ok(_), None) => panic!("unknown request {request:#x} succeeded"),
            (Ok(_), Some(_)) => assert_eq!(arg.len(), ioc_size(request)),
        }
        if cmd.is_none() || arg.len() != ioc_size(request) {
            assert_eq!(r.map(|_| ()).unwrap_err().errno, Errno::ENOTTY);
        }
        if let (Some(c), Some(Role::Control)) = (cmd, role) {
            if c.caller == Caller::Client {
                assert!(r.is_err(), "control open ran {}", c.name);
            }
        }
        match r {
            Ok(Reply::Wait(spec)) => {
                // The platform would sleep; here the wait times out at once.
                let f = self.dev.finish_wait(client, &spec, arg, true);
                if let Err(e) = f {
                    assert!(!e.msg.is_empty());
                }
            }
            Ok(Reply::StreamCreated(s)) => {
                assert!(self.dev.stream_state(client, s).is_ok());
            }
            _ => {}
        }
        r
    }

    pub(super) fn call<T: Wire>(
        &mut self,
        who: u8,
        request: u32,
        a: &T,
    ) -> Option<(Result<Reply>, T)> {
        let client = self.who(who)?.client;
        let mut arg = vec![0u8; T::SIZE];
        a.encode(&mut arg);
        let r = self.ioctl(client, request, &mut arg);
        Some((r, T::decode(&arg)))
    }

    pub(super) fn check(&self) {
        let info = self.dev.info();
        assert!(info.memory_used <= info.memory_size);
        let clients: Vec<ClientUsage> = self.dev.clients().collect();
        let sum: u64 = clients.iter().map(|c| c.memory_bytes).sum();
        assert_eq!(sum, info.memory_used, "client memory does not add up");
        assert_eq!(self.dev.platform().backed_bytes(), info.memory_used);
        for c in &clients {
            assert!(c.memory_bytes <= info.client_memory_limit);
        }
        let n = self.opens.iter().filter(|o| o.role == Role::Client).count();
        assert_eq!(clients.len(), n);
        assert_eq!(info.clients as usize, n);
        if self.dev.share_mode() == ShareMode::Exclusive {
            assert!(n <= 1, "{n} clients on an exclusive device");
        }
    }
}
