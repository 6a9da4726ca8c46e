// SPDX-License-Identifier: GPL-2.0

//! One `/dev/davinciN`: the driver-core device in static storage, its mutex and wait queues,
//! the misc device with its file operations (open, release, ioctl, mmap), and the worker
//! thread that runs the device's streams.
//!
//! Everything the ABI means is driver-core's: this file only moves bytes between user space
//! and `DeviceCore::ioctl`, maps the buffers `DeviceCore::mmap_target` names, and sleeps and wakes.

use core::cell::UnsafeCell;
use core::ffi::c_void;

use core::pin::Pin;
use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use kernel::ffi::{c_char, c_int, c_long, c_uint, c_ulong};

use kernel::bindings;
use kernel::prelude::*;
use kernel::sync::lock::mutex::MutexBackend;
use kernel::sync::lock::Guard;
use kernel::sync::{new_condvar, new_mutex, CondVar, Mutex};
use kernel::time::msecs_to_jiffies;

use crate::davinci_driver_core::{
    container, Config, DeviceCore, Error as CoreError, MmapTarget, OpenParams, Platform, Reply, Role,
    Run, UserMem, CONTAINER_LEN, MAX_CLIENTS, MAX_STREAMS,
};
use crate::davinci_uapi::ioctl::{ioc_dir, ioc_size, IOC_READ, IOC_WRITE};
use crate::davinci_uapi::{
    command_by_request, Errno, Features, ListClientsArgs, Wire, DRIVER_CMD_LIST_CLIENTS,
    DRIVER_CMD_WAIT_EVENT,
};
use crate::platform::KernelPlatform;

/// Devices the module can host (`/dev/davinci0` .. `/dev/davinci{DEVICES-1}`).
pub(crate) const DEVICES: usize = 2;
/// Device memory of each device (an accounting bound: allocations are backed on demand).
const MEMORY_SIZE: u64 = 256 << 20;
/// Descriptors the worker runs per stream per pass.
const BUDGET: u32 = 64;
/// The worker's safety-net sleep: it looks at every stream at least this often.
const WORKER_TIMEOUT_MS: u32 = 50;
/// How long an idle worker keeps looking before it arms NEED_WAKEUP and sleeps, unless
/// another task wants the CPU first (`need_resched()`): a client that submits again within it
/// (a round trip's next task) needs no wake-up of the device and rings no doorbell. The mock
/// device's pollers follow the same rule (spin while nobody else needs the core).
const IDLE_SPIN_NS: u64 = 50_000;
/// Longest single sleep of a WAIT_EVENT before it re-checks (the deadline is exact anyway).
const WAIT_SLICE_MS: u64 = 1000;
/// Largest ioctl argument this driver has (the biggest ABI struct is far smaller).
const MAX_ARG: usize = 256;

const fn config(device_id: u32) -> Config {
    Config {
        device_id,
        memory_size: MEMORY_SIZE,
        client_memory_limit: 0,
        page_size: 1 << bindings::PAGE_SHIFT,
        // No doorbell a client can ring without a system call: clients wake the worker with
        // NOTIFY (docs/abi.md 5.3), and only while it sleeps (NEED_WAKEUP).
        platform_features: Features::empty(),
    }
}

/// A driver-core device in static storage: about 190 KB, built at compile time (its
/// constructor is `const`), never on a kernel stack.
///
/// # Invariants
///
/// The device is only reached through [`DevState::lock`], which holds the state's mutex for
/// as long as the reference lives.
struct Storage(UnsafeCell<DeviceCore<KernelPlatform>>);

// SAFETY: the device is only accessed with the mutex of its `DevState` held (type invariant),
// so sharing the static between threads is sound.
unsafe impl Sync for Storage {}

static STORAGE: [Storage; DEVICES] = [
    Storage(UnsafeCell::new(DeviceCore::new(
        config(0),
        KernelPlatform::new(),
    ))),
    Storage(UnsafeCell::new(DeviceCore::new(
        config(1),
        KernelPlatform::new(),
    ))),
];

/// The registered states, by device index (for `open`, which gets only the misc device).
static STATES: [AtomicPtr<DevState>; DEVICES] =
    [const { AtomicPtr::new(core::ptr::null_mut()) }; DEVICES];

