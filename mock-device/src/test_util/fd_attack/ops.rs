//! The attack's input: [`Op`], one step of the attacker (a file operation on one of its
//! descriptors, [`Part`], or a ring operation) or of the good client, decoded from fuzz
//! input with `arbitrary`; [`desc`], the task descriptors the attacker pushes; and the
//! bounds of a sequence.
#![forbid(unsafe_code)]

use arbitrary::Arbitrary;
use davinci_uapi::{DevAddr, Dtype, TaskDesc};

/// Most operations [`run`](super::run) executes from one sequence.
pub const MAX_OPS: usize = 96;
/// Longest write of one [`Op::Write`].
pub const MAX_WRITE: usize = 256;
/// The attacker's allocation, which its descriptors work on (and run past).
pub(super) const ATTACK_ALLOC: u64 = 8192;

/// Which descriptor of the attacker's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub enum Part {
    /// The command ring.
    Cmd,
    /// The event ring.
    Event,
    /// The doorbell page.
    Doorbell,
    /// An allocation's memory (its own memfd).
    Memory,
}

/// Every part, in [`Part`]'s order (its index in the attacker's descriptors).
pub(super) const PARTS: [Part; 4] = [Part::Cmd, Part::Event, Part::Doorbell, Part::Memory];

/// One step of the attacker (or of the good client).
#[derive(Debug, Clone, Arbitrary)]
pub enum Op {
    /// `ftruncate(len)`: must fail with `EPERM` unless `len` is the size.
    Truncate {
        /// Which descriptor.
        part: Part,
        /// The new length.
        len: u32,
    },
    /// `fallocate` with raw mode bits (punch hole, keep size, anything).
    Fallocate {
        /// Which descriptor.
        part: Part,
        /// Mode bits (`FALLOC_FL_*`), passed as they are.
        mode: u8,
        /// Offset.
        offset: u32,
        /// Length.
        len: u32,
    },
    /// `F_ADD_SEALS` with raw bits: must fail with `EPERM` (the device sealed the seals).
    AddSeals {
        /// Which descriptor.
        part: Part,
        /// `F_SEAL_*` bits.
        seals: u8,
    },
    /// `pwrite` of `bytes` at `offset` (any offset; past the end grows nothing).
    Write {
        /// Which descriptor.
        part: Part,
        /// Offset (taken modulo twice the size, so half the writes land past the end).
        offset: u32,
        /// The bytes (at most [`MAX_WRITE`] are written).
        bytes: Vec<u8>,
    },
    /// Stores `value` in header field `field` (mod 8: tail, head, entries, mask, flags,
    /// dropped, error, error_index) of the command or the event ring.
    Header {
        /// The command ring (else the event ring).
        cmd: bool,
        /// Field index.
        field: u8,
        /// Value.
        value: u32,
    },
    /// Reopens the descriptor through `/proc/self/fd` and closes the original.
    Reopen {
        /// Which descriptor.
        part: Part,
    },
    /// Closes the descriptor and maps the cookie again.
    Remap {
        /// Which descriptor.
        part: Part,
    },
    /// Writes `n` descriptors from the tail it reads, publishes the tail, maybe NOTIFY.
    Push {
        /// How many (mod 20: sometimes more than fit).
        n: u8,
        /// Which descriptors ([`desc`]).
        kind: u8,
        /// NOTIFY afterwards.
        notify: bool,
    },
    /// SUBMIT_TASK (the slow path) of one descriptor.
    Submit {
        /// Which descriptor ([`desc`]).
        kind: u8,
    },
    /// Reaps the event ring: head = the tail it reads.
    Reap,
    /// WAIT_EVENT on the stream for one more completion than submitted so far, `ms % 8` ms.
    Wait {
        /// Timeout in ms (mod 8).
        ms: u8,
    },
    /// DESTROY_STREAM and CREATE_STREAM (new descriptors for the rings and the doorbell).
    Recreate,
    /// The good client runs a checked round.
    Good,
}

/// The descriptor `kind` names, for an attacker whose allocation is at `mine` and whose
/// neighbour's is at `theirs`: NOP, FILL/COPY/ADD on its own memory, runs past its end, a
/// FILL of the other client's memory (refused by the device), an invalid opcode.
pub fn desc(kind: u8, user_data: u64, mine: DevAddr, theirs: DevAddr) -> TaskDesc {
    match kind % 8 {
        0 => TaskDesc::nop(user_data),
        1 => TaskDesc::fill(user_data, mine, ATTACK_ALLOC, u32::from(kind)),
        2 => TaskDesc::copy(user_data, mine, mine + ATTACK_ALLOC / 2, ATTACK_ALLOC / 2),
        3 => TaskDesc::add(
            user_data,
            Dtype::U32,
            mine,
            mine,
            mine + 4096,
            ATTACK_ALLOC / 8,
        ),
        4 => TaskDesc::fill(user_data, mine, ATTACK_ALLOC * 4, 1),
        5 => TaskDesc::fill(user_data, theirs, 4096, 0xbad0_bad0),
        6 => TaskDesc::copy(user_data, mine, theirs, 4096),
        _ => {
            let mut d = TaskDesc::nop(user_data);
            d.opcode = 0xee;
            d
        }
    }
}
