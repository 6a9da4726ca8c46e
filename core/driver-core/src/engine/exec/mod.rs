//! One descriptor, validated and executed: the copy taken from the command ring is checked
//! field by field (opcode, reserved fields, dtype, alignment, every address range inside one
//! allocation of the submitting client, events of the stream's context) and run against the
//! client's device memory through the platform. The pass loop around it (flow control,
//! records, faults) is the parent module's.

use crate::device::entries::{wait_state, EventExportEntry};
use crate::limits::MAX_EVENT_EXPORTS;
use davinci_uapi::{Dtype, Errno, FaultKind, FaultOperand, Opcode, TaskDesc};

mod launch;

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
    /// Exported events: whose importers a record wakes.
    pub(super) event_exports: &'a Table<EventExportEntry, MAX_EVENT_EXPORTS>,
    pub(super) memory: &'a Allocator<MAX_BLOCKS>,
    pub(super) events: &'a Table<EventEntry<P>, MAX_EVENTS>,
    pub(super) owner: u32,
    pub(super) ctx: u32,
    /// An EVENT_RECORD ran (its waiters must be woken).
    pub(super) recorded: bool,
}

/// Outcome of executing one descriptor.
// A launch's block makes `Long` large; `Done` lives only on the stack between `execute` and
// the pass (no heap in the kernel build to box it into).
#[allow(clippy::large_enum_variant)]
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