/// How the platform wakes sleepers: a pointer to the pinned [`DevState`].
///
/// # Invariants
///
/// The pointee is pinned and outlives every device call (it is dropped at module unload, after
/// the worker stopped and no file is open).
pub(crate) struct Wake(*const DevState);

impl Wake {
    /// The worker must look again (SUBMIT_TASK, NOTIFY, a new or destroyed stream).
    pub(crate) fn kick(&self) {
        // SAFETY: the state outlives every device call (type invariant).
        let st = unsafe { &*self.0 };
        st.kicks.fetch_add(1, Ordering::Relaxed);
        st.worker_cv.notify_all();
    }

    /// Completions were published or an event recorded: wake WAIT_EVENT sleepers, and the
    /// worker (a stream blocked on an event may go on).
    pub(crate) fn notify(&self) {
        // SAFETY: as in `kick`.
        let st = unsafe { &*self.0 };
        st.waiters.notify_all();
        self.kick();
    }
}

/// A misc device that is registered while this value lives.
struct Misc(UnsafeCell<bindings::miscdevice>);

/// The part of a device that must not move: its lock, its wait queues, its misc device.
#[pin_data(PinnedDrop)]
pub(crate) struct DevState {
    index: usize,
    #[pin]
    lock: Mutex<()>,
    /// WAIT_EVENT sleepers.
    #[pin]
    waiters: CondVar,
    /// The worker's sleep.
    #[pin]
    worker_cv: CondVar,
    /// Bumped by every wake-up of the worker, under the lock.
    kicks: AtomicU64,
    misc: Misc,
    name: [u8; 16],
    worker: AtomicPtr<bindings::task_struct>,
}

// SAFETY: every mutable field is either behind the mutex (the device), atomic, or written only
// during registration before the state is shared (`misc`, `name`).
unsafe impl Sync for DevState {}
// SAFETY: as for `Sync`; the raw pointers are owned kernel objects valid for the state's life.
unsafe impl Send for DevState {}

/// The locked device: derefs to the driver-core device; waiting releases the lock.
struct Locked<'a> {
    guard: Guard<'a, (), MutexBackend>,
    index: usize,
}

impl core::ops::Deref for Locked<'_> {
    type Target = DeviceCore<KernelPlatform>;
    fn deref(&self) -> &Self::Target {
        // SAFETY: the guard holds the device's mutex (Storage invariant), so no other
        // reference to the device exists while this one lives.
        unsafe { &*STORAGE[self.index].0.get() }
    }
}

impl core::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        // SAFETY: as in `deref`; `&mut self` makes this the only reference.
        unsafe { &mut *STORAGE[self.index].0.get() }
    }
}

/// What waiting returned.
enum Woke {
    Notified,
    TimedOut,
    Signal,
}

impl Locked<'_> {
    /// Releases the lock and sleeps on `cv` for at most `ms`, interruptibly.
    fn wait(&mut self, cv: &CondVar, ms: u32) -> Woke {
        use kernel::sync::CondVarTimeoutResult as R;
        match cv.wait_interruptible_timeout(&mut self.guard, msecs_to_jiffies(ms)) {
            R::Timeout => Woke::TimedOut,
            R::Woken { .. } => Woke::Notified,
            R::Signal { .. } => Woke::Signal,
        }
    }
}

fn errno(e: Errno) -> c_int {
    -e.code()
}

