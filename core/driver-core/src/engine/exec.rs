//! One descriptor, validated and executed: the copy taken from the command ring is checked
//! field by field (opcode, reserved fields, dtype, alignment, every address range inside one
//! allocation of the submitting client, events of the stream's context) and run against the
//! client's device memory through the platform. The pass loop around it (flow control,
//! records, faults) is the parent module's.

use davinci_uapi::{Dtype, Errno, FaultKind, FaultOperand, Opcode, TaskDesc};

use crate::device::entries::{Allocation, EventEntry, ExportEntry, Partial, Pending};
use crate::error::{fail_at, Error, Result};
use crate::limits::{
    ADD_COST, ADD_F32_COST, COPY_COST, MAX_ALLOCATIONS, MAX_BLOCKS, MAX_EVENTS, MAX_EXPORTS,
};
use crate::memory::{dva, split_dva, Allocator};
use crate::platform::{locked, Platform};
use crate::softfloat;
use crate::table::Table;

/// Elements per chunk of ADD (stack buffers, no allocation): 256 (1 KiB a buffer), for a
/// kernel stack, unless in user space (feature `std`): 4096 (16 KiB), where each chunk may
/// cost the platform system calls (the mock device reaches its memory through the kernel).
#[cfg(not(feature = "std"))]
const CHUNK: usize = 256;
#[cfg(feature = "std")]
const CHUNK: usize = 4096;

/// What executing a descriptor of one stream reaches: the device's memory, allocations and
/// events, seen as the stream's owner in the stream's context.
pub(super) struct Exec<'a, P: Platform> {
    pub(super) platform: &'a P,
    pub(super) allocations: &'a Table<Allocation, MAX_ALLOCATIONS>,
    pub(super) exports: &'a Table<ExportEntry, MAX_EXPORTS>,
    pub(super) memory: &'a Allocator<MAX_BLOCKS>,
    pub(super) events: &'a Table<EventEntry<P>, MAX_EVENTS>,
    pub(super) owner: u32,
    pub(super) ctx: u32,
    /// An EVENT_RECORD ran (its waiters must be woken).
    pub(super) recorded: bool,
}

/// Outcome of executing one descriptor.
pub(super) enum Done {
    /// Completed with this result.
    Complete(u64),
    /// EVENT_WAIT not yet satisfied.
    Wait(Pending),
    /// A long task (FILL, COPY, ADD), validated and not yet run: [`Exec::advance`] runs it,
    /// a budget of work at a time.
    Long(Partial),
}

/// Bytes of the next chunk: what is left, or what `work` pays for at `cost` per byte, a
/// multiple of 4 unless it is the rest (every FILL and ADD length is one), at least 4.
fn chunk(left: u64, work: u64, cost: u64) -> u64 {
    // `checked_div`, not `/`: a division's panic path (never taken: every cost is at least
    // 1) is a call Linux 6.12's objtool believes returns ("falls through" warning).
    let affordable = work.checked_div(cost).unwrap_or(0).max(4) & !3;
    left.min(affordable)
}

/// ADD's dtype and its length in bytes.
fn add_operands(d: &TaskDesc) -> Result<(Dtype, u64)> {
    let Some(dtype) = Dtype::from_u8(d.dtype) else {
        fail_at!(EBADMSG, "unknown ADD dtype", Dtype, Unknown);
    };
    let Some(bytes) = d.len.checked_mul(dtype.size()) else {
        fail_at!(ERANGE, "ADD element count overflows", Len, Overflow);
    };
    Ok((dtype, bytes))
}

/// `true` if `d` is a NOP that [`Exec::execute`] accepts: opcode NOP and every other field
/// but `user_data` zero (reserved words, flags, dtype, operands, handle). Whole words OR-ed
/// together, one test: the engine's fast path for runs of NOPs. Anything else, a NOP with one
/// stray bit included, goes through `execute`, which finds the field at fault.
#[inline]
pub(super) fn plain_nop(d: &TaskDesc) -> bool {
    // Shifted to where the fields lie in their 8-byte words (on a little-endian machine:
    // the compiler then tests the words as they were loaded, without taking them apart).
    let head = u64::from(d.dtype) << 8 | u64::from(d.flags) << 16 | u64::from(d.reserved0) << 32;
    let tail = u64::from(d.handle) | u64::from(d.reserved1) << 32;
    let rest = d.dst | d.src0 | d.src1 | d.len | d.imm;
    d.opcode == Opcode::Nop as u8 && (head | tail | rest) == 0
}

