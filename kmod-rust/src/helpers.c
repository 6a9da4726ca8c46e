// SPDX-License-Identifier: GPL-2.0
/*
 * The module's C boundary: every read or write of a kernel structure's fields (file,
 * vm_area_struct, vm_fault, miscdevice, task_struct, cred) happens here, in C, where the
 * compiler knows the real layout; the Rust side holds only opaque pointers. (bindgen's layout
 * of task_struct is 64 bytes off for this configuration, see docs/kernel.md; keeping field
 * access in C means no Rust code depends on a generated layout.)
 *
 * Here too: the const file and vm operation tables (owner THIS_MODULE, in .rodata), the
 * module's parameters (6.12's Rust module! macro has none), the misc device registration, the
 * memcg-charged buffers and their count, and the revocation of a freed object's mappings.
 */
#include <linux/capability.h>
#include <linux/cgroup.h>
#include <linux/cred.h>
#include <linux/err.h>
#include <linux/fs.h>
#include <linux/init_task.h>
#include <linux/kthread.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/moduleparam.h>
#include <linux/nsproxy.h>
#include <linux/random.h>
#include <linux/ratelimit.h>
#include <linux/rcupdate.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/vmalloc.h>
#include <linux/workqueue.h>
#include "mmap_common.h"

/* ---- the module's parameters ------------------------------------------------------------ */

/* Software devices registered (/dev/davinci0 .. davinci<devices-1>), 0 to 8 (0: PCI only). */
static unsigned int devices = 2;
module_param(devices, uint, 0444);
MODULE_PARM_DESC(devices, "software devices to register, /dev/davinci0 upwards (0-8, default 2; 0 only with pci_devices: PCI devices only, numbered after the software ones)");
/* Device memory of each device, in MiB. */
static unsigned int memory_mb = 256;
module_param(memory_mb, uint, 0444);
MODULE_PARM_DESC(memory_mb, "device memory of each device in MiB (1-4096, default 256)");
/*
 * Mode of the device nodes. 0660 by default: only root and the group a udev rule gives the
 * nodes (kmod-rust/60-davinci.rules: group "davinci") may open them.
 */
static ushort mode = 0660;
module_param(mode, ushort, 0444);
MODULE_PARM_DESC(mode, "mode of /dev/davinciN (default 0660; the group comes from udev, see kmod-rust/60-davinci.rules)");
/*
 * Tenants a shared device keeps a share for (docs/security.md): a tenant is the opener's
 * container (from its cgroup), else its user; each of up to tenant_slots tenants always gets
 * its share of every table and of memory (memory_mb / tenant_slots).
 */
static unsigned int tenant_slots = 4;
module_param(tenant_slots, uint, 0444);
MODULE_PARM_DESC(tenant_slots, "tenants a shared device keeps a share for (1-64, default 4; the shares are the tables and memory over them unless quota_* set them)");
/*
 * What one tenant may hold of each table while a device is shared (docs/kernel.md); 0 is
 * driver-core's default, the table over tenant_slots. Read-only once loaded.
 */
static unsigned int quota_contexts;
module_param(quota_contexts, uint, 0444);
MODULE_PARM_DESC(quota_contexts, "contexts one tenant may hold on a shared device (0: the 256 over tenant_slots)");
static unsigned int quota_streams;
module_param(quota_streams, uint, 0444);
MODULE_PARM_DESC(quota_streams, "streams one tenant may hold on a shared device (0: the 256 over tenant_slots)");
static unsigned int quota_events;
module_param(quota_events, uint, 0444);
MODULE_PARM_DESC(quota_events, "events one tenant may hold on a shared device (0: the 1024 over tenant_slots)");
static unsigned int quota_allocations;
module_param(quota_allocations, uint, 0444);
MODULE_PARM_DESC(quota_allocations, "allocations one tenant may hold on a shared device (0: the 1024 over tenant_slots)");
static unsigned int quota_exports;
module_param(quota_exports, uint, 0444);
MODULE_PARM_DESC(quota_exports, "exports (EXPORT_MEMORY) one tenant may hold on a shared device (0: the 256 over tenant_slots)");