impl DevState {
    fn lock(&self) -> Locked<'_> {
        Locked {
            guard: self.lock.lock(),
            index: self.index,
        }
    }

    /// Creates, wires and registers device `index` (`/dev/davinci<index>`) and its worker.
    pub(crate) fn register(index: usize, module: &'static ThisModule) -> Result<Pin<KBox<Self>>> {
        let mut name = [0u8; 16];
        let label = b"davinci";
        name[..label.len()].copy_from_slice(label);
        name[label.len()] = b'0' + index as u8;
        let st = KBox::pin_init(
            pin_init!(DevState {
                index,
                lock <- new_mutex!(()),
                waiters <- new_condvar!(),
                worker_cv <- new_condvar!(),
                kicks: AtomicU64::new(0),
                // SAFETY: an all-zero miscdevice is the C "unset" value; it is filled in below
                // before registration.
                misc: Misc(UnsafeCell::new(unsafe { core::mem::zeroed() })),
                name,
                worker: AtomicPtr::new(core::ptr::null_mut()),
            }),
            GFP_KERNEL,
        )?;
        let raw: *const DevState = &*st;
        st.lock().platform_mut().set_wake(Wake(raw));
        STATES[index].store(raw.cast_mut(), Ordering::Release);

        // The worker.
        // SAFETY: `worker_main` matches the kthread signature; `raw` outlives the thread
        // (it is stopped in `PinnedDrop` before the state goes); the format string is a
        // NUL-terminated literal and takes one `%d`.
        let task = unsafe {
            bindings::kthread_create_on_node(
                Some(worker_main),
                raw.cast_mut().cast::<c_void>(),
                bindings::NUMA_NO_NODE,
                c"davinci%d".as_ptr().cast(),
                index as c_int,
            )
        };
        if task.is_null() || (task as isize) < 0 && (task as isize) > -4096 {
            return Err(ENOMEM);
        }
        st.worker.store(task, Ordering::Release);
        // SAFETY: `task` is the thread just created, not yet running.
        unsafe { bindings::wake_up_process(task) };

        // The misc device.
        // SAFETY: registration has not happened yet, so nothing else reads `misc`.
        let misc = unsafe { &mut *st.misc.0.get() };
        misc.minor = bindings::MISC_DYNAMIC_MINOR as c_int;
        misc.name = st.name.as_ptr().cast();
        misc.fops = fops(module);
        misc.mode = 0o666;
        // SAFETY: `misc` is fully initialised, pinned inside `st` and deregistered in
        // `PinnedDrop` before it goes.
        let r = unsafe { bindings::misc_register(st.misc.0.get()) };
        if r != 0 {
            return Err(Error::from_errno(r));
        }
        pr_info!("/dev/davinci{} ready\n", index);
        Ok(st)
    }

    fn of_misc(misc: *mut c_void) -> Option<&'static DevState> {
        STATES.iter().find_map(|s| {
            let p = s.load(Ordering::Acquire);
            // SAFETY: a non-null entry points at a registered, pinned state that outlives
            // every open of its device (module refcounting keeps it until unload).
            (!p.is_null() && unsafe { (*p).misc.0.get().cast::<c_void>() } == misc)
                .then(|| unsafe { &*p })
        })
    }
}

#[pinned_drop]
impl PinnedDrop for DevState {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: registered in `register` (a state is only dropped after it succeeded or
        // before `misc_register` ran, when `this_device` is still null).
        unsafe {
            if !(*self.misc.0.get()).this_device.is_null() {
                bindings::misc_deregister(self.misc.0.get());
            }
        }
        let task = self.worker.swap(core::ptr::null_mut(), Ordering::AcqRel);
        if !task.is_null() {
            // SAFETY: `task` is the worker created in `register`; `kthread_stop` wakes it,
            // waits for it to return and drops the creation reference.
            unsafe { bindings::kthread_stop(task) };
        }
        STATES[self.index].store(core::ptr::null_mut(), Ordering::Release);
    }
}

/// The file operations every davinci device shares.
struct Fops(UnsafeCell<bindings::file_operations>);
// SAFETY: written once in `fops` before the first registration, read-only afterwards.
unsafe impl Sync for Fops {}
// SAFETY: an all-zero file_operations is valid (every callback None).
static FOPS: Fops = Fops(UnsafeCell::new(unsafe { core::mem::zeroed() }));

fn fops(module: &'static ThisModule) -> *const bindings::file_operations {
    let p = FOPS.0.get();
    // SAFETY: called from module init (single-threaded) before any device is registered,
    // so nothing reads the table meanwhile; the values are the same every time.
    unsafe {
        (*p).owner = module.as_ptr();
        (*p).open = Some(fop_open);
        (*p).release = Some(fop_release);
        (*p).unlocked_ioctl = Some(fop_ioctl);
        // Every argument is made of fixed-width fields with explicit padding, so a 32-bit
        // caller's struct has the 64-bit layout and the same handler serves it (what
        // `compat_ptr_ioctl` does; it is not built without CONFIG_COMPAT). 32-bit callers
        // cannot use the data plane (docs/abi.md 1.1), the control plane works.
        (*p).compat_ioctl = Some(fop_ioctl);
        (*p).mmap = Some(fop_mmap);
        (*p).llseek = Some(bindings::noop_llseek);
    }
    p
}

/// One open file: which device and which driver-core open.
struct Open {
    dev: &'static DevState,
    client: u32,
}

