//! The harness's state ([`State`]): the device, the clients attached, and the descriptors
//! a client's [`Desc`] becomes, each marked [`FOREIGN`] when it touches another client's
//! memory and kept off the client's own guard allocation.
#![forbid(unsafe_code)]

use davinci_mock_device::{local_open_params, MockDevice, Role};
use davinci_uapi::*;

use super::clients::{
    call, create_stream, map, Client, User, CANARY_LEN, GUARD, MAX_CLIENTS, WORK,
};
use super::input::{Desc, Target};

/// `user_data` bit 0: the descriptor touches another client's memory (must not succeed).
pub(super) const FOREIGN: u64 = 1;

/// Does `[a, a + len)` overlap `[b, b + blen)`?
fn overlaps(a: u64, len: u64, b: u64, blen: u64) -> bool {
    len > 0 && a < b.saturating_add(blen) && a.saturating_add(len) > b
}

pub(super) struct State {
    pub(super) dev: MockDevice,
    pub(super) clients: Vec<Client>,
    pub(super) opened: u32,
    pub(super) user: User,
    pub(super) seq: u64,
}

impl State {
    pub(super) fn open(&mut self) {
        if self.clients.len() >= MAX_CLIENTS {
            return;
        }
        let client = self
            .dev
            .open(local_open_params(Role::Client, false))
            .expect("open a client of a shared device");
        let mut c = CreateContextArgs::default();
        call(&self.dev, client, DRIVER_CMD_CREATE_CONTEXT, &mut c).expect("context");
        let mut work = AllocMemoryArgs {
            size: WORK,
            ..Default::default()
        };

        let mut guard = AllocMemoryArgs {
            size: GUARD,
            ..Default::default()
        };
        let ok = |dev: &MockDevice, a: &mut AllocMemoryArgs| {
            call(dev, client, DRIVER_CMD_ALLOC_MEMORY, a).is_ok()
        };
        if !ok(&self.dev, &mut work) || !ok(&self.dev, &mut guard) {
            // The device is full (raw ALLOC_MEMORYs of other clients): no new client.
            self.dev.close(client);
            return;
        }
        let guard_map = map(&self.dev, client, guard.mmap_offset, guard.alloc_size);
        self.opened += 1;
        let canary = 0xca9a_0000 | self.opened;
        let bytes: Vec<u8> = (0..CANARY_LEN / 4)
            .flat_map(|_| canary.to_ne_bytes())
            .collect();
        guard_map.write(0, &bytes).expect("canary inside the guard");
        let check = create_stream(&self.dev, client, c.handle, 4, 4).expect("check stream");
        self.clients.push(Client {
            client,
            ctx: c.handle,
            work,
            guard,
            guard_map,
            canary,
            check,
            checks: 0,
            streams: Vec::new(),
        });
    }

    pub(super) fn who(&self, w: u8) -> Option<usize> {
        (!self.clients.is_empty()).then(|| w as usize % self.clients.len())
    }

    fn addr(&self, me: usize, t: Target) -> (u64, bool) {
        match t {
            Target::Own(off) => (self.clients[me].work.dev_addr + u64::from(off), false),
            Target::Other { who, guard, off } => {
                let c = &self.clients[who as usize % self.clients.len()];
                let a = if guard { &c.guard } else { &c.work };
                (
                    a.dev_addr + u64::from(off),
                    who as usize % self.clients.len() != me,
                )
            }
            Target::Raw(a) => {
                let foreign = self.clients.iter().enumerate().any(|(i, c)| {
                    i != me
                        && (overlaps(a, 1, c.work.dev_addr, c.work.alloc_size)
                            || overlaps(a, 1, c.guard.dev_addr, c.guard.alloc_size))
                });
                (a, foreign)
            }
        }
    }

    /// The descriptor `d` of client `me`, never writing its own guard allocation (the only
    /// writer of its canary is the harness, once); `user_data` bit 0 says whether it touches
    /// another client's memory.
    pub(super) fn desc(&mut self, me: usize, d: Desc) -> TaskDesc {
        self.seq += 1;
        let ud = self.seq << 1;
        let (mut t, foreign) = match d {
            Desc::Nop => (TaskDesc::nop(ud), false),
            Desc::Fill { dst, len, imm } => {
                let (a, f) = self.addr(me, dst);
                (TaskDesc::fill(ud, DevAddr(a), u64::from(len), imm), f)
            }
            Desc::Copy { dst, src, len } => {
                let (a, f1) = self.addr(me, dst);
                let (b, f2) = self.addr(me, src);
                (
                    TaskDesc::copy(ud, DevAddr(a), DevAddr(b), u64::from(len)),
                    f1 || f2,
                )
            }
            Desc::Add {
                dst,
                a,
                b,
                n,
                dtype,
            } => {
                let (x, f1) = self.addr(me, dst);
                let (y, f2) = self.addr(me, a);
                let (z, f3) = self.addr(me, b);
                let mut t = TaskDesc::add(
                    ud,
                    Dtype::U32,
                    DevAddr(x),
                    DevAddr(y),
                    DevAddr(z),
                    u64::from(n),
                );
                t.dtype = dtype % 4;
                (t, f1 || f2 || f3)
            }
            Desc::Raw(bytes) => {
                let t = TaskDesc::decode(&bytes);
                // Any address may be another client's: a raw descriptor is "foreign" if any
                // of its ranges (up to 4 bytes per element) reaches another client.
                let len = t.len.saturating_mul(4);
                let foreign = [t.dst, t.src0, t.src1].iter().any(|&a| {
                    self.clients.iter().enumerate().any(|(i, c)| {
                        i != me
                            && (overlaps(a, len.max(1), c.work.dev_addr, c.work.alloc_size)
                                || overlaps(a, len.max(1), c.guard.dev_addr, c.guard.alloc_size))
                    })
                });
                (t.with_user_data(ud), foreign)
            }
        };
        let g = &self.clients[me].guard;
        let writes = matches!(
            Opcode::from_u8(t.opcode),
            Some(Opcode::Fill | Opcode::Copy | Opcode::Add)
        );
        if writes
            && overlaps(
                t.dst,
                t.len.saturating_mul(4).max(1),
                g.dev_addr,
                g.alloc_size,
            )
        {
            t.dst = self.clients[me].work.dev_addr;
        }
        t.user_data |= u64::from(foreign) * FOREIGN;
        t
    }

    pub(super) fn stream(&mut self, who: u8, s: u8) -> Option<(usize, usize)> {
        let me = self.who(who)?;
        let n = self.clients[me].streams.len();
        (n > 0).then(|| (me, s as usize % n))
    }
}
