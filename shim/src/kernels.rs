//! The device's built-in kernels (ABI 1.5, docs/abi.md 6.1): which it runs.

use davinci_uapi::{Features, KernelInfo};

use crate::device::Device;
use crate::error::Result;

impl Device {
    /// The kernels this device runs (LIST_KERNELS), in id order: GEMM, elementwise,
    /// reduce, softmax and norm on the mock devices and the PCI device; none on a device
    /// without `Features::KERNELS` (the kernel module's software device, a driver before ABI
    /// 1.5), which is answered without a call.
    ///
    /// # Errors
    /// `ENODEV` if the device went away; `EPROTO` for a malformed daemon reply.
    pub fn kernels(&self) -> Result<Vec<KernelInfo>> {
        if !self.info().features.contains(Features::KERNELS) {
            return Ok(Vec::new());
        }
        self.list_kernels()
    }
}