/// The opener's parameters: pid (thread-group id in the initial pid namespace, as an operator
/// on the host sees it), uid (of the credentials the file was opened with), admin.
///
/// Nothing here reads `task_struct` fields from Rust: bindgen's layout of `task_struct` for
/// this configuration is 64 bytes off the C one before `thread` (asm-offsets' TASK_threadsp
/// 1880 against bindgen's 1816), so `Task::pid()` reads garbage. Exported functions and
/// `struct file`/`struct cred` (whose layouts the tests check through their results) are used
/// instead.
fn open_params(file: *mut bindings::file, role: Role) -> OpenParams {
    // SAFETY: `get_current` returns the running task, valid for this call;
    // `__task_pid_nr_ns` takes the RCU read lock itself; `init_pid_ns` is the initial pid
    // namespace, a static that lives forever (only its address is taken).
    let pid = unsafe {
        bindings::__task_pid_nr_ns(
            bindings::get_current(),
            bindings::pid_type_PIDTYPE_TGID,
            core::ptr::addr_of_mut!(bindings::init_pid_ns),
        )
    };
    // SAFETY: `file` is the file being opened (valid for the call); `f_cred` is set at open
    // and holds a reference on the credentials for the file's life.
    let uid = unsafe { (*(*file).f_cred).uid.val };
    // SAFETY: `capable` has no preconditions.
    let admin = unsafe { bindings::capable(bindings::CAP_SYS_ADMIN as c_int) };
    OpenParams {
        role,
        pid: pid as u32,
        uid,
        admin,
        container: container_of_current(),
        comm: comm_of_current(),
    }
}

extern "C" {
    /// `helpers.c`: the current task's cgroup v2 path in the initial cgroup namespace.
    fn davinci_current_cgroup_path(buf: *mut c_char, len: usize) -> c_int;
    /// `helpers.c`: the current task's name, NUL-padded into 16 bytes.
    fn davinci_current_comm(buf: *mut c_char);
    /// `helpers.c`: `need_resched()`, whether another task wants this CPU.
    fn davinci_need_resched() -> c_int;
    /// `helpers.c`: `cpu_relax()`.
    fn davinci_cpu_relax();
}

/// The opener's process name.
fn comm_of_current() -> [u8; 16] {
    let mut comm = [0u8; 16];
    // SAFETY: `comm` is a live 16-byte buffer, which the helper fills exactly (it copies
    // TASK_COMM_LEN = 16 bytes, checked at build time); `current` is valid in open.
    unsafe { davinci_current_comm(comm.as_mut_ptr().cast()) };
    comm
}

/// The opener's container id, from its cgroup path by driver-core's rule (the same the mock
/// daemon applies to `/proc/<pid>/cgroup`); empty on the host or without cgroups. Sleeps:
/// call it before taking the device lock.
fn container_of_current() -> [u8; CONTAINER_LEN] {
    let mut path = [0u8; 256];
    // SAFETY: `path` is a live buffer of `path.len()` bytes, which the helper writes at most
    // (NUL included); it is called in process context (open) with no lock held.
    let n = unsafe { davinci_current_cgroup_path(path.as_mut_ptr().cast(), path.len()) };
    let Ok(n) = usize::try_from(n) else {
        // No cgroups, or a path longer than any container runtime makes.
        return [0; CONTAINER_LEN];
    };
    let text = path
        .get(..n.min(path.len()))
        .and_then(|b| core::str::from_utf8(b).ok())
        .unwrap_or("");
    container::container_field(container::container_id_from_path(text))
}

unsafe extern "C" fn fop_open(_inode: *mut bindings::inode, file: *mut bindings::file) -> c_int {
    // SAFETY: the misc core set `private_data` to our miscdevice before calling `open`.
    let misc = unsafe { (*file).private_data };
    let Some(dev) = DevState::of_misc(misc) else {
        return errno(Errno::ENODEV);
    };
    // O_RDONLY is a control open, anything writable a client (docs/abi.md 1.1).
    // SAFETY: `file` is valid for the call.
    let writable = unsafe { (*file).f_flags } & bindings::O_ACCMODE != 0;
    let role = if writable {
        Role::Client
    } else {
        Role::Control
    };
    // The parameters first: finding the container sleeps on cgroup_mutex.
    let params = open_params(file, role);
    let client = match dev.lock().open(params) {
        Ok(c) => c,
        Err(e) => return errno(e.error.errno),
    };
    match KBox::new(Open { dev, client }, GFP_KERNEL) {
        Ok(o) => {
            // SAFETY: `file` is valid; `release` takes the box back.
            unsafe { (*file).private_data = KBox::into_raw(o).cast() };
            0
        }
        Err(_) => {
            dev.lock().close(client);
            errno(Errno::ENOMEM)
        }
    }
}