/// FILL's pattern width in bytes (its dtype: 0 words, U8 bytes, U16 halfwords) and the
/// pattern as the four bytes of an aligned word.
fn fill_pattern(d: &TaskDesc) -> Result<(u64, [u8; 4])> {
    let p = (d.imm as u32).to_le_bytes();
    match Dtype::from_u8(d.dtype) {
        Some(Dtype::U32) => Ok((4, (d.imm as u32).to_ne_bytes())),
        Some(Dtype::U16) => Ok((2, [p[0], p[1], p[0], p[1]])),
        Some(Dtype::U8) => Ok((1, [p[0]; 4])),
        _ => fail_at!(EBADMSG, "FILL's dtype is 0, U8 or U16", Dtype, Unknown),
    }
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

/// `EINVAL` unless `value` is a multiple of `align` (an element's or a pattern's size).
fn aligned(value: u64, align: u64, op: FaultOperand, msg: &'static str) -> Result<()> {
    if value.is_multiple_of(align) {
        Ok(())
    } else {
        Err(Error::at(Errno::EINVAL, msg, op, FaultKind::Misaligned).value(align as u32))
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
        let h = self.memory.owner_of(offset, 1).ok_or_else(not_owned)?;
        let a = self
            .allocations
            .get(h)
            .filter(|a| a.generation == generation)
            .ok_or_else(not_owned)?;
        // What the client reaches there: the whole allocation if it is its own (and not
        // released to its leases), else the range of one of its imports of it.
        let (start, size) = if a.owner == self.owner && !a.released {
            (a.offset, a.size)
        } else {
            let end_offset = offset.saturating_add(len);
            self.imported_range(h, offset, end_offset)
                .ok_or_else(not_owned)?
        };
        let range_end = dva(generation, start).saturating_add(size);
        if end > range_end {
            let past = u32::try_from(end - range_end).unwrap_or(u32::MAX);
            return Err(Error::at(
                Errno::ERANGE,
                if start == a.offset && size == a.size {
                    "the range runs past the end of its allocation"
                } else {
                    "the range runs past the end of the imported range"
                },
                op,
                FaultKind::PastEnd,
            )
            .value(past));
        }
        Ok((a.owner, offset))
    }

    /// The range `(start, len)` of allocation `alloc` that one of this stream's client's
    /// imports reaches and in which `offset` lies: one holding `[offset, end)` whole if there
    /// is one (two exports of one allocation may overlap), else any (the caller reports by
    /// how much the operand runs past it).
    fn imported_range(&self, alloc: u32, offset: u64, end: u64) -> Option<(u64, u64)> {
        let mut found = None;
        for (_, e) in self.exports.iter() {
            let in_range =
                e.alloc == alloc && offset.checked_sub(e.start).is_some_and(|d| d < e.len);
            let ours = || {
                e.imports.iter().any(|&i| {
                    i != 0
                        && self
                            .allocations
                            .get(i)
                            .is_some_and(|x| x.owner == self.owner)
                })
            };
            if in_range && ours() {
                if end.saturating_sub(e.start) <= e.len {
                    return Some((e.start, e.len));
                }
                found = Some((e.start, e.len));
            }
        }
        found
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
        if op != Opcode::Add && op != Opcode::Fill {
            unused_zero(
                &[(F::Dtype, u64::from(d.dtype))],
                "dtype must be 0 except for ADD and FILL",
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
                let (width, _) = fill_pattern(d)?;
                unused_zero(
                    &[
                        (F::Src0, d.src0),
                        (F::Src1, d.src1),
                        (F::Imm, d.imm >> (width * 8)),
                        (F::Handle, u64::from(d.handle)),
                    ],
                    "FILL uses only dst, len and a pattern of its dtype's width in imm",
                )?;
                aligned(
                    d.dst,
                    width,
                    F::Dst,
                    "FILL needs dst aligned to its pattern",
                )?;
                aligned(
                    d.len,
                    width,
                    F::Len,
                    "FILL needs len a multiple of its pattern",
                )?;
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
                let (dtype, bytes) = add_operands(d)?;
                let size = dtype.size();
                aligned(d.dst, size, F::Dst, "ADD needs dst aligned to its element")?;
                aligned(
                    d.src0,
                    size,
                    F::Src0,
                    "ADD needs src0 aligned to its element",
                )?;
                aligned(
                    d.src1,
                    size,
                    F::Src1,
                    "ADD needs src1 aligned to its element",
                )?;
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
                let e = self.event(d.handle)?;
                if e.import.is_some() {
                    fail_at!(
                        EPERM,
                        "an imported event is only waited for: its exporter records it",
                        Handle,
                        NoSuchEvent
                    );
                }
                let v = locked(&e.state, |e| {
                    e.value = e.value.max(d.imm);
                    e.value
                })?;
                // Clients that imported it wait for it too (their hosts' waits are woken
                // per client on some hosts).
                if let Some(x) = self.event_exports.get(e.export) {
                    for h in x.imports.iter().filter(|&&h| h != 0) {
                        if let Some(i) = self.events.get(*h) {
                            self.platform.notify_waiters(i.owner);
                        }
                    }
                }
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
                let e = self.event(d.handle)?;
                let Some(state) = wait_state(self.events, e) else {
                    fail_at!(
                        ECANCELED,
                        "the imported event's exporter destroyed it",
                        Handle,
                        NoSuchEvent
                    );
                };
                let (value, unreachable) = locked(state, |e| (e.value, e.unreachable(d.imm)))?;
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
                        taken_ns: 0,
                    }))
                }
            }
            Opcode::KernelLaunch => self.take_launch(d),
        }
    }

    /// Runs the next chunk of long task `p` (validated by [`execute`](Self::execute)) that
    /// `work` pays for, and takes its cost from `work`. Its ranges are checked again first:
    /// the control path may have freed them since the last chunk (`EACCES` then, and
    /// nothing written). `Some(result)` once the task is done.
    pub(super) fn advance(&mut self, p: &mut Partial, work: &mut u64) -> Result<Option<u64>> {
        use FaultOperand as F;
        if let Some(l) = p.launch.as_mut() {
            // One unit a pass, its operands checked again first (FREE_MEMORY may have come
            // between two units).
            let step = self
                .check_operands(&l.params)
                .and_then(|()| self.run_unit(&l.params.unit(l.next), l.serial));
            l.next += 1;
            // Its last unit, or one that failed (the launch ends): nothing it read is kept.
            if step.is_err() || l.next >= l.units {
                self.end_launch(l.serial);
            }
            step?;
            *work = 0;
            return Ok((l.next >= l.units).then_some(l.elements));
        }
        let d = p.d;
        let (total, cost) = match Opcode::from_u8(d.opcode) {
            Some(Opcode::Fill) => (d.len, 1),
            Some(Opcode::Copy) => (d.len, COPY_COST),
            Some(Opcode::Add) => {
                let (dtype, bytes) = add_operands(&d)?;
                let cost = if dtype.is_float() {
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
                self.fill(od, dst + p.done, n, fill_pattern(&d)?.1)?;
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

    /// FILL of `n` bytes at `dst` with the repeating `word` (a pattern 1, 2 or 4 bytes wide,
    /// as the four bytes of an aligned word): the bytes before the first aligned word and
    /// after the last are written as they are, the words between by the platform's fill.
    fn fill(&self, owner: u32, dst: u64, n: u64, word: [u8; 4]) -> Result<()> {
        let head = ((4 - (dst & 3)) & 3).min(n);
        if head > 0 {
            let phase = (dst & 3) as usize;
            self.platform
                .mem_write(owner, dst, &word[phase..phase + head as usize])?;
        }
        let body = (n - head) & !3;
        if body > 0 {
            let pattern = u32::from_ne_bytes(word);
            self.platform.mem_fill(owner, dst + head, body, pattern)?;
        }
        let tail = n - head - body;
        if tail > 0 {
            self.platform
                .mem_write(owner, dst + head + body, &word[..tail as usize])?;
        }
        Ok(())
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
            match dtype.size() {
                4 => {
                    while i + 4 <= n {
                        let p = u32::from_ne_bytes([xa[i], xa[i + 1], xa[i + 2], xa[i + 3]]);
                        let q = u32::from_ne_bytes([xb[i], xb[i + 1], xb[i + 2], xb[i + 3]]);
                        // Two's complement: U32 and I32 wrap to the same bits. F32 in
                        // integer arithmetic, so every host (the kernel is soft-float) gives
                        // the same bits.
                        let r = if dtype == Dtype::F32 {
                            softfloat::f32_add(p, q)
                        } else {
                            p.wrapping_add(q)
                        };
                        xa[i..i + 4].copy_from_slice(&r.to_ne_bytes());
                        i += 4;
                    }
                }
                2 => {
                    while i + 2 <= n {
                        let p = u16::from_ne_bytes([xa[i], xa[i + 1]]);
                        let q = u16::from_ne_bytes([xb[i], xb[i + 1]]);
                        let r = match dtype {
                            Dtype::F16 => softfloat::f16_add(p, q),
                            Dtype::Bf16 => softfloat::bf16_add(p, q),
                            _ => p.wrapping_add(q),
                        };
                        xa[i..i + 2].copy_from_slice(&r.to_ne_bytes());
                        i += 2;
                    }
                }
                _ => {
                    while i < n {
                        xa[i] = xa[i].wrapping_add(xb[i]);
                        i += 1;
                    }
                }
            }
            self.platform.mem_write(od, dst + done, xa)?;
            done += n as u64;
        }
        Ok(())
    }
}
