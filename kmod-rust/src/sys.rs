// SPDX-License-Identifier: GPL-2.0

//! The C boundary (`helpers.c`) as the rest of the module sees it: the module parameters,
//! memcg-charged buffers, the opener's identity, the misc device, the worker thread and the
//! revocation of mappings. Every kernel structure's fields are read and written in C, where
//! the real layout is known; here they are opaque pointers. Each `unsafe` block states what
//! the C function needs.

use core::ffi::c_void;
use core::ptr::NonNull;
use kernel::ffi::{c_char, c_int, c_uint, c_ulong};

use kernel::bindings;
use kernel::prelude::*;

/// The module parameters (`helpers.c`'s `struct davinci_params`, same layout).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct Params {
    /// Devices to register.
    pub(crate) devices: u32,
    /// Device memory of each, in MiB.
    pub(crate) memory_mb: u32,
    /// Mode of the nodes.
    pub(crate) mode: u32,
    /// quota_contexts, quota_streams, quota_events, quota_allocations, quota_exports (0: the
    /// default).
    pub(crate) quota: [u32; 5],
    /// Tests only: the init step to fail (0: none).
    pub(crate) fail_init: u32,
    /// Most ivshmem-doorbell PCI devices to bind (0 to `pci::MAX_PCI`).
    pub(crate) pci_devices: u32,
    /// Tenants a shared device keeps a share for (1 to 64).
    pub(crate) tenant_slots: u32,
    /// Tests only: bind ivshmem devices that are not davinci devices, without a node.
    pub(crate) pci_hooks: u32,
}

impl Params {
    /// Init step `n` (counted from 1 by the caller): `ENOMEM` if the `fail_init` parameter
    /// names it.
    pub(crate) fn step(&self, n: &mut u32, what: &str) -> Result {
        *n += 1;
        if *n == self.fail_init {
            pr_info!("fail_init={}: failing init at {}\n", *n, what);
            return Err(ENOMEM);
        }
        Ok(())
    }
}

// Kernel structures cross as `c_void`: the Rust side never looks inside them.
extern "C" {
    fn davinci_params(out: *mut Params);
    fn davinci_buf_alloc(len: usize) -> *mut c_void;
    fn davinci_buf_free(p: *mut c_void, len: usize);
    fn davinci_pinned_bytes() -> i64;
    fn davinci_map_pages(
        vma: *mut c_void,
        addr: c_ulong,
        kaddr: *mut c_void,
        page: u64,
        pages: u64,
    ) -> c_int;
    fn davinci_revoke(mapping: *mut c_void, cookie: u64, len: u64);
    fn davinci_file_private(file: *mut c_void) -> *mut c_void;
    fn davinci_file_set_private(file: *mut c_void, p: *mut c_void);
    fn davinci_file_mapping(file: *mut c_void) -> *mut c_void;
    fn davinci_file_writable(file: *mut c_void) -> c_int;
    fn davinci_file_uid(file: *mut c_void) -> u32;
    fn davinci_file_admin(file: *mut c_void) -> c_int;
    fn davinci_opener_admin() -> c_int;
    fn davinci_current_tgid() -> u32;
    fn davinci_current_pid() -> u32;
    fn davinci_param_lock();
    fn davinci_param_unlock();
    fn davinci_log_ratelimit() -> c_int;
    fn davinci_misc_register(index: c_uint, mode: c_uint) -> *mut c_void;
    fn davinci_misc_deregister(misc: *mut c_void);
    fn davinci_kthread_create(
        f: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
        data: *mut c_void,
        index: c_uint,
    ) -> *mut c_void;
    fn davinci_current_cgroup_path(buf: *mut c_char, len: usize) -> c_int;
    fn davinci_current_comm(buf: *mut c_char);
    fn davinci_need_resched() -> c_int;
    fn davinci_cpu_relax();
    fn davinci_random_u64() -> u64;
    fn davinci_inject_text(out: *mut c_char, len: usize);
    fn davinci_c_offset(which: c_uint) -> usize;
}

/// The module parameters as loaded.
pub(crate) fn params() -> Params {
    let mut p = Params::default();
    // SAFETY: `p` is a live `Params`, the layout the helper writes (repr(C), same fields).
    unsafe { davinci_params(&mut p) };
    p
}