unsafe extern "C" fn fop_release(_inode: *mut bindings::inode, file: *mut bindings::file) -> c_int {
    // SAFETY: `open` stored a boxed `Open` in `private_data`; release is called once.
    let o = unsafe { KBox::from_raw((*file).private_data.cast::<Open>()) };
    // Everything the open held goes: contexts, streams (their buffers), events, memory.
    o.dev.lock().close(o.client);
    o.dev.worker_kick();
    0
}

impl DevState {
    fn worker_kick(&self) {
        let _g = self.lock();
        self.kicks.fetch_add(1, Ordering::Relaxed);
        self.worker_cv.notify_all();
    }
}

/// Most bytes LIST_CLIENTS can write: every client, at the largest entry size driver-core
/// accepts.
const LIST_OUT_MAX: usize = MAX_CLIENTS * 4096;

/// LIST_CLIENTS' entries, gathered in a kernel buffer under the device lock and copied to the
/// caller's buffer after the lock is dropped ([`UserOut::copy_out`]). A `copy_to_user` under
/// the device lock could fault and take `mmap_lock`, which `mmap` holds while it takes the
/// device lock: lockdep reported exactly that circular dependency.
struct UserOut {
    /// The caller's buffer (`davinci_list_clients_args.buf`); driver-core writes the
    /// entries upwards from it, contiguously.
    base: u64,
    bytes: KVec<u8>,
}

impl UserOut {
    /// For command `cmd` with argument `arg` (already copied in).
    fn new(cmd: u32, arg: &[u8]) -> UserOut {
        let base = if cmd == DRIVER_CMD_LIST_CLIENTS {
            ListClientsArgs::from_bytes(arg).map_or(0, |a| a.buf)
        } else {
            0
        };
        UserOut {
            base,
            bytes: KVec::new(),
        }
    }

    /// Copies what was gathered to the caller: 0, or `-EFAULT`.
    fn copy_out(&self) -> c_int {
        if self.bytes.is_empty() {
            return 0;
        }
        copy_out(self.base as c_ulong, &self.bytes)
    }
}

impl UserMem for UserOut {
    fn write(&mut self, addr: u64, data: &[u8]) -> crate::davinci_driver_core::Result<()> {
        let fault = || CoreError::new(Errno::EFAULT, "LIST_CLIENTS buffer range overflows");
        let off = addr
            .checked_sub(self.base)
            .and_then(|o| usize::try_from(o).ok())
            .ok_or_else(fault)?;
        let end = off
            .checked_add(data.len())
            .filter(|&e| e <= LIST_OUT_MAX)
            .ok_or_else(fault)?;
        if end > self.bytes.len() {
            self.bytes
                .extend_with(end - self.bytes.len(), 0, GFP_KERNEL)
                .map_err(|_| {
                    CoreError::new(Errno::ENOMEM, "out of kernel memory (LIST_CLIENTS)")
                })?;
        }
        self.bytes[off..end].copy_from_slice(data);
        Ok(())
    }
}

fn copy_out(arg: c_ulong, buf: &[u8]) -> c_int {
    // SAFETY: as in `UserOut::write`.
    let left =
        unsafe { bindings::copy_to_user(arg as *mut c_void, buf.as_ptr().cast(), buf.len() as _) };
    if left == 0 {
        0
    } else {
        errno(Errno::EFAULT)
    }
}

unsafe extern "C" fn fop_ioctl(file: *mut bindings::file, cmd: c_uint, arg: c_ulong) -> c_long {
    // SAFETY: `private_data` is the `Open` of this file (set in `open`), alive until release.
    let o = unsafe { &*(*file).private_data.cast::<Open>() };
    ioctl(o, cmd, arg) as c_long
}