/// The first of `fields` that is not zero, if any: a field this opcode does not use. Every
/// caller lists them in the order docs/abi.md 7 states (`dst, src0, src1, len, imm, handle`).
#[cold]
#[inline(never)]
fn first_nonzero(fields: &[(FaultOperand, u64)]) -> FaultOperand {
    fields
        .iter()
        .find(|(_, v)| *v != 0)
        .map_or(FaultOperand::Reserved, |(op, _)| *op)
}

/// `EBADMSG` about the first used-but-not-allowed field, if any. The fields are OR-ed first
/// (the common case, all zero, is one test); only a descriptor at fault looks for which.
#[inline(always)]
fn unused_zero(fields: &[(FaultOperand, u64)], msg: &'static str) -> Result<()> {
    if fields.iter().fold(0, |acc, (_, v)| acc | v) == 0 {
        return Ok(());
    }
    Err(Error::at(
        Errno::EBADMSG,
        msg,
        first_nonzero(fields),
        FaultKind::NotZero,
    ))
}

/// `EINVAL` unless `value` is a multiple of 4 (the alignment every element and pattern has).
fn aligned4(value: u64, op: FaultOperand, msg: &'static str) -> Result<()> {
    if value.is_multiple_of(4) {
        Ok(())
    } else {
        Err(Error::at(Errno::EINVAL, msg, op, FaultKind::Misaligned).value(4))
    }
}