/// The layouts the kernel crate's bindings give a few fields, against C's: `(what, Rust, C)`
/// for each that differs.
pub(crate) fn binding_mismatches() -> impl Iterator<Item = (&'static str, usize, usize)> {
    use core::mem::{offset_of, size_of};
    let rust = [
        ("task_struct.pid", offset_of!(bindings::task_struct, pid)),
        (
            "task_struct.thread",
            offset_of!(bindings::task_struct, thread),
        ),
        ("sizeof(task_struct)", size_of::<bindings::task_struct>()),
        (
            "file.private_data",
            offset_of!(bindings::file, private_data),
        ),
        (
            "vm_area_struct.vm_pgoff",
            offset_of!(bindings::vm_area_struct, vm_pgoff),
        ),
    ];
    rust.into_iter().enumerate().filter_map(|(i, (what, r))| {
        // SAFETY: no preconditions; `i` is below the helper's five cases.
        let c = unsafe { davinci_c_offset(i as c_uint) };
        (r != c).then_some((what, r, c))
    })
}

/// The `inject` parameter's text as given at load (empty if none), NUL-padded.
pub(crate) fn inject_text() -> [u8; 64] {
    let mut t = [0u8; 64];
    // SAFETY: `t` is a live buffer of `t.len()` bytes; the helper writes at most that many,
    // NUL-terminated.
    unsafe { davinci_inject_text(t.as_mut_ptr().cast(), t.len()) };
    t
}

/// `len` zeroed bytes of vmalloc memory charged to the caller's memory cgroup and counted in
/// `pinned_bytes`, or `None`. Free with [`buf_free`].
pub(crate) fn buf_alloc(len: usize) -> Option<NonNull<u8>> {
    // SAFETY: no preconditions (process context; may sleep).
    NonNull::new(unsafe { davinci_buf_alloc(len) }.cast())
}

/// Frees a [`buf_alloc`] buffer.
///
/// # Safety
///
/// `p` came from `buf_alloc(len)` and is freed once; no mapping reaches its pages any more
/// (its object's mappings were revoked) and nothing else uses it.
pub(crate) unsafe fn buf_free(p: NonNull<u8>, len: usize) {
    // SAFETY: the caller's contract.
    unsafe { davinci_buf_free(p.as_ptr().cast(), len) }
}

/// Bytes of buffers the module holds now (all devices).
pub(crate) fn pinned_bytes() -> i64 {
    // SAFETY: no preconditions (an atomic read).
    unsafe { davinci_pinned_bytes() }
}

/// A mapping of a davinci object being faulted in: its vma and the (page-aligned) address.
pub(crate) struct Faulting {
    pub(crate) vma: *mut bindings::vm_area_struct,
    pub(crate) addr: c_ulong,
}

impl Faulting {
    /// Maps page `page` of the object whose buffer is `buf` (`pages` pages long) at the
    /// faulting address, and a few after it. 0 or a negative errno.
    ///
    /// # Safety
    ///
    /// Called from the fault handler with the vma's lock held, `buf` a live `buf_alloc`
    /// buffer of at least `pages` pages, with the device lock held (so the object cannot be
    /// freed, and its mappings revoked, before the pages are in).
    pub(crate) unsafe fn map(&self, buf: *mut u8, page: u64, pages: u64) -> c_int {
        // SAFETY: the caller's contract; the helper checks every address against the vma.
        unsafe { davinci_map_pages(self.vma.cast(), self.addr, buf.cast(), page, pages) }
    }
}

/// A file's page-cache mapping, where every mapping of its objects is linked (for
/// [`revoke`]).
#[derive(Clone, Copy)]
pub(crate) struct FileMapping(NonNull<bindings::address_space>);

// SAFETY: a pointer to the file's address_space, which lives as long as the file (the
// platform drops it at release); unmap_mapping_range may be called from any thread.
unsafe impl Send for FileMapping {}

/// Revokes every mapping of `[cookie, cookie + len)` in `mapping`: its pages leave every
/// address space now; a later access faults again (and finds the object, or not).
///
/// # Safety
///
/// `mapping` belongs to a file that is still open. Process context, no spinlock held (takes
/// the mapping's i_mmap lock and page-table locks).
pub(crate) unsafe fn revoke(mapping: FileMapping, cookie: u64, len: u64) {
    // SAFETY: the caller's contract.
    unsafe { davinci_revoke(mapping.0.as_ptr().cast(), cookie, len) }
}

/// The file being opened, released, mapped or ioctl'd: an opaque handle on a live `struct
/// file`, valid for the file operation that got it.
#[derive(Clone, Copy)]
pub(crate) struct File(*mut bindings::file);

