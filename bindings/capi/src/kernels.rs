//! The device's built-in kernels for C (ABI 1.5, docs/abi.md 6.1): which the device runs,
//! a launch of one with a parameter block the caller filled (uapi.h's `struct
//! davinci_gemm_params` and the others), and a byte memset.
#![allow(unsafe_code)]

use std::ffi::{c_int, c_void};

use davinci_shim::{task, KernelId, KernelInfo};

use crate::device::davinci_device;
use crate::ffi::{bytes, get, guard, guard_value, slice, Fail, Out};
use crate::task::{davinci_region, davinci_task, region, store};

/// The kernels the device runs (LIST_KERNELS), in id order, into `out[0..capacity]`
/// (`struct davinci_kernel_info`: id, version, params_version, params_size, dtypes, name).
/// Returns how many the device runs (more than `capacity`: only `capacity` written; 0 on a
/// device without `DAVINCI_FEAT_KERNELS`), or a negative errno.
///
/// # Safety
/// Threads: any. `dev` a live handle; `out` NULL with `capacity` 0, or writable for
/// `capacity` entries.
#[no_mangle]
pub unsafe extern "C" fn davinci_device_kernels(
    dev: *const davinci_device,
    out: *mut KernelInfo,
    capacity: usize,
) -> c_int {
    guard_value("davinci_device_kernels", || {
        // SAFETY: the caller's contract.
        let d = unsafe { get(dev, "dev") }?;
        let list = d.dev.kernels()?;
        if capacity > 0 && out.is_null() {
            return Err(Fail::inval(format!("out is NULL with capacity {capacity}")));
        }
        for (i, k) in list.iter().take(capacity).enumerate() {
            // SAFETY: out is writable for `capacity` entries (the caller's contract), i < capacity.
            unsafe { out.add(i).write(*k) };
        }
        Ok(list.len() as c_int)
    })
}

/// A launch of built-in kernel `kernel` (`DAVINCI_KERNEL_*`) with the parameter block
/// `params` (`params_len` bytes: exactly the kernel's `struct davinci_*_params`, filled with
/// the device addresses of `davinci_buffer_dev_addr` plus offsets). Every operand
/// address the block names must lie in one of `operands[0..n_operands]`, which the task holds
/// until it has run (-EINVAL naming the field otherwise); the block is copied into device
/// memory now. The device checks the rest and names the operand in a failed task's fault.
///
/// # Safety
/// Threads: any. `params` readable for `params_len` bytes; `operands` readable for
/// `n_operands` regions of live buffers; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_task_kernel(
    kernel: u32,
    params: *const c_void,
    params_len: usize,
    operands: *const davinci_region,
    n_operands: usize,
    out: *mut *mut davinci_task,
) -> c_int {
    guard("davinci_task_kernel", || {
        let out = Out::new(out, "out")?;
        let Some(k) = KernelId::from_u32(kernel) else {
            return Err(Fail::inval(format!(
                "kernel {kernel} is none of DAVINCI_KERNEL_GEMM .. DAVINCI_KERNEL_NORM"
            )));
        };
        // SAFETY: the caller's contract.
        let block = unsafe { bytes(params.cast::<u8>(), params_len, "params") }?;
        // SAFETY: the caller's contract.
        let regions = unsafe { slice(operands, n_operands, "operands") }?;
        let mut held = Vec::with_capacity(regions.len());
        for (i, r) in regions.iter().enumerate() {
            // SAFETY: the caller's contract: each region's buffer is live.
            held.push(unsafe { region(r, &format!("operands[{i}]")) }?);
        }
        // SAFETY: out checked; writable by the caller's contract.
        unsafe { store(out, task::kernel(k, block, &held)) }
    })
}

/// FILL of every byte of `dst` (any offset and length) with `value`: a memset (ABI 1.5,
/// `DAVINCI_FEAT_DTYPES`).
///
/// # Safety
/// Threads: any. `dst.buffer` a live buffer; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn davinci_task_fill_bytes(
    dst: davinci_region,
    value: u8,
    out: *mut *mut davinci_task,
) -> c_int {
    guard("davinci_task_fill_bytes", || {
        let out = Out::new(out, "out")?;
        // SAFETY: the caller's contract.
        let d = unsafe { region(&dst, "dst") }?;
        // SAFETY: out checked; writable by the caller's contract.
        unsafe { store(out, task::fill_bytes(d, value)) }
    })
}