/*
 * Tests only: module init fails at its Nth step (1: the first device's storage, then its
 * state, identity and worker, the next device's..., then each node's registration) with
 * -ENOMEM, as an allocation failure there would; 0 (the default) fails nothing. The kernel's
 * own fault injection (failslab) also fails the module loader's allocations, which log a
 * warning with a stack trace; this reaches exactly the module's steps.
 */
static unsigned int fail_init;
module_param(fail_init, uint, 0444);
MODULE_PARM_DESC(fail_init, "tests only: fail module init at its Nth step (0: never)");

/*
 * Most ivshmem-doorbell PCI devices the module binds (pci/mod.rs): 0 to 8; probe refuses the
 * others, logged. 0 binds none (and tests the refusal).
 */
static unsigned int pci_devices = 8;
module_param(pci_devices, uint, 0444);
MODULE_PARM_DESC(pci_devices, "ivshmem-doorbell PCI devices to bind at most (0-8, default 8)");

/*
 * Tests only (scripts/pci-smoke.sh): bind ivshmem-doorbell devices that are not davinci
 * devices (no davinci header in BAR2, or one whose heartbeat stands still), without a node,
 * for the debugfs test hooks. 0 (the default): such a device is refused (ENODEV).
 */
static unsigned int pci_hooks;
module_param(pci_hooks, uint, 0444);
MODULE_PARM_DESC(pci_hooks, "tests only: bind ivshmem devices that are not davinci devices, without a node, for the debugfs test hooks (0: refuse them)");

/* The parameters, as the Rust side reads them (same order as its Params). */
struct davinci_params {
	u32 devices;
	u32 memory_mb;
	u32 mode;
	u32 quota[5];
	u32 fail_init;
	u32 pci_devices;
	u32 tenant_slots;
	u32 pci_hooks;
};

void davinci_params(struct davinci_params *out);
void davinci_params(struct davinci_params *out)
{
	out->devices = devices;
	out->memory_mb = memory_mb;
	out->mode = mode;
	out->quota[0] = quota_contexts;
	out->quota[1] = quota_streams;
	out->quota[2] = quota_events;
	out->quota[3] = quota_allocations;
	out->quota[4] = quota_exports;
	out->fail_init = fail_init;
	out->pci_devices = pci_devices;
	out->tenant_slots = tenant_slots;
	out->pci_hooks = pci_hooks;
}

/*
 * Bytes of buffers the module holds (rings, doorbells, device memory), over every device:
 * pages a client maps are never outside it (a freed object's mappings are revoked before its
 * buffer goes). Read as /sys/module/davinci/parameters/pinned_bytes.
 */
static atomic64_t pinned_bytes = ATOMIC64_INIT(0);

static int pinned_get(char *buf, const struct kernel_param *kp)
{
	return sysfs_emit(buf, "%lld\n", atomic64_read(&pinned_bytes));
}

static const struct kernel_param_ops pinned_ops = {
	.get = pinned_get,
};
module_param_cb(pinned_bytes, &pinned_ops, NULL, 0444);
MODULE_PARM_DESC(pinned_bytes, "bytes of device buffers the module holds now (read-only)");

/*
 * The engine's fault injection, for testing a runtime's error handling on the kernel as on the
 * mock device (`davinci-mockd --inject`): written at run time (root only), applied to every
 * device at once. "error-at=N[:ERRNO]", "hang-at=N" or "stop-at=N" arms every stream, and
 * every stream created from then on; "none" disarms; "reset" resets every device (each
 * running stream stops with ECANCELED). Given at load, a fault is armed from the start.
 */
int davinci_inject(const char *text, size_t len);
void davinci_inject_text(char *out, size_t len);
static char inject_text[64];

static int inject_set(const char *val, const struct kernel_param *kp)
{
	size_t len = strcspn(val, "\n");
	int ret;

	if (len >= sizeof(inject_text))
		return -EINVAL;
	ret = davinci_inject(val, len);
	if (ret)
		return ret;
	memcpy(inject_text, val, len);
	inject_text[len] = '\0';
	return 0;
}