impl<P: Platform> Exec<'_, P> {
    /// Device-memory offset of `[addr, addr + len)` (operand `op`), and the client whose
    /// memory it is (the platform's key), if it lies inside one allocation of the submitting
    /// client or one it imported. Otherwise: `ERANGE` if the computation overflows or the
    /// range starts in such an allocation and runs past its end (the fault says by how many
    /// bytes), `EACCES` if it does not start in one.
    fn range(&self, addr: u64, len: u64, op: FaultOperand) -> Result<(u32, u64)> {
        let Some(end) = addr.checked_add(len) else {
            return Err(Error::at(
                Errno::ERANGE,
                "address + length overflows",
                op,
                FaultKind::Overflow,
            ));
        };
        let not_owned = || {
            Error::at(
                Errno::EACCES,
                "the address is not in one of this client's allocations",
                op,
                FaultKind::NotOwned,
            )
        };
        // A freed allocation's address names nothing, even once its memory is reused: the
        // generation must match too.
        let (generation, offset) = split_dva(addr).ok_or_else(not_owned)?;
        let a = self
            .memory
            .owner_of(offset, 1)
            .and_then(|h| self.allocations.get(h))
            .filter(|a| a.generation == generation)
            .filter(|a| {
                a.owner == self.owner
                    || (a.export != 0
                        && self
                            .exports
                            .get(a.export)
                            .is_some_and(|e| e.imported_by(self.owner, self.allocations)))
            })
            .ok_or_else(not_owned)?;
        let alloc_end = dva(generation, a.offset).saturating_add(a.size);
        if end > alloc_end {
            let past = u32::try_from(end - alloc_end).unwrap_or(u32::MAX);
            return Err(Error::at(
                Errno::ERANGE,
                "the range runs past the end of its allocation",
                op,
                FaultKind::PastEnd,
            )
            .value(past));
        }
        Ok((a.owner, offset))
    }

    fn event(&self, handle: u32) -> Result<&'_ EventEntry<P>> {
        let (owner, ctx) = (self.owner, self.ctx);
        match self.events.get(handle) {
            Some(e) if e.owner == owner && e.ctx == ctx => Ok(e),
            _ => Err(Error::at(
                Errno::ENOENT,
                "no such event in this stream's context",
                FaultOperand::Handle,
                FaultKind::NoSuchEvent,
            )),
        }
    }

    pub(super) fn execute(&mut self, d: &TaskDesc) -> Result<Done> {
        use FaultOperand as F;
        unused_zero(
            &[
                (F::Reserved, u64::from(d.flags)),
                (F::Reserved, u64::from(d.reserved0)),
                (F::Reserved, u64::from(d.reserved1)),
            ],
            "reserved descriptor fields must be 0",
        )?;
        let Some(op) = Opcode::from_u8(d.opcode) else {
            fail_at!(EBADMSG, "unknown opcode", Opcode, Unknown);
        };
        if op != Opcode::Add {
            unused_zero(
                &[(F::Dtype, u64::from(d.dtype))],
                "dtype must be 0 except for ADD",
            )?;
        }
        match op {
            Opcode::Nop => {
                unused_zero(
                    &[
                        (F::Dst, d.dst),
                        (F::Src0, d.src0),
                        (F::Src1, d.src1),
                        (F::Len, d.len),
                        (F::Imm, d.imm),
                        (F::Handle, u64::from(d.handle)),
                    ],
                    "NOP operands must be 0",
                )?;
                Ok(Done::Complete(0))
            }
            Opcode::Fill => {
                unused_zero(
                    &[
                        (F::Src0, d.src0),
                        (F::Src1, d.src1),
                        (F::Imm, d.imm >> 32),
                        (F::Handle, u64::from(d.handle)),
                    ],
                    "FILL uses only dst, len and a 32-bit imm",
                )?;
                aligned4(d.dst, F::Dst, "FILL needs dst 4-byte aligned")?;
                aligned4(d.len, F::Len, "FILL needs len a multiple of 4 bytes")?;
                self.range(d.dst, d.len, F::Dst)?;
                Ok(Done::Long(Partial::new(d)))
            }
            Opcode::Copy => {
                unused_zero(
                    &[
                        (F::Src1, d.src1),
                        (F::Imm, d.imm),
                        (F::Handle, u64::from(d.handle)),
                    ],
                    "COPY uses only dst, src0 and len",
                )?;
                self.range(d.dst, d.len, F::Dst)?;
                self.range(d.src0, d.len, F::Src0)?;
                Ok(Done::Long(Partial::new(d)))
            }
            Opcode::Add => {
                unused_zero(
                    &[(F::Imm, d.imm), (F::Handle, u64::from(d.handle))],
                    "ADD uses only dtype, dst, src0, src1 and len",
                )?;
                let (_, bytes) = add_operands(d)?;
                aligned4(d.dst, F::Dst, "ADD needs dst 4-byte aligned")?;
                aligned4(d.src0, F::Src0, "ADD needs src0 4-byte aligned")?;
                aligned4(d.src1, F::Src1, "ADD needs src1 4-byte aligned")?;
                self.range(d.dst, bytes, F::Dst)?;
                self.range(d.src0, bytes, F::Src0)?;
                self.range(d.src1, bytes, F::Src1)?;
                Ok(Done::Long(Partial::new(d)))
            }
            Opcode::EventRecord => {
                unused_zero(
                    &[
                        (F::Dst, d.dst),
                        (F::Src0, d.src0),
                        (F::Src1, d.src1),
                        (F::Len, d.len),
                    ],
                    "EVENT_RECORD uses only handle and imm",
                )?;
                let v = locked(&self.event(d.handle)?.state, |e| {
                    e.value = e.value.max(d.imm);
                    e.value
                })?;
                self.recorded = true;
                Ok(Done::Complete(v))
            }
            Opcode::EventWait => {
                unused_zero(
                    &[
                        (F::Dst, d.dst),
                        (F::Src0, d.src0),
                        (F::Src1, d.src1),
                        (F::Len, d.len),
                    ],
                    "EVENT_WAIT uses only handle and imm",
                )?;
                let (value, unreachable) = locked(&self.event(d.handle)?.state, |e| {
                    (e.value, e.unreachable(d.imm))
                })?;
                if value >= d.imm {
                    Ok(Done::Complete(value))
                } else if unreachable.is_some() {
                    fail_at!(
                        EIO,
                        "the event will not reach this value: the stream that was to record it was stopped",
                        Imm,
                        Unreachable
                    )
                } else {
                    Ok(Done::Wait(Pending {
                        event: d.handle,
                        value: d.imm,
                        user_data: d.user_data,
                    }))
                }
            }
            Opcode::KernelLaunch => {
                fail_at!(
                    EBADMSG,
                    "KERNEL_LAUNCH needs hardware; the software engine has no kernels",
                    Opcode,
                    Unknown
                )
            }
        }
    }

    /// Runs the next chunk of long task `p` (validated by [`execute`](Self::execute)) that
    /// `work` pays for, and takes its cost from `work`. Its ranges are checked again first:
    /// the control path may have freed them since the last chunk (`EACCES` then, and
    /// nothing written). `Some(result)` once the task is done.
    pub(super) fn advance(&mut self, p: &mut Partial, work: &mut u64) -> Result<Option<u64>> {
        use FaultOperand as F;
        let d = p.d;
        let (total, cost) = match Opcode::from_u8(d.opcode) {
            Some(Opcode::Fill) => (d.len, 1),
            Some(Opcode::Copy) => (d.len, COPY_COST),
            Some(Opcode::Add) => {
                let (dtype, bytes) = add_operands(&d)?;
                let cost = if dtype == Dtype::F32 {
                    ADD_F32_COST
                } else {
                    ADD_COST
                };
                (bytes, cost)
            }
            // `execute` makes a partial task only of the three above.
            _ => fail_at!(EBADMSG, "not a long task", Opcode, Unknown),
        };
        let n = chunk(total - p.done, *work, cost);
        match Opcode::from_u8(d.opcode) {
            Some(Opcode::Fill) => {
                let (od, dst) = self.range(d.dst, total, F::Dst)?;
                self.platform.mem_fill(od, dst + p.done, n, d.imm as u32)?;
            }
            Some(Opcode::Copy) => {
                let (od, dst) = self.range(d.dst, total, F::Dst)?;
                let (os, src) = self.range(d.src0, total, F::Src0)?;
                // memmove in chunks: front to back, unless the destination overlaps the
                // source from above (then back to front, so no byte is overwritten before it
                // is read).
                let at = if dst > src && dst - src < total {
                    total - p.done - n
                } else {
                    p.done
                };
                self.platform.mem_copy((od, dst + at), (os, src + at), n)?;
            }
            _ => {
                let (dtype, _) = add_operands(&d)?;
                let (od, dst) = self.range(d.dst, total, F::Dst)?;
                let (oa, a) = self.range(d.src0, total, F::Src0)?;
                let (ob, b) = self.range(d.src1, total, F::Src1)?;
                let at = p.done;
                self.add(dtype, (od, dst + at), (oa, a + at), (ob, b + at), n)?;
            }
        }
        p.done += n;
        *work = work.saturating_sub(n.saturating_mul(cost));
        Ok((p.done >= total).then_some(d.len))
    }

    /// ADD of `bytes` at device-memory places `(owner, offset)`.
    fn add(
        &mut self,
        dtype: Dtype,
        (od, dst): (u32, u64),
        (oa, a): (u32, u64),
        (ob, b): (u32, u64),
        bytes: u64,
    ) -> Result<()> {
        let mut ba = [0u8; CHUNK * 4];
        let mut bb = [0u8; CHUNK * 4];
        let mut done = 0u64;
        while done < bytes {
            let n = (bytes - done).min((CHUNK * 4) as u64) as usize;
            let (xa, xb) = (&mut ba[..n], &mut bb[..n]);
            self.platform.mem_read(oa, a + done, xa)?;
            self.platform.mem_read(ob, b + done, xb)?;
            // An index loop rather than `chunks_exact(4).zip(..)`: the iterator's length
            // divides by the chunk size, and Linux 6.12's objtool does not know that
            // `panic_const_div_by_zero` never returns (a "falls through" warning per copy).
            let mut i = 0;
            while i + 4 <= n {
                let p = u32::from_ne_bytes([xa[i], xa[i + 1], xa[i + 2], xa[i + 3]]);
                let q = u32::from_ne_bytes([xb[i], xb[i + 1], xb[i + 2], xb[i + 3]]);
                // Two's complement: U32 and I32 wrap to the same bits. F32 in integer
                // arithmetic, so every host (the kernel is soft-float) gives the same bits.
                let r = match dtype {
                    Dtype::U32 | Dtype::I32 => p.wrapping_add(q),
                    Dtype::F32 => softfloat::f32_add(p, q),
                };
                xa[i..i + 4].copy_from_slice(&r.to_ne_bytes());
                i += 4;
            }
            self.platform.mem_write(od, dst + done, xa)?;
            done += n as u64;
        }
        Ok(())
    }
}
