//! The `mock_device` target's input: [`Op`], one step of some client (decoded with
//! `arbitrary`), the descriptors it names ([`Desc`]) and where their addresses point
//! ([`Target`]: its own memory, another client's, anywhere).
#![forbid(unsafe_code)]

use arbitrary::Arbitrary;

/// Where a descriptor's address points.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Target {
    /// Into the client's own work buffer.
    Own(u16),
    /// Into another client's work or guard allocation.
    Other {
        /// Which client (modulo the live ones).
        who: u8,
        /// Its guard allocation (else its work buffer).
        guard: bool,
        /// Offset.
        off: u16,
    },
    /// Any address.
    Raw(u64),
}

/// A descriptor as the fuzzer names it.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Desc {
    /// NOP.
    Nop,
    /// FILL `len` bytes.
    Fill {
        /// Destination.
        dst: Target,
        /// Length.
        len: u16,
        /// Pattern.
        imm: u32,
    },
    /// COPY `len` bytes.
    Copy {
        /// Destination.
        dst: Target,
        /// Source.
        src: Target,
        /// Length.
        len: u16,
    },
    /// ADD `n` elements.
    Add {
        /// Destination.
        dst: Target,
        /// First operand.
        a: Target,
        /// Second operand.
        b: Target,
        /// Elements.
        n: u16,
        /// Element type (raw).
        dtype: u8,
    },
    /// Any 64 bytes.
    Raw([u8; 64]),
}

/// One step.
#[derive(Arbitrary, Debug)]
pub enum Op {
    /// A new client (skipped at [`MAX_CLIENTS`](super::MAX_CLIENTS)).
    Open,
    /// Closes a client (its mappings stay mapped until the harness drops them).
    Close {
        /// Which.
        who: u8,
    },
    /// A stream with `2^(1 + ce % 6)` command slots.
    CreateStream {
        /// Which client.
        who: u8,
        /// Command ring depth (log).
        ce: u8,
        /// Event ring depth over the command ring's (log, mod 3).
        ee: u8,
    },
    /// DESTROY_STREAM.
    DestroyStream {
        /// Which client.
        who: u8,
        /// Which stream.
        s: u8,
    },
    /// Descriptors written at the tail the client keeps, published, maybe the doorbell.
    Push {
        /// Which client.
        who: u8,
        /// Which stream.
        s: u8,
        /// The descriptors (at most 16).
        descs: Vec<Desc>,
        /// Ring the doorbell after publishing.
        kick: bool,
    },
    /// Any value into a header word (tail, head, entries, mask, flags, dropped, error,
    /// error_index) of the command or event ring.
    Header {
        /// Which client.
        who: u8,
        /// Which stream.
        s: u8,
        /// The command ring (else the event ring).
        cmd: bool,
        /// Field (mod 8).
        field: u8,
        /// Value.
        value: u32,
    },
    /// The doorbell: the futex word incremented and woken, as the shim rings it.
    Kick {
        /// Which client.
        who: u8,
        /// Which stream.
        s: u8,
    },
    /// NOTIFY.
    Notify {
        /// Which client.
        who: u8,
        /// Which stream.
        s: u8,
    },
    /// SUBMIT_TASK.
    Submit {
        /// Which client.
        who: u8,
        /// Which stream.
        s: u8,
        /// The descriptor.
        desc: Desc,
    },
    /// Reads the event ring's records up to its tail and moves the head there.
    Reap {
        /// Which client.
        who: u8,
        /// Which stream.
        s: u8,
    },
    /// WAIT_EVENT on a stream for everything pushed so far (a short timeout).
    Wait {
        /// Which client.
        who: u8,
        /// Which stream.
        s: u8,
    },
    /// A checked FILL of the client's check area through its private stream.
    Check {
        /// Which client.
        who: u8,
    },
    /// Any command (from the table, or any request number) with any bytes.
    Ioctl {
        /// Which client.
        who: u8,
        /// Index into the command table (else `request`).
        cmd: u8,
        /// Raw request number.
        request: u32,
        /// The argument.
        arg: Vec<u8>,
        /// Resize the argument to the command's size.
        exact: bool,
    },
    /// MMAP of a cookie: one of the client's objects, another client's, or raw.
    Mmap {
        /// Which client.
        who: u8,
        /// Which object.
        what: u8,
        /// Raw cookie (when `what` picks none).
        cookie: u64,
        /// Length.
        len: u32,
    },
}