static int inject_get(char *buf, const struct kernel_param *kp)
{
	return sysfs_emit(buf, "%s\n", inject_text[0] ? inject_text : "none");
}

static const struct kernel_param_ops inject_ops = {
	.set = inject_set,
	.get = inject_get,
};
module_param_cb(inject, &inject_ops, NULL, 0600);
MODULE_PARM_DESC(inject, "fault to inject into every stream: error-at=N[:ERRNO], hang-at=N, stop-at=N, none; reset resets every device (tests only)");

/*
 * The parameter lock of this module: a write of a parameter (inject_set) runs under it, so
 * module exit takes it to mark the module going (READY cleared), after which no write reaches
 * a device: without it, a write racing rmmod could apply a fault to a device being freed.
 */
void davinci_param_lock(void);
void davinci_param_unlock(void);

void davinci_param_lock(void)
{
	kernel_param_lock(THIS_MODULE);
}

void davinci_param_unlock(void)
{
	kernel_param_unlock(THIS_MODULE);
}

/*
 * Whether a message about something a device or a user can repeat at will may be logged now:
 * 10 in 5 s, the rest counted ("callbacks suppressed"), so a flood of them cannot fill the log.
 */
int davinci_log_ratelimit(void);
static DEFINE_RATELIMIT_STATE(davinci_log_rs, 5 * HZ, 10);

int davinci_log_ratelimit(void)
{
	return __ratelimit(&davinci_log_rs);
}

/* The fault given at load, for module init to arm (NUL-terminated, empty if none). */
void davinci_inject_text(char *out, size_t len)
{
	strscpy(out, inject_text, len);
}

/* ---- buffers ------------------------------------------------------------------------------ */

void *davinci_buf_alloc(size_t len);
void davinci_buf_free(void *p, size_t len);
s64 davinci_pinned_bytes(void);

/*
 * len zeroed bytes of vmalloc memory, charged to the calling task's memory cgroup (the
 * opener's, since every buffer is created by its ioctl), or NULL.
 */
void *davinci_buf_alloc(size_t len)
{
	/* A client's size: failing is its ENOMEM, not a kernel warning. */
	void *p = __vmalloc(len, GFP_KERNEL_ACCOUNT | __GFP_ZERO | __GFP_NOWARN);

	if (p)
		atomic64_add(len, &pinned_bytes);
	return p;
}

/* Frees a davinci_buf_alloc buffer of len bytes (no mapping reaches its pages any more). */
void davinci_buf_free(void *p, size_t len)
{
	vfree(p);
	atomic64_sub(len, &pinned_bytes);
}

s64 davinci_pinned_bytes(void)
{
	return atomic64_read(&pinned_bytes);
}

/* ---- the file and vm operations ----------------------------------------------------------- */

/* In Rust (fops.rs, ioctl.rs). */
int davinci_open(struct inode *inode, struct file *file);
int davinci_release(struct inode *inode, struct file *file);
long davinci_ioctl(struct file *file, unsigned int cmd, unsigned long arg);
int davinci_mmap_check(void *open, u64 cookie, u64 len);
int davinci_fault(void *open, u64 cookie, u64 page, struct vm_area_struct *vma,
		  unsigned long addr);

static vm_fault_t davinci_vm_fault(struct vm_fault *vmf)
{
	return davinci_fault_common(vmf, davinci_fault);
}

static const struct vm_operations_struct davinci_vm_ops = {
	.fault = davinci_vm_fault,
};

/*
 * mmap: the object the cookie names must exist and be the caller's (davinci_mmap_check,
 * under the device lock); its pages are mapped on fault, each fault checking again under the
 * lock, so a page is never mapped after its object was freed (freeing revokes the mappings:
 * davinci_revoke). VM_IO: not inherited across fork even after MADV_DOFORK, not reachable by
 * get_user_pages (nothing can pin the pages behind the device's back); VM_DONTEXPAND: no
 * mremap growth; VM_DONTDUMP: not in core dumps.
 */