fn ioctl(o: &Open, cmd: u32, arg: c_ulong) -> c_int {
    // An unknown command is ENOTTY before its argument is touched (driver-core checks it
    // again, with the size, and says why).
    if command_by_request(cmd).is_none() {
        return errno(Errno::ENOTTY);
    }
    let size = ioc_size(cmd);
    if size > MAX_ARG {
        return errno(Errno::ENOTTY);
    }
    let mut buf = [0u8; MAX_ARG];
    let a = &mut buf[..size];
    let dir = ioc_dir(cmd);
    if dir & IOC_WRITE != 0 && size > 0 {
        // SAFETY: `copy_from_user` checks the user range and writes at most `size` bytes
        // into `a`, a live kernel buffer of that length.
        let left = unsafe {
            bindings::copy_from_user(a.as_mut_ptr().cast(), arg as *const c_void, size as _)
        };
        if left != 0 {
            return errno(Errno::EFAULT);
        }
    }
    let copy_back = |a: &[u8]| {
        if dir & IOC_READ != 0 {
            copy_out(arg, a)
        } else {
            0
        }
    };
    let mut dev = o.dev.lock();
    let mut out = UserOut::new(cmd, a);
    let r = dev.ioctl(o.client, cmd, a, &mut out);
    match r {
        Ok(Reply::Done) | Ok(Reply::StreamCreated(_)) | Ok(Reply::Kick(_)) => {
            if matches!(r, Ok(Reply::StreamCreated(_)) | Ok(Reply::Kick(_))) {
                o.dev.kicks.fetch_add(1, Ordering::Relaxed);
                o.dev.worker_cv.notify_all();
            }
            drop(dev);
            // No user memory is touched under the device lock (see `UserOut`).
            let c = out.copy_out();
            if c != 0 {
                return c;
            }
            copy_back(a)
        }
        Ok(Reply::Wait(spec)) => {
            let now = dev.platform().now_ns();
            let deadline = now.saturating_add(spec.timeout_ns);
            loop {
                let now = dev.platform().now_ns();
                let timed_out = now >= deadline;
                match dev.finish_wait(o.client, &spec, a, timed_out) {
                    Ok(Some(())) => {
                        drop(dev);
                        return copy_back(a);
                    }
                    Ok(None) => {}
                    Err(e) => {
                        drop(dev);
                        let c = copy_back(a);
                        return if c != 0 { c } else { errno(e.errno) };
                    }
                }
                let left_ms = (deadline - now).div_ceil(1_000_000).clamp(1, WAIT_SLICE_MS) as u32;
                if let Woke::Signal = dev.wait(&o.dev.waiters, left_ms) {
                    return errno(Errno::EINTR);
                }
            }
        }
        Err(e) => {
            drop(dev);
            // WAIT_EVENT reports `current`/`status` on its failures too (docs/abi.md 1.4).
            if cmd == DRIVER_CMD_WAIT_EVENT {
                let c = copy_back(a);
                if c != 0 {
                    return c;
                }
            }
            errno(e.errno)
        }
    }
}

unsafe extern "C" fn fop_mmap(
    file: *mut bindings::file,
    vma: *mut bindings::vm_area_struct,
) -> c_int {
    // SAFETY: `private_data` is the `Open` of this file; `vma` is valid for the call and the
    // caller holds the mmap write lock.
    let (o, start, end, pgoff) = unsafe {
        let o = &*(*file).private_data.cast::<Open>();
        let r = (*vma).__bindgen_anon_1.__bindgen_anon_1;
        (o, r.vm_start, r.vm_end, (*vma).vm_pgoff)
    };
    let len = (end - start) as u64;
    let cookie = (pgoff as u64) << bindings::PAGE_SHIFT;
    // SAFETY: as above.
    let flags = unsafe { (*vma).__bindgen_anon_2.vm_flags };
    if flags & (bindings::VM_SHARED as bindings::vm_flags_t) == 0 {
        // A private mapping would copy on write: the device would never see the copy.
        return errno(Errno::EINVAL);
    }
    let dev = o.dev.lock();
    let kaddr = match dev.mmap_target(o.client, cookie, len) {
        Ok(MmapTarget::Memory { offset, .. }) => {
            dev.platform().backing(o.client, offset).map(|b| b.as_ptr())
        }
        Ok(MmapTarget::CmdRing { stream }) => {
            dev.stream_mem(o.client, stream).map(|m| m.cmd.as_ptr())
        }
        Ok(MmapTarget::EventRing { stream }) => {
            dev.stream_mem(o.client, stream).map(|m| m.event.as_ptr())
        }
        Ok(MmapTarget::Doorbell { stream }) => dev
            .stream_mem(o.client, stream)
            .map(|m| m.doorbell.as_ptr()),
        Err(e) => return errno(e.errno),
    };
    let Some(kaddr) = kaddr else {
        return errno(Errno::ENOENT);
    };
    // SAFETY: `vma` is valid and write-locked by the caller; the flags keep the mapping out
    // of fork children and from growing (mremap). `kaddr` is a `vmalloc_user` buffer at least
    // `len` bytes long (driver-core checked `len` against the object), alive while the device
    // lock is held; `remap_vmalloc_range` takes a reference on every page it maps, so the
    // pages outlive the buffer if the object is destroyed while mapped.
    unsafe {
        (*vma).__bindgen_anon_2.__vm_flags |=
            (bindings::VM_DONTCOPY | bindings::VM_DONTEXPAND) as bindings::vm_flags_t;
        bindings::remap_vmalloc_range(vma, kaddr.cast(), 0)
    }
}

