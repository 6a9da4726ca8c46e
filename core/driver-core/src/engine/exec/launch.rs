//! KERNEL_LAUNCH as the engine takes it: the descriptor's fields, one copy of the parameter
//! block, every operand's range (again before each unit), and the unit run where the build
//! has the kernels.

use davinci_uapi::kernels::KernelId;
use davinci_uapi::{Errno, FaultKind, FaultOperand, TaskDesc};

use super::{aligned, unused_zero, Done, Exec};
use crate::device::entries::Partial;
use crate::engine::launch::{Launch, Params, MAX_PARAMS};
use crate::error::{fail_at, Error, Result};
use crate::platform::Platform;

impl<P: Platform> Exec<'_, P> {
    /// A KERNEL_LAUNCH taken: the descriptor's fields, then one copy of its parameter block,
    /// checked as abi.md 6.1 orders it.
    pub(super) fn take_launch(&mut self, d: &TaskDesc) -> Result<Done> {
        use FaultOperand as F;
        unused_zero(
            &[(F::Dst, d.dst), (F::Src1, d.src1)],
            "KERNEL_LAUNCH uses only handle, imm, src0 and len",
        )?;
        let kernel = KernelId::from_u32(d.handle).filter(|_| crate::engine::KERNELS);
        let Some(kernel) = kernel else {
            fail_at!(
                EBADMSG,
                "this device runs no kernel of that handle",
                Handle,
                Unknown
            );
        };
        if d.imm > 1 {
            fail_at!(
                EINVAL,
                "a built-in kernel's block count is 0 or 1",
                Imm,
                Invalid
            );
        }
        let size = kernel.params_size();
        if d.len != size as u64 || size > MAX_PARAMS {
            fail_at!(EINVAL, "len must be the kernel's params_size", Len, Invalid);
        }
        aligned(
            d.src0,
            8,
            F::Src0,
            "the parameter block must be 8-byte aligned",
        )?;
        let (owner, at) = self.range(d.src0, d.len, F::Src0)?;
        let mut block = [0u8; MAX_PARAMS];
        self.platform.mem_read(owner, at, &mut block[..size])?;
        let params = Params::decode(kernel, &block[..size]);
        let elements = params.check()?;
        if elements == 0 {
            return Ok(Done::Complete(0));
        }
        self.check_operands(&params)?;
        params.check_output()?;
        let mut p = Partial::new(d);
        p.launch = Some(Launch {
            params,
            units: params.units(),
            next: 0,
            elements,
            serial: crate::engine::launch::next_serial(),
        });
        Ok(Done::Long(p))
    }

    /// Step 5 of abi.md 6.1: every operand aligned to its element and its footprint inside
    /// one allocation of the caller (or one it imported).
    pub(super) fn check_operands(&self, params: &Params) -> Result<()> {
        let (ops, n) = params.operands();
        for o in &ops[..n] {
            let size = o.dtype.size();
            aligned(
                o.addr,
                size,
                o.op,
                "an operand must be aligned to its element",
            )?;
            let Some(bytes) = o.bytes() else {
                return Err(Error::at(
                    Errno::ERANGE,
                    "the operand's footprint overflows",
                    o.op,
                    FaultKind::Overflow,
                ));
            };
            if bytes > 0 {
                self.range(o.addr, bytes, o.op)?;
            }
        }
        Ok(())
    }

    /// Runs one unit of a launch (a launch of its own over a part of the output).
    #[cfg(feature = "kernels")]
    pub(super) fn run_unit(&self, unit: &Params, serial: u64) -> Result<()> {
        crate::engine::compute::run(self, unit, serial)
    }

    /// Launch `serial` ended: the host forgets what it kept of its operands.
    #[cfg(feature = "kernels")]
    pub(super) fn end_launch(&self, serial: u64) {
        crate::engine::compute::forget(serial);
    }

    #[cfg(not(feature = "kernels"))]
    pub(super) fn end_launch(&self, _serial: u64) {}

    #[cfg(not(feature = "kernels"))]
    pub(super) fn run_unit(&self, _unit: &Params, _serial: u64) -> Result<()> {
        fail_at!(EBADMSG, "this device runs no kernels", Handle, Unknown)
    }

    /// Device-memory place (owner, offset) of `bytes` at `addr`, operand `op` (for the
    /// kernels' host code: checked as every range).
    #[cfg(feature = "kernels")]
    pub(in crate::engine) fn place(
        &self,
        addr: u64,
        bytes: u64,
        op: FaultOperand,
    ) -> Result<(u32, u64)> {
        self.range(addr, bytes, op)
    }
}