impl File {
    /// The `struct file` (for a C helper, during the same file operation).
    pub(crate) fn raw(self) -> *mut bindings::file {
        self.0
    }

    /// # Safety
    ///
    /// `f` is the file a file operation was called with; the value is used only during that
    /// call.
    pub(crate) unsafe fn new(f: *mut bindings::file) -> File {
        File(f)
    }

    /// `private_data`: the miscdevice during `open`, the module's `Open` afterwards.
    pub(crate) fn private(self) -> *mut c_void {
        // SAFETY: the file is live (type invariant).
        unsafe { davinci_file_private(self.0.cast()) }
    }

    /// Sets `private_data`.
    pub(crate) fn set_private(self, p: *mut c_void) {
        // SAFETY: the file is live (type invariant); only open and release set it.
        unsafe { davinci_file_set_private(self.0.cast(), p) }
    }

    /// The file's page-cache mapping.
    pub(crate) fn mapping(self) -> Option<FileMapping> {
        // SAFETY: the file is live (type invariant).
        NonNull::new(unsafe { davinci_file_mapping(self.0.cast()) }.cast()).map(FileMapping)
    }

    /// Opened for writing (a client) rather than O_RDONLY (a control open).
    pub(crate) fn writable(self) -> bool {
        // SAFETY: the file is live (type invariant).
        unsafe { davinci_file_writable(self.0.cast()) != 0 }
    }

    /// The uid it was opened with (initial user namespace).
    pub(crate) fn uid(self) -> u32 {
        // SAFETY: the file is live (type invariant); f_cred lives as long as the file.
        unsafe { davinci_file_uid(self.0.cast()) }
    }

    /// Whether its opener had CAP_SYS_ADMIN in the initial user namespace (audited).
    pub(crate) fn admin(self) -> bool {
        // SAFETY: the file is live (type invariant).
        unsafe { davinci_file_admin(self.0.cast()) != 0 }
    }
}

/// Whether the current task (the opener, in `open`) has CAP_SYS_ADMIN; not audited.
pub(crate) fn opener_admin() -> bool {
    // SAFETY: no preconditions (process context).
    unsafe { davinci_opener_admin() != 0 }
}

/// The current process's id in the initial pid namespace.
pub(crate) fn current_tgid() -> u32 {
    // SAFETY: no preconditions (process context).
    unsafe { davinci_current_tgid() }
}

/// Runs `f` under the module's parameter lock, which a write of a parameter (`inject`) holds
/// while it runs: module exit marks the module going under it, so no write that could reach a
/// device being freed runs after.
pub(crate) fn with_params_locked<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: no preconditions (process context; a mutex).
    unsafe { davinci_param_lock() };
    let r = f();
    // SAFETY: taken just above, by this thread.
    unsafe { davinci_param_unlock() };
    r
}

/// Whether a message that a device or a user can repeat at will may be logged now (10 in 5 s;
/// the kernel counts the ones it drops).
pub(crate) fn log_ratelimit() -> bool {
    // SAFETY: no preconditions (a spinlock-protected counter, any context).
    unsafe { davinci_log_ratelimit() != 0 }
}

/// The current thread's id in the initial pid namespace.
pub(crate) fn current_pid() -> u32 {
    // SAFETY: no preconditions (process context).
    unsafe { davinci_current_pid() }
}

/// `p` as an errno if it is an `ERR_PTR`.
fn err_ptr<T>(p: *mut T) -> core::result::Result<NonNull<T>, Error> {
    let v = p as isize;
    if (-4095..0).contains(&v) {
        return Err(Error::from_errno(v as c_int));
    }
    NonNull::new(p).ok_or(ENOMEM)
}

/// A registered misc device (`/dev/davinci<index>`), deregistered on drop.
pub(crate) struct Misc(NonNull<bindings::miscdevice>);

// SAFETY: the miscdevice is owned by this value; misc_deregister may run on any thread.
unsafe impl Send for Misc {}
// SAFETY: shared access only compares the pointer.
unsafe impl Sync for Misc {}

impl Misc {
    /// Registers `/dev/davinci<index>` with the module's file operations and `mode`.
    pub(crate) fn register(index: u32, mode: u32) -> Result<Misc> {
        // SAFETY: no preconditions (process context); returns a registered miscdevice the
        // caller owns, or an ERR_PTR.
        err_ptr(unsafe { davinci_misc_register(index, mode) }.cast()).map(Misc)
    }