/// The worker: runs every stream of its device while any makes progress; when none does, keeps
/// looking for up to `IDLE_SPIN_NS` unless another task wants the CPU (`need_resched()`), then
/// sleeps with NEED_WAKEUP armed on the streams that are idle or stalled (docs/abi.md 5.3,
/// 5.4) until a NOTIFY, a SUBMIT_TASK, a completion or the safety-net timeout.
unsafe extern "C" fn worker_main(data: *mut c_void) -> c_int {
    // SAFETY: `data` is the pinned state, alive until `kthread_stop` returned (PinnedDrop).
    let st = unsafe { &*data.cast::<DevState>() };
    let mut handles = [0u32; MAX_STREAMS];
    let mut idle_since: Option<u64> = None;
    // SAFETY: no preconditions (in kthread context).
    while !unsafe { bindings::kthread_should_stop() } {
        let mut dev = st.lock();
        let seen = st.kicks.load(Ordering::Relaxed);
        let mut n = 0;
        for h in dev.stream_handles() {
            if n < handles.len() {
                handles[n] = h;
                n += 1;
            }
        }
        let mut busy = false;
        // What each stream's run found, to arm the right half of its wake-up if the worker
        // sleeps: IDLE (the command ring is empty), STALLED (the event ring is full), or 0.
        const IDLE: u8 = 1;
        const STALLED: u8 = 2;
        let mut runs = [0u8; MAX_STREAMS];
        for (&h, run) in handles[..n].iter().zip(runs.iter_mut()) {
            *run = match dev.run_stream(h, BUDGET) {
                Run::Progress(_) => {
                    busy = true;
                    0
                }
                Run::Idle => IDLE,
                Run::Stalled => STALLED,
                Run::Blocked { .. } | Run::Failed(_) | Run::Halted | Run::Gone => 0,
            };
        }
        if busy {
            idle_since = None;
            drop(dev);
            // SAFETY: no preconditions; yields to the clients on a non-preemptible kernel.
            unsafe { bindings::__cond_resched() };
            continue;
        }
        // Nothing ran: keep looking for a while, unless another task wants this CPU.
        // SAFETY: no preconditions; a lock-free read of the monotonic clock.
        let now = unsafe { bindings::ktime_get_mono_fast_ns() };
        let since = *idle_since.get_or_insert(now);
        // SAFETY: no preconditions (reads the current task's flags).
        let wanted = unsafe { davinci_need_resched() } != 0;
        if now.wrapping_sub(since) < IDLE_SPIN_NS && !wanted {
            drop(dev);
            // SAFETY: no preconditions; a spin-wait hint.
            unsafe { davinci_cpu_relax() };
            continue;
        }
        idle_since = None;
        for (&h, run) in handles[..n].iter().zip(runs.iter()) {
            busy |= match *run {
                IDLE => !dev.stream_prepare_sleep(h),
                STALLED => !dev.stream_prepare_stall_sleep(h),
                _ => false,
            };
        }
        if busy {
            drop(dev);
            // SAFETY: no preconditions; yields to the clients on a non-preemptible kernel.
            unsafe { bindings::__cond_resched() };
            continue;
        }
        if st.kicks.load(Ordering::Relaxed) == seen {
            let _ = dev.wait(&st.worker_cv, WORKER_TIMEOUT_MS);
        }
        for &h in &handles[..n] {
            // NOTIFY counted the doorbells (driver-core): this is only the disarm.
            dev.stream_woke(h, false);
        }
    }
    0
}
