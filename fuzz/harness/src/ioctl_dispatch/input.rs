//! The `ioctl_dispatch` target's input: [`Op`], one step (an open, a close, a structured
//! ioctl with arbitrary fields, a raw request with any bytes, a stream run, an mmap lookup),
//! and [`Pick`], how a step names a handle: one seen before or a raw value.
#![forbid(unsafe_code)]

use arbitrary::Arbitrary;

/// One step of the sequence.
#[derive(Arbitrary, Debug)]
pub(super) enum Op {
    Open {
        control: bool,
        admin: bool,
    },
    Close {
        who: u8,
    },
    CreateContext {
        who: u8,
        flags: u32,
        reserved: u64,
    },
    DestroyContext {
        who: u8,
        h: Pick,
    },
    CreateStream {
        who: u8,
        ctx: Pick,
        ce_log: u8,
        ee_log: u8,
        flags: u32,
        pad: u32,
    },
    DestroyStream {
        who: u8,
        h: Pick,
    },
    Alloc {
        who: u8,
        size: u32,
        big: bool,
        flags: u32,
    },
    Free {
        who: u8,
        h: Pick,
    },
    CreateEvent {
        who: u8,
        ctx: Pick,
        flags: u32,
    },
    DestroyEvent {
        who: u8,
        h: Pick,
    },
    Wait {
        who: u8,
        kind: u8,
        h: Pick,
        value: u64,
        timeout_ns: u64,
        pad: u32,
    },
    Submit {
        who: u8,
        stream: Pick,
        desc: [u8; 64],
        flags: u32,
    },
    Notify {
        who: u8,
        h: Pick,
    },
    GetInfo {
        who: u8,
    },
    QueryShare {
        who: u8,
    },
    SetShare {
        who: u8,
        mode: u32,
        clients: u32,
    },
    List {
        who: u8,
        capacity: u8,
        entry_size: u16,
        buf_off: u32,
        null: bool,
    },
    Run {
        h: Pick,
        budget: u8,
    },
    Mmap {
        who: u8,
        kind: u8,
        h: Pick,
        len: u64,
    },
    /// Any command number (from the table or not) with any bytes (right size or not).
    Raw {
        who: u8,
        cmd: u8,
        request: u32,
        arg: Vec<u8>,
        exact: bool,
    },
}

/// Which handle: one seen before (of the right kind, any owner) or a raw value.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub(super) enum Pick {
    Seen(u8),
    Raw(u32),
}

/// The handle `p` names among `pool` (the handles of its kind seen so far).
pub(super) fn pick(p: Pick, pool: &[u32]) -> u32 {
    match p {
        Pick::Seen(i) if !pool.is_empty() => pool[i as usize % pool.len()],
        Pick::Seen(i) => i as u32,
        Pick::Raw(v) => v,
    }
}