static int davinci_mmap(struct file *file, struct vm_area_struct *vma)
{
	return davinci_mmap_common(file, vma, davinci_mmap_check,
				   VM_IO | VM_DONTCOPY | VM_DONTEXPAND | VM_DONTDUMP | VM_MIXEDMAP,
				   &davinci_vm_ops);
}

/*
 * The file operations of every davinci device: a const table with its owner, so the module
 * cannot go while a file is open. compat_ptr_ioctl: every argument has the same layout for a
 * 32-bit caller (fixed-width fields, explicit padding); only the pointer needs compat_ptr.
 */
const struct file_operations davinci_fops = {
	.owner = THIS_MODULE,
	.open = davinci_open,
	.release = davinci_release,
	.unlocked_ioctl = davinci_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.mmap = davinci_mmap,
	.llseek = noop_llseek,
};

/*
 * Where C puts a few fields the kernel crate's bindings also describe, so module init can
 * check the bindings against the compiler (a bindgen that loses an alignment shifts every
 * field after it: docs/kernel.md). The module itself reads none of them from Rust.
 */
size_t davinci_c_offset(unsigned int which);
size_t davinci_c_offset(unsigned int which)
{
	switch (which) {
	case 0:
		return offsetof(struct task_struct, pid);
	case 1:
		return offsetof(struct task_struct, thread);
	case 2:
		return sizeof(struct task_struct);
	case 3:
		return offsetof(struct file, private_data);
	case 4:
		return offsetof(struct vm_area_struct, vm_pgoff);
	default:
		return (size_t)-1;
	}
}

/* ---- what the Rust side needs from the structures ----------------------------------------- */

int davinci_map_pages(struct vm_area_struct *vma, unsigned long addr, void *kaddr, u64 page,
		      u64 pages);
void davinci_revoke(struct address_space *mapping, u64 cookie, u64 len);
void *davinci_file_private(struct file *file);
void davinci_file_set_private(struct file *file, void *p);
struct address_space *davinci_file_mapping(struct file *file);
int davinci_file_writable(struct file *file);
u32 davinci_file_uid(struct file *file);
int davinci_file_admin(struct file *file);
int davinci_opener_admin(void);
u32 davinci_current_tgid(void);
u32 davinci_current_pid(void);
struct miscdevice *davinci_misc_register(unsigned int index, unsigned int mode);
void davinci_misc_deregister(struct miscdevice *misc);
struct task_struct *davinci_kthread_create(int (*fn)(void *), void *data, unsigned int index);
int davinci_current_cgroup_path(char *buf, size_t len);
void davinci_current_comm(char buf[16]);
int davinci_need_resched(void);
void davinci_cpu_relax(void);
u64 davinci_random_u64(void);

/* Pages mapped by one fault: the faulting one and up to this many after it. */
#define DAVINCI_FAULT_AROUND 16

/*
 * Maps page `page` of an object (kaddr: its vmalloc buffer of `pages` pages) at addr, and up
 * to DAVINCI_FAULT_AROUND pages after it inside the vma and the object. Called under the
 * device lock by the fault handler; 0, or the first page's error.
 */
int davinci_map_pages(struct vm_area_struct *vma, unsigned long addr, void *kaddr, u64 page,
		      u64 pages)
{
	unsigned int i;

	for (i = 0; i < DAVINCI_FAULT_AROUND && page + i < pages; i++) {
		unsigned long at = addr + ((unsigned long)i << PAGE_SHIFT);
		struct page *p;
		int err;

		if (at >= vma->vm_end)
			break;
		p = vmalloc_to_page(kaddr + ((page + i) << PAGE_SHIFT));
		if (!p)
			return i ? 0 : -EFAULT;
		err = vm_insert_page(vma, at, p);
		/* -EBUSY: already mapped (another thread's fault); fine. */
		if (err && err != -EBUSY)
			return i ? 0 : err;
	}
	return 0;
}

/*
 * The object at cookie is going: every mapping of [cookie, cookie + len) through the owner's
 * file (all of the object's mappings: only the owner can map it) loses its pages now; a later
 * access faults and finds no object (SIGBUS). Other objects' mappings in the range are only
 * unmapped until their next fault.
 */