    /// Whether `p` (a file's `private_data` in open) is this misc device.
    pub(crate) fn is(&self, p: *mut c_void) -> bool {
        self.0.as_ptr().cast::<c_void>() == p
    }
}

impl Drop for Misc {
    fn drop(&mut self) {
        // SAFETY: registered by `register` and deregistered once, here.
        unsafe { davinci_misc_deregister(self.0.as_ptr().cast()) }
    }
}

/// The worker's entry point, as kthread runs it.
pub(crate) type ThreadFn = unsafe extern "C" fn(*mut c_void) -> c_int;

/// A kthread `davinci<index>` running `f(data)`, not started yet; an errno as the kernel gave
/// it (EINTR if the loader was killed, ENOMEM...).
///
/// # Safety
///
/// `data` stays valid until the thread is stopped with `kthread_stop`.
pub(crate) unsafe fn kthread_create(
    f: ThreadFn,
    data: *mut c_void,
    index: u32,
) -> Result<NonNull<bindings::task_struct>> {
    // SAFETY: the caller's contract; `f` has the kthread signature.
    err_ptr(unsafe { davinci_kthread_create(Some(f), data, index) }.cast())
}

/// The current task's cgroup v2 path into `buf`: its length, or a negative errno.
pub(crate) fn current_cgroup_path(buf: &mut [u8]) -> c_int {
    // SAFETY: `buf` is live and writable for `buf.len()` bytes, the most the helper writes;
    // process context, no lock held (it may sleep on cgroup_mutex).
    unsafe { davinci_current_cgroup_path(buf.as_mut_ptr().cast(), buf.len()) }
}

/// The current process's name, NUL-padded.
pub(crate) fn current_comm() -> [u8; 16] {
    let mut comm = [0u8; 16];
    // SAFETY: `comm` is a live 16-byte buffer, which the helper fills exactly (TASK_COMM_LEN
    // is 16, checked at build time in C).
    unsafe { davinci_current_comm(comm.as_mut_ptr().cast()) };
    comm
}

/// Whether another task wants this CPU.
pub(crate) fn need_resched() -> bool {
    // SAFETY: no preconditions (reads the current task's flags).
    unsafe { davinci_need_resched() != 0 }
}

/// A spin-wait hint.
pub(crate) fn cpu_relax() {
    // SAFETY: no preconditions.
    unsafe { davinci_cpu_relax() }
}

/// Gives the CPU to another task if one wants it (non-preemptible kernels need this in every
/// long loop).
pub(crate) fn cond_resched() {
    // SAFETY: no preconditions; process context, no spinlock held (callers hold no lock).
    unsafe { bindings::__cond_resched() };
}

/// A random number from the kernel's generator.
pub(crate) fn random_u64() -> u64 {
    // SAFETY: no preconditions.
    unsafe { davinci_random_u64() }
}

/// The monotonic clock in nanoseconds.
pub(crate) fn now_ns() -> u64 {
    // SAFETY: no preconditions; a lock-free read.
    unsafe { bindings::ktime_get_mono_fast_ns() }
}

/// A worker thread, started by [`start`](Worker::start), stopped (and waited for) on drop.
pub(crate) struct Worker(NonNull<bindings::task_struct>);

// SAFETY: the task reference is owned by this value; kthread_stop may run on any thread.
unsafe impl Send for Worker {}
// SAFETY: no shared access.
unsafe impl Sync for Worker {}

impl Worker {
    /// Creates and wakes a kthread running `f(data)`.
    ///
    /// # Safety
    ///
    /// `data` stays valid until the `Worker` is dropped.
    pub(crate) unsafe fn start(f: ThreadFn, data: *mut c_void, index: u32) -> Result<Worker> {
        // SAFETY: the caller's contract.
        let task = unsafe { kthread_create(f, data, index) }?;
        // SAFETY: `task` is the thread just created, not yet running.
        unsafe { bindings::wake_up_process(task.as_ptr()) };
        Ok(Worker(task))
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // SAFETY: the thread created in `start`; kthread_stop wakes it, waits for it to
        // return and drops the creation reference, once.
        unsafe { bindings::kthread_stop(self.0.as_ptr()) };
    }
}

/// Whether the current kthread was asked to stop.
pub(crate) fn kthread_should_stop() -> bool {
    // SAFETY: no preconditions (kthread context).
    unsafe { bindings::kthread_should_stop() }
}
