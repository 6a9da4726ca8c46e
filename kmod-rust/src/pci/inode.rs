// SPDX-License-Identifier: GPL-2.0

//! One address space per PCI device ([`DevInode`], issue 42 item 4), as DRM/accel give
//! every open of a device: revocation and removal unmap there, whichever node or container
//! the open came through.

use core::ffi::c_void;
use core::ptr::NonNull;
use kernel::bindings;
use kernel::prelude::*;

extern "C" {
    fn davinci_pci_inode_new() -> *mut c_void;
    fn davinci_pci_inode_put(inode: *mut c_void);
    fn davinci_pci_revoke(inode: *mut c_void, cookie: u64, len: u64);
    fn davinci_pci_file_set_mapping(file: *mut c_void, inode: *mut c_void);
}

/// The device's address space (`pci/helpers.c`): an anonymous inode whose mapping every open
/// file of the device maps through, so that a revocation or the removal reaches every
/// mapping of the device, whichever node it was opened through.
///
/// # Invariants
///
/// A live inode from `davinci_pci_inode_new`, put once, on drop.
pub(crate) struct DevInode(NonNull<c_void>);

// SAFETY: an inode may be used and put from any thread.
unsafe impl Send for DevInode {}
// SAFETY: its functions here (unmap, set a file's mapping) may run concurrently.
unsafe impl Sync for DevInode {}

impl DevInode {
    pub(super) fn new() -> Result<DevInode> {
        // SAFETY: no preconditions (process context).
        let p = unsafe { davinci_pci_inode_new() };
        if p.is_null() {
            return Err(ENOMEM);
        }
        let errno = p as isize;
        if (-4095..0).contains(&errno) {
            return Err(Error::from_errno(errno as i32));
        }
        // (Not null, checked above.)
        NonNull::new(p).map(DevInode).ok_or(ENOMEM)
    }

    /// Unmaps `[cookie, cookie + len)` of every mapping of the device (`len` 0: everything).
    pub(crate) fn revoke(&self, cookie: u64, len: u64) {
        // SAFETY: the inode is live (type invariant); process context.
        unsafe { davinci_pci_revoke(self.0.as_ptr(), cookie, len) }
    }

    /// Makes `file` (an open of the device, in its `open`) map through the device's space.
    ///
    /// # Safety
    ///
    /// `file` is the file being opened.
    pub(crate) unsafe fn adopt(&self, file: *mut bindings::file) {
        // SAFETY: the caller's contract; the inode is live (type invariant) and outlives the
        // file (the file holds the device's state, which holds this).
        unsafe { davinci_pci_file_set_mapping(file.cast(), self.0.as_ptr()) }
    }
}

impl Drop for DevInode {
    fn drop(&mut self) {
        // SAFETY: the inode is live and put once, here (type invariant); no file of the
        // device is left (each holds the state this is part of).
        unsafe { davinci_pci_inode_put(self.0.as_ptr()) }
    }
}