void davinci_revoke(struct address_space *mapping, u64 cookie, u64 len)
{
	unmap_mapping_range(mapping, (loff_t)cookie, (loff_t)len, 1);
}

void *davinci_file_private(struct file *file)
{
	return file->private_data;
}

void davinci_file_set_private(struct file *file, void *p)
{
	file->private_data = p;
}

struct address_space *davinci_file_mapping(struct file *file)
{
	return file->f_mapping;
}

/* O_RDONLY is a control open, anything writable a client (docs/abi.md 1.1). */
int davinci_file_writable(struct file *file)
{
	return (file->f_flags & O_ACCMODE) != O_RDONLY;
}

/* The uid the file was opened with, as the initial user namespace sees it. */
u32 davinci_file_uid(struct file *file)
{
	return from_kuid_munged(&init_user_ns, file->f_cred->uid);
}

/* Whether the file's opener may change the device's sharing (audited: an admin action). */
int davinci_file_admin(struct file *file)
{
	return file_ns_capable(file, &init_user_ns, CAP_SYS_ADMIN);
}

/*
 * Whether the opener (current, in open) is an admin, for what it may see: not audited, since
 * every open asks.
 */
int davinci_opener_admin(void)
{
	return ns_capable_noaudit(&init_user_ns, CAP_SYS_ADMIN);
}

/* The current process's id in the initial pid namespace (as an operator on the host sees it). */
u32 davinci_current_tgid(void)
{
	return task_tgid_nr(current);
}

/* The current thread's id in the initial pid namespace (a WAIT_EVENT's restart note). */
u32 davinci_current_pid(void)
{
	return task_pid_nr(current);
}

/* Registers /dev/davinci<index> with the module's fops; the miscdevice or an ERR_PTR. */
/* Registers /dev/davinci<index> with a software device's file operations. */
struct miscdevice *davinci_misc_register(unsigned int index, unsigned int mode)
{
	struct miscdevice *misc = kzalloc(sizeof(*misc), GFP_KERNEL);
	int err;

	if (!misc)
		return ERR_PTR(-ENOMEM);
	misc->name = kasprintf(GFP_KERNEL, "davinci%u", index);
	if (!misc->name) {
		kfree(misc);
		return ERR_PTR(-ENOMEM);
	}
	misc->minor = MISC_DYNAMIC_MINOR;
	misc->fops = &davinci_fops;
	misc->mode = mode;
	err = misc_register(misc);
	if (err) {
		kfree(misc->name);
		kfree(misc);
		return ERR_PTR(err);
	}
	return misc;
}

/* Undoes davinci_misc_register (only for one that succeeded). */
void davinci_misc_deregister(struct miscdevice *misc)
{
	misc_deregister(misc);
	kfree(misc->name);
	kfree(misc);
}

/* A stopped kthread "davinci<index>" running fn(data); the task or an ERR_PTR. */
struct task_struct *davinci_kthread_create(int (*fn)(void *), void *data, unsigned int index)
{
	return kthread_create(fn, data, "davinci%u", index);
}

/* A random number for a device's handle secret (get_random_u64 may be inline). */
u64 davinci_random_u64(void)
{
	return get_random_u64();
}

/*
 * The current task's cgroup v2 path as the initial cgroup namespace sees it (so a process in
 * a container with its own cgroup namespace still shows the runtime's path), NUL-terminated
 * in buf. Returns the path length, -ENAMETOOLONG if it did not fit, or -ENOENT without
 * cgroups. Sleeps (cgroup_path_ns takes cgroup_mutex): call it in process context with no
 * lock held.
 */
int davinci_current_cgroup_path(char *buf, size_t len)
{
#ifdef CONFIG_CGROUPS
	struct cgroup *cgrp;
	int ret;

	rcu_read_lock();
	cgrp = task_dfl_cgroup(current);
	if (!cgroup_tryget(cgrp))
		cgrp = NULL;
	rcu_read_unlock();
	if (!cgrp)
		return -ENOENT;
	ret = cgroup_path_ns(cgrp, buf, len, init_task.nsproxy->cgroup_ns);
	cgroup_put(cgrp);
	return ret;
#else
	if (len)
		buf[0] = '\0';
	return -ENOENT;
#endif
}

