//! What a stream hands back: [`Completion`] (one task's event record, with its [`TaskId`])
//! and [`StreamError`] (why the device stopped a stream).
#![forbid(unsafe_code)]

use std::fmt;

use davinci_uapi::{Errno, EventRecord, Fault, Opcode};

use crate::error::{Error, Result};

/// A task's place in its stream: how many descriptors the stream was given before it
/// (the shim's own EVENT_RECORD/EVENT_WAIT/NOP descriptors included), from 0. The low 32 bits
/// are its free-running command-ring index, which the device reports for a stopped stream
/// ([`StreamError::index`](crate::StreamError::index)); [`Stream::submit`](crate::Stream::submit)
/// returns it and [`Completion::task`] carries it, so a runtime maps either to its own task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId(pub(crate) u64);

impl TaskId {
    /// The number.
    pub fn get(self) -> u64 {
        self.0
    }

    /// Its command-ring index (the low 32 bits).
    pub fn ring_index(self) -> u32 {
        self.0 as u32
    }

    /// The id `n` tasks later (a batch's tasks have consecutive ids).
    pub fn offset(self, n: u64) -> TaskId {
        TaskId(self.0.wrapping_add(n))
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "task #{}", self.0)
    }
}

/// One task's completion, copied out of the event ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Completion {
    /// The descriptor's `user_data`.
    pub user_data: u64,
    /// 0 on success, else a negative errno.
    pub status: i32,
    /// The descriptor's opcode.
    pub opcode: u8,
    /// Opcode-specific result (bytes, elements, event value).
    pub result: u64,
    /// Device time of completion (ns).
    pub timestamp_ns: u64,
    /// The task's place in its stream (what `submit` returned for it).
    pub task: TaskId,
}

impl From<EventRecord> for Completion {
    fn from(r: EventRecord) -> Self {
        Self {
            user_data: r.user_data,
            status: r.status,
            opcode: r.opcode,
            result: r.result,
            timestamp_ns: r.timestamp_ns,
            task: TaskId(0),
        }
    }
}

impl Completion {
    /// The descriptor's opcode as an [`Opcode`] (`None` for a value this ABI does not
    /// define).
    pub fn opcode(&self) -> Option<Opcode> {
        Opcode::from_u8(self.opcode)
    }

    /// Why a failed task failed, from a device with `Features::FAULT_DETAIL` (ABI 1.2):
    /// which operand, what was wrong with it, by how much. `None` for a success, or when the
    /// device did not say.
    pub fn fault(&self) -> Option<Fault> {
        if self.is_ok() {
            None
        } else {
            Fault::decode(self.result)
        }
    }

    /// Whether the task succeeded.
    pub fn is_ok(&self) -> bool {
        self.status == 0
    }

    /// The errno of a failed task (`None` on success or for an errno this ABI does not use).
    pub fn errno(&self) -> Option<Errno> {
        self.status
            .checked_neg()
            .filter(|&c| c > 0)
            .and_then(Errno::from_code)
    }

    /// The result, or the task's error.
    pub fn result(&self) -> Result<u64> {
        if self.is_ok() {
            Ok(self.result)
        } else {
            Err(self.to_error("task"))
        }
    }

    /// `ERANGE (result out of range): src1: the range runs 4 bytes past the end of its
    /// allocation`.
    fn describe_status(&self) -> String {
        let mut s = match self.errno() {
            Some(e) => format!("{} ({})", e.name(), e.describe()),
            None => format!("status {}", self.status),
        };
        if let Some(f) = self.fault() {
            s.push_str(&format!(": {f}"));
        }
        s
    }

    /// `task #12 user_data=0x7 (ADD) failed: ...`, with ` at command index N` when known.
    pub(crate) fn describe(&self, index: Option<u32>) -> String {
        let op = match self.opcode() {
            Some(op) => format!("{op:?}").to_uppercase(),
            None => format!("opcode {}", self.opcode),
        };
        let at = index
            .map(|i| format!(" at command index {i}"))
            .unwrap_or_default();
        format!(
            "{} user_data={:#x} ({op}){at} failed: {}",
            self.task,
            self.user_data,
            self.describe_status()
        )
    }

    pub(crate) fn to_error(self, op: &'static str) -> Error {
        Error::with_errno(self.errno(), op, self.describe(None))
    }
}

/// Why a stream stopped, as the device wrote it in the command ring's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamError {
    errno: Option<Errno>,
    raw: u32,
    index: u32,
    task: TaskId,
}

impl StreamError {
    /// What the command ring's header says: the raw `error` value and `error_index`, and the
    /// task that index belongs to.
    pub(crate) fn from_header(raw: u32, index: u32, task: TaskId) -> StreamError {
        StreamError {
            errno: i32::try_from(raw).ok().and_then(Errno::from_code),
            raw,
            index,
            task,
        }
    }

    /// The task at [`index`](Self::index): the one that failed (what
    /// [`Stream::submit`](crate::Stream::submit) returned for it), or for a corrupt ring the
    /// position where the device stopped reading.
    pub fn task(&self) -> TaskId {
        self.task
    }

    /// The errno (`EPROTO` for a corrupt ring, `EBADMSG`/`EINVAL`/`EACCES`/`ENOENT` for a bad
    /// descriptor); `None` if the device wrote a value this ABI does not define.
    pub fn errno(&self) -> Option<Errno> {
        self.errno
    }

    /// The raw value of the `error` field.
    pub fn raw(&self) -> u32 {
        self.raw
    }

    /// Free-running command-ring index of the descriptor (or ring position) that failed.
    pub fn index(&self) -> u32 {
        self.index
    }
}

impl fmt::Display for StreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.errno {
            // docs/abi.md 5.6: only a device reset stops a stream with ECANCELED.
            Some(Errno::ECANCELED) => write!(
                f,
                "ECANCELED: the device was reset; nothing from command index {} on ran",
                self.index
            ),
            // docs/abi.md 5.6: a lost device (1.4) stops every mapped stream with ENODEV.
            Some(Errno::ENODEV) => write!(
                f,
                "ENODEV: the device was lost; nothing from command index {} on ran",
                self.index
            ),
            Some(e) => write!(
                f,
                "{} ({}) at command index {}",
                e.name(),
                e.describe(),
                self.index
            ),
            None => write!(f, "error {} at command index {}", self.raw, self.index),
        }
    }
}