/*
 * The current process's name (the comm of its thread-group leader, as /proc/<pid>/comm shows
 * it, not the calling thread's), NUL-padded into buf (TASK_COMM_LEN is 16, the ABI's size).
 */
void davinci_current_comm(char buf[16])
{
	char comm[TASK_COMM_LEN];

	BUILD_BUG_ON(TASK_COMM_LEN != 16);
	get_task_comm(comm, current->group_leader);
	memcpy(buf, comm, 16);
}

/*
 * Whether another task wants this CPU (the worker's idle spin ends then): need_resched() is
 * a static inline over the thread flags.
 */
int davinci_need_resched(void)
{
	return need_resched();
}

/* The architecture's spin-wait hint (PAUSE on x86), a static inline. */
void davinci_cpu_relax(void)
{
	cpu_relax();
}

/* ---- the fan-out of a PCI device's data interrupt ----------------------------------------- */

/*
 * One wait queue per notification word of a PCI device (pci/irq.rs): a WAIT_EVENT sleeper
 * sleeps on its client's word's queue. The data vector's hard-irq handler only copies the
 * words and marks those that changed (davinci_fanout_mark), then queues the work item, which
 * wakes the marked words' queues in process context: nothing proportional to the sleepers
 * runs in hard-irq context, and a completion wakes only the sleepers whose word changed.
 */
struct davinci_fanout {
	struct work_struct work;
	unsigned int n;
	unsigned long *pending;
	struct wait_queue_head wq[];
};

struct davinci_fanout *davinci_fanout_new(unsigned int n);
void davinci_fanout_free(struct davinci_fanout *f);
void davinci_fanout_mark(struct davinci_fanout *f, unsigned int i);
void davinci_fanout_kick(struct davinci_fanout *f);
struct wait_queue_head *davinci_fanout_queue(struct davinci_fanout *f, unsigned int i);
void davinci_fanout_wake_all(struct davinci_fanout *f);

static void davinci_fanout_work(struct work_struct *w)
{
	struct davinci_fanout *f = container_of(w, struct davinci_fanout, work);
	unsigned int i;

	for_each_set_bit(i, f->pending, f->n) {
		if (test_and_clear_bit(i, f->pending))
			wake_up_all(&f->wq[i]);
	}
}

/* n queues and the work item, or NULL. */
struct davinci_fanout *davinci_fanout_new(unsigned int n)
{
	struct davinci_fanout *f = kvzalloc(struct_size(f, wq, n), GFP_KERNEL);
	unsigned int i;

	if (!f)
		return NULL;
	f->pending = bitmap_zalloc(n, GFP_KERNEL);
	if (!f->pending) {
		kvfree(f);
		return NULL;
	}
	f->n = n;
	for (i = 0; i < n; i++)
		init_waitqueue_head(&f->wq[i]);
	INIT_WORK(&f->work, davinci_fanout_work);
	return f;
}

/* After the interrupts are freed and no sleeper is left: the work item is not running after. */
void davinci_fanout_free(struct davinci_fanout *f)
{
	cancel_work_sync(&f->work);
	bitmap_free(f->pending);
	kvfree(f);
}

/* Word i changed (any context, hard-irq included). */
void davinci_fanout_mark(struct davinci_fanout *f, unsigned int i)
{
	if (i < f->n)
		set_bit(i, f->pending);
}

/* Wake the marked words' sleepers, from process context soon (any context). */
void davinci_fanout_kick(struct davinci_fanout *f)
{
	queue_work(system_highpri_wq, &f->work);
}

/* Word i's queue (NULL beyond the words). */
struct wait_queue_head *davinci_fanout_queue(struct davinci_fanout *f, unsigned int i)
{
	return i < f->n ? &f->wq[i] : NULL;
}

/* Every sleeper (the device is gone: their wait condition checks that). */
void davinci_fanout_wake_all(struct davinci_fanout *f)
{
	unsigned int i;

	for (i = 0; i < f->n; i++)
		wake_up_all(&f->wq[i]);
}
