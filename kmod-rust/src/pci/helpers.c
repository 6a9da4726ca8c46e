// SPDX-License-Identifier: GPL-2.0
/*
 * The PCI side of the module (issue 27): a pci_driver for QEMU's ivshmem-doorbell device
 * (1af4:1110), whose engine runs in a host process (davinci-ivshmem). Linux 6.12 has no Rust
 * PCI abstractions, so everything that touches struct pci_dev, BARs and interrupts is here, in
 * C; the Rust side (pci/mod.rs) keeps the per-device state and decides what a device is for.
 *
 * The boundary (see pci/mod.rs for the Rust half):
 *   - C owns the mechanism. probe acquires, in order, the enabled device, its regions, BAR0
 *     (registers, pci_iomap), BAR2 (shared memory, memremap WB: below), bus mastering and the
 *     MSI-X vectors; remove releases them in reverse. A failure half way unwinds with the
 *     usual goto ladder. All of it is in struct davinci_pci, which Rust never looks inside.
 *   - Rust owns the state. Once the resources are in, probe calls the Rust export
 *     davinci_pci_attach(dp, &info), which claims one of the module's PCI slots (at most
 *     8 devices, fewer with the pci_devices parameter: another is refused, logged) and
 *     returns its state (a KBox) or an ERR_PTR. Only then are the interrupt handlers requested; each one calls the Rust
 *     export davinci_pci_interrupt(state, vector) (hard-irq context: it only counts, with
 *     atomics). remove frees every irq (free_irq waits for a running handler) before it calls
 *     davinci_pci_detach(state), so no handler can see freed state; the device's resources
 *     go after that, so nothing Rust holds (its handle on dp) outlives them.
 *   - Rust reaches the device only through the davinci_pci_* functions below (the doorbell
 *     for now), with the dp handle the state keeps.
 *
 * BAR2 mapping: memremap(MEMREMAP_WB). Under QEMU the BAR is host RAM (the memfd the host
 * process shares), so cacheable write-back access is coherent with the host process and is
 * what the rings will want (plain loads and stores, the ring crate's atomics). memremap of a
 * range that is not System RAM falls back to ioremap_cache on x86. On a real PCIe device
 * BAR2 would be device memory, not coherent with the CPU cache: that would need
 * ioremap_wc (or ioremap) and explicit ordering, a different mapping per platform.
 *
 * Test-only hooks (debugfs, root only): /sys/kernel/debug/davinci/<pci name>/info shows the
 * BAR sizes, peer id, vectors, the interrupts counted per vector and the admin requests the
 * device answered; writing
 * "VECTOR COUNT [TIMEOUT_MS]" to .../ring rings peer 0's doorbell VECTOR COUNT times, each
 * time waiting (up to TIMEOUT_MS, default 2000, at most 60000) for the interrupt count of that
 * vector to move (the host answers each doorbell with one interrupt), and fails with
 * ETIMEDOUT if it does not (COUNT at most 1000: remove waits for a writer still in the file).
 */
#include <linux/cdev.h>
#include <linux/delay.h>
#include <linux/debugfs.h>
#include <linux/device.h>
#include <linux/err.h>
#include <linux/interrupt.h>
#include <linux/io.h>
#include <linux/jiffies.h>
#include <linux/mm.h>
#include <linux/mount.h>
#include <linux/mutex.h>
#include <linux/pseudo_fs.h>
#include <linux/sched/signal.h>
#include <linux/kernel.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include <linux/wait.h>
#include <linux/workqueue.h>
#include "../mmap_common.h"

/* ivshmem's BAR0 registers (QEMU docs/specs/ivshmem-spec.rst). */
#define IVSHMEM_REG_INTR_MASK 0
#define IVSHMEM_REG_INTR_STATUS 4
#define IVSHMEM_REG_IV_POSITION 8
#define IVSHMEM_REG_DOORBELL 12
#define IVSHMEM_BAR_REGS 0
#define IVSHMEM_BAR_SHM 2
/* Vectors the module asks for (the device has vectors=N; more are not used). */
#define DAVINCI_PCI_VECTORS 4

struct davinci_pci;

/* Where an interrupt handler finds its device and vector (request_irq's dev_id). */
struct davinci_pci_vec {
	struct davinci_pci *dp;
	unsigned int vector;
};

/* One bound device: its resources (C's) and its state (Rust's). */
struct davinci_pci {
	struct pci_dev *pdev;
	void __iomem *regs;
	resource_size_t regs_len;
	void *shm;
	resource_size_t shm_len;
	u32 peer;
	int nvec;
	/* Rust's state (davinci_pci_attach), NULL until attached. */
	void *state;
	struct davinci_pci_vec vec[DAVINCI_PCI_VECTORS];
	/* Test hook: the ring file's writer sleeps here until its interrupt came. */
	wait_queue_head_t irq_wait;
	struct dentry *dbg;
	/* The watchdog: once a second, a device whose heartbeat stood still is lost (Rust). */
	struct delayed_work watchdog;
	/*
	 * The rest of BAR0's page, reserved (request_mem_region) so that no device plugged in
	 * later is given registers there: a client maps the whole page as its doorbell page.
	 * NULL when BAR0 fills its page, or when the page may not be mapped (regs_alone 0).
	 */
	struct resource *bar0_rest;
};

/* What probe tells Rust about a device (pci/mod.rs's PciInfo, same layout). */
struct davinci_pci_info {
	u32 peer;
	u32 vectors;
	u64 regs_len;
	u64 shm_len;
	u32 bus;
	u32 devfn;
	/* BAR0's and BAR2's bus addresses (what a client mapping points at). */
	u64 regs_phys;
	u64 shm_phys;
	/* The kernel's write-back mapping of BAR2 (the admin rings are read through it). */
	void *shm;
	u32 domain;
	u16 vendor;
	u16 device;
	/* BAR0's page holds nothing but BAR0 (it may be mapped into a client). */
	u32 regs_alone;
};

/* In Rust (pci/mod.rs). */
void *davinci_pci_attach(struct davinci_pci *dp, const struct davinci_pci_info *info);
int davinci_pci_ready(void *state);
void davinci_pci_stop(void *state);
void davinci_pci_lose(void *state);
void davinci_pci_interrupt(void *state, u32 vector);
void davinci_pci_detach(void *state);
u64 davinci_pci_count(void *state, u32 vector);
u64 davinci_pci_answered(void *state);
int davinci_pci_watch(void *state);
int davinci_pci_ring(void *state, u32 vector);

/* For Rust. */
int davinci_pci_register(unsigned int mode);
void davinci_pci_unregister(void);
void davinci_pci_doorbell(struct davinci_pci *dp, u32 peer, u32 vector);

/* /sys/kernel/debug/davinci, the test hooks' directory (NULL or an error without debugfs). */
static struct dentry *davinci_dbg_root;

/*
 * Writes peer's doorbell for vector: the host process (peer 0) gets an event on its
 * eventfd `vector`. A posted MMIO write; nothing is read back.
 */
void davinci_pci_doorbell(struct davinci_pci *dp, u32 peer, u32 vector)
{
	iowrite32((peer << 16) | (vector & 0xffff), dp->regs + IVSHMEM_REG_DOORBELL);
}

static irqreturn_t davinci_pci_irq(int irq, void *data)
{
	struct davinci_pci_vec *v = data;

	davinci_pci_interrupt(v->dp->state, v->vector);
	/* Test hook: the ring file's writer. Later: WAIT_EVENT sleepers, through Rust. */
	wake_up_all(&v->dp->irq_wait);
	return IRQ_HANDLED;
}

/* ---- test hooks (debugfs) ----------------------------------------------------------------- */

static int davinci_pci_info_show(struct seq_file *m, void *unused)
{
	struct davinci_pci *dp = m->private;
	int v;

	seq_printf(m, "pci %s\n", pci_name(dp->pdev));
	seq_printf(m, "peer %u\n", dp->peer);
	seq_printf(m, "bar0 %llu\n", (unsigned long long)dp->regs_len);
	seq_printf(m, "bar2 %llu\n", (unsigned long long)dp->shm_len);
	/* The first word of the shared memory (ivshmem-echo writes its magic there). */
	seq_printf(m, "shm0 %#x\n", READ_ONCE(*(u32 *)dp->shm));
	seq_printf(m, "vectors %d\n", dp->nvec);
	seq_puts(m, "irqs");
	for (v = 0; v < dp->nvec; v++)
		seq_printf(m, " %llu", davinci_pci_count(dp->state, v));
	seq_putc(m, '\n');
	/* Admin requests answered (the chaos boot counts them across re-probes). */
	seq_printf(m, "admin %llu\n", davinci_pci_answered(dp->state));
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(davinci_pci_info);

static ssize_t davinci_pci_ring_write(struct file *file, const char __user *ubuf, size_t len,
				      loff_t *ppos)
{
	struct davinci_pci *dp = file->private_data;
	unsigned int vector, count, timeout_ms = 2000, i;
	char buf[48];
	int ret;

	if (len >= sizeof(buf))
		return -EINVAL;
	if (copy_from_user(buf, ubuf, len))
		return -EFAULT;
	buf[len] = '\0';
	if (sscanf(buf, "%u %u %u", &vector, &count, &timeout_ms) < 2)
		return -EINVAL;
	if (vector >= dp->nvec || count > 1000 || !timeout_ms || timeout_ms > 60000)
		return -EINVAL;
	for (i = 0; i < count; i++) {
		u64 before = davinci_pci_count(dp->state, vector);
		long left;

		ret = davinci_pci_ring(dp->state, vector);
		if (ret)
			return ret;
		left = wait_event_interruptible_timeout(
			dp->irq_wait, davinci_pci_count(dp->state, vector) != before,
			msecs_to_jiffies(timeout_ms));
		if (left < 0)
			return left;
		if (left == 0) {
			dev_info(&dp->pdev->dev,
				 "ring: no interrupt on vector %u within %u ms after doorbell %u\n",
				 vector, timeout_ms, i + 1);
			return -ETIMEDOUT;
		}
	}
	return len;
}

static const struct file_operations davinci_pci_ring_fops = {
	.owner = THIS_MODULE,
	.open = simple_open,
	.write = davinci_pci_ring_write,
	.llseek = noop_llseek,
};

/* ---- for the Rust transport (pci/dev.rs, pci/fops.rs) -------------------------------------- */

void davinci_wq_init(struct wait_queue_head *wq);
void davinci_wq_wake(struct wait_queue_head *wq);
long davinci_wq_wait(struct wait_queue_head *wq, const u64 *counter, u64 before,
		     const u8 *dead, unsigned int timeout_ms, int interruptible);
int davinci_signal_pending(void);
int davinci_map_pfns(struct vm_area_struct *vma, unsigned long addr, u64 pfn, u64 count,
		     int uncached);
int davinci_pci_mmap_check(void *open, u64 cookie, u64 len);
int davinci_pci_fault(void *open, u64 cookie, u64 page, struct vm_area_struct *vma,
		      unsigned long addr);
int davinci_pci_open(void *state, struct file *file);
static const struct file_operations davinci_pci_fops;
int davinci_pci_release(struct inode *inode, struct file *file);
long davinci_pci_ioctl(struct file *file, unsigned int cmd, unsigned long arg);

/* A wait queue in Rust's memory (pinned, in the device's Arc). */
void davinci_wq_init(struct wait_queue_head *wq)
{
	init_waitqueue_head(wq);
}

/* Wakes every sleeper of wq (any context, hard-irq included). */
void davinci_wq_wake(struct wait_queue_head *wq)
{
	wake_up_all(wq);
}

/*
 * One address space per device (as drm_fs_inode_new): an anonymous inode of the module's
 * pseudo filesystem, whose mapping every open file of the device uses (f_mapping, set at
 * open), whatever node or container the open came through. Revocation and removal unmap
 * there. The filesystem has no owner: a mount held by a bound device must not pin the module
 * (rmmod unbinds the devices, and every open file already pins the module itself).
 */
#define DAVINCI_PCI_FS_MAGIC 0x64766e63
static struct vfsmount *davinci_pci_mnt;
static int davinci_pci_mnt_count;

static int davinci_pci_fs_init_fs_context(struct fs_context *fc)
{
	return init_pseudo(fc, DAVINCI_PCI_FS_MAGIC) ? 0 : -ENOMEM;
}

static struct file_system_type davinci_pci_fs_type = {
	.name = "davinci_pci",
	.init_fs_context = davinci_pci_fs_init_fs_context,
	.kill_sb = kill_anon_super,
};

struct inode *davinci_pci_inode_new(void);
void davinci_pci_inode_put(struct inode *inode);
void davinci_pci_revoke(struct inode *inode, u64 cookie, u64 len);
void davinci_pci_file_set_mapping(struct file *file, struct inode *inode);

/* A new device inode, or an ERR_PTR. */
struct inode *davinci_pci_inode_new(void)
{
	struct inode *inode;
	int err;

	err = simple_pin_fs(&davinci_pci_fs_type, &davinci_pci_mnt, &davinci_pci_mnt_count);
	if (err)
		return ERR_PTR(err);
	inode = alloc_anon_inode(davinci_pci_mnt->mnt_sb);
	if (IS_ERR(inode))
		simple_release_fs(&davinci_pci_mnt, &davinci_pci_mnt_count);
	return inode;
}

/* Drops a device inode (no file of the device is left: each holds the device's state). */
void davinci_pci_inode_put(struct inode *inode)
{
	iput(inode);
	simple_release_fs(&davinci_pci_mnt, &davinci_pci_mnt_count);
}

/* Unmaps [cookie, cookie + len) of every mapping of the device (len 0: all of them). */
void davinci_pci_revoke(struct inode *inode, u64 cookie, u64 len)
{
	unmap_mapping_range(inode->i_mapping, (loff_t)cookie, (loff_t)len, 1);
}

/* An open of the device maps through the device's address space, not its node's. */
void davinci_pci_file_set_mapping(struct file *file, struct inode *inode)
{
	file->f_mapping = inode->i_mapping;
}

/*
 * The device's lock: a struct mutex in Rust's pinned state, of one lockdep class
 * ("davinci_pci_dev.lock", in /proc/lockdep once taken) for every PCI device. Rust's guard
 * (pci/admin.rs's Locked) is made only by the lock functions below and unlocks on drop.
 */
void davinci_pci_mutex_init(struct mutex *m);
int davinci_pci_mutex_lock_killable(struct mutex *m);
void davinci_pci_mutex_lock(struct mutex *m);
int davinci_pci_mutex_trylock(struct mutex *m);
void davinci_pci_mutex_unlock(struct mutex *m);
void davinci_pci_mutex_destroy(struct mutex *m);

void davinci_pci_mutex_init(struct mutex *m)
{
	static struct lock_class_key key;

	__mutex_init(m, "davinci_pci_dev.lock", &key);
}

/* A call: 0, or -EINTR when a fatal signal came first (the lock is not taken). */
int davinci_pci_mutex_lock_killable(struct mutex *m)
{
	return mutex_lock_killable(m);
}

/* Release and removal: what they do must happen, whatever signal is pending. */
void davinci_pci_mutex_lock(struct mutex *m)
{
	mutex_lock(m);
}

/* The watchdog: 1 if taken. */
int davinci_pci_mutex_trylock(struct mutex *m)
{
	return mutex_trylock(m);
}

void davinci_pci_mutex_unlock(struct mutex *m)
{
	mutex_unlock(m);
}

void davinci_pci_mutex_destroy(struct mutex *m)
{
	mutex_destroy(m);
}

/*
 * Sleeps on wq until *counter differs from before or *dead is set (checked after the sleeper
 * is queued, so a wake-up between the caller's look and the sleep is not lost), at most
 * timeout_ms. >0: either happened; 0: timed out; -ERESTARTSYS: a signal (interruptible only).
 */
long davinci_wq_wait(struct wait_queue_head *wq, const u64 *counter, u64 before,
		     const u8 *dead, unsigned int timeout_ms, int interruptible)
{
	unsigned long t = msecs_to_jiffies(timeout_ms);

	if (interruptible)
		return wait_event_interruptible_timeout(
			*wq, READ_ONCE(*counter) != before || READ_ONCE(*dead), t);
	/* An admin completion: I/O the caller waits for (D state), at most t at a time. */
	return wait_event_timeout(*wq, READ_ONCE(*counter) != before || READ_ONCE(*dead), t);
}

void davinci_msleep(unsigned int ms);
void davinci_msleep(unsigned int ms)
{
	msleep(ms);
}

void davinci_cond_resched(void);
void davinci_cond_resched(void)
{
	cond_resched();
}

int davinci_signal_pending(void)
{
	return signal_pending(current);
}

/*
 * Maps count pages of device memory from pfn at addr of a VM_PFNMAP vma (clipped to the
 * vma), uncached or as the vma's protection says (write-back). 0, or the first page's error
 * (-ENOMEM, -EFAULT).
 */
int davinci_map_pfns(struct vm_area_struct *vma, unsigned long addr, u64 pfn, u64 count,
		     int uncached)
{
	pgprot_t prot = uncached ? pgprot_noncached(vma->vm_page_prot) : vma->vm_page_prot;
	u64 i;

	for (i = 0; i < count; i++) {
		unsigned long at = addr + ((unsigned long)i << PAGE_SHIFT);
		vm_fault_t r;

		if (at >= vma->vm_end)
			break;
		r = vmf_insert_pfn_prot(vma, at, (unsigned long)(pfn + i), prot);
		if (r & VM_FAULT_OOM)
			return i ? 0 : -ENOMEM;
		if (r & VM_FAULT_ERROR)
			return i ? 0 : -EFAULT;
	}
	return 0;
}

static vm_fault_t davinci_pci_vm_fault(struct vm_fault *vmf)
{
	return davinci_fault_common(vmf, davinci_pci_fault);
}

static const struct vm_operations_struct davinci_pci_vm_ops = {
	.fault = davinci_pci_vm_fault,
};

/*
 * mmap of a PCI device's node: the object must exist and be the caller's (MMAP_TARGET through
 * the admin queue); its pages (BAR2's, or BAR0's first page uncached for a doorbell) are
 * inserted on fault, each fault asking the device again, so a page is never mapped after its
 * object was freed (the completion of the request that freed it revokes the mappings).
 * VM_PFNMAP: device memory with no struct page; VM_IO, VM_DONTCOPY, VM_DONTEXPAND,
 * VM_DONTDUMP as for the software device.
 */
static int davinci_pci_mmap(struct file *file, struct vm_area_struct *vma)
{
	return davinci_mmap_common(file, vma, davinci_pci_mmap_check,
				   VM_IO | VM_PFNMAP | VM_DONTCOPY | VM_DONTEXPAND | VM_DONTDUMP,
				   &davinci_pci_vm_ops);
}

/*
 * A PCI device's node is a character device of its own (not a misc device): misc_open holds
 * the misc core's global mutex around a driver's open, and a PCI open waits for the device
 * (an admin round trip, behind other tenants' calls), which would hold up every misc open of
 * the system. The table below is what open looks a node up in; its mutex is held only for
 * the lookup and the reference Rust takes (davinci_pci_get), never across a device call.
 */
#define DAVINCI_PCI_SLOTS 8
static dev_t davinci_pci_base;
static struct class *davinci_pci_class;
static unsigned int davinci_node_mode = 0660;
static DEFINE_MUTEX(davinci_nodes_lock);
static struct {
	struct cdev *cdev;
	struct device *dev;
	void *state;
} davinci_nodes[DAVINCI_PCI_SLOTS];

/* In Rust (pci/dev.rs): a new reference on a registered state, for an open. */
void *davinci_pci_get(void *state);

static char *davinci_devnode(const struct device *dev, umode_t *mode)
{
	if (mode)
		*mode = davinci_node_mode;
	return NULL;
}

int davinci_pci_node_add(void *state, unsigned int slot, unsigned int index);
void davinci_pci_node_del(unsigned int slot);
void *davinci_pci_node_state(unsigned int slot);

/* A new reference on slot's registered state (the inject parameter's forwarding), or NULL. */
void *davinci_pci_node_state(unsigned int slot)
{
	void *state = NULL;

	if (slot >= DAVINCI_PCI_SLOTS)
		return NULL;
	mutex_lock(&davinci_nodes_lock);
	if (davinci_nodes[slot].state)
		state = davinci_pci_get(davinci_nodes[slot].state);
	mutex_unlock(&davinci_nodes_lock);
	return state;
}

/* Registers /dev/davinci<index> for the device in slot; 0 or -errno. */
int davinci_pci_node_add(void *state, unsigned int slot, unsigned int index)
{
	dev_t devt = davinci_pci_base + slot;
	struct cdev *cdev;
	struct device *dev;
	int err;

	if (slot >= DAVINCI_PCI_SLOTS)
		return -EINVAL;
	cdev = cdev_alloc();
	if (!cdev)
		return -ENOMEM;
	cdev->ops = &davinci_pci_fops;
	cdev->owner = THIS_MODULE;
	err = cdev_add(cdev, devt, 1);
	if (err) {
		kobject_put(&cdev->kobj);
		return err;
	}
	mutex_lock(&davinci_nodes_lock);
	davinci_nodes[slot].cdev = cdev;
	davinci_nodes[slot].state = state;
	mutex_unlock(&davinci_nodes_lock);
	dev = device_create(davinci_pci_class, NULL, devt, NULL, "davinci%u", index);
	if (IS_ERR(dev)) {
		davinci_pci_node_del(slot);
		return PTR_ERR(dev);
	}
	davinci_nodes[slot].dev = dev;
	return 0;
}

/*
 * Removes slot's node: no open finds the device from now on (one in progress already holds
 * its own reference).
 */
void davinci_pci_node_del(unsigned int slot)
{
	struct cdev *cdev;
	struct device *dev;

	if (slot >= DAVINCI_PCI_SLOTS)
		return;
	mutex_lock(&davinci_nodes_lock);
	cdev = davinci_nodes[slot].cdev;
	dev = davinci_nodes[slot].dev;
	davinci_nodes[slot].cdev = NULL;
	davinci_nodes[slot].dev = NULL;
	davinci_nodes[slot].state = NULL;
	mutex_unlock(&davinci_nodes_lock);
	if (dev)
		device_destroy(davinci_pci_class, davinci_pci_base + slot);
	if (cdev)
		cdev_del(cdev);
}

/* open: the node's device, a reference taken under the table's lock, then Rust's open. */
static int davinci_pci_cdev_open(struct inode *inode, struct file *file)
{
	void *state = NULL;
	int i;

	mutex_lock(&davinci_nodes_lock);
	for (i = 0; i < DAVINCI_PCI_SLOTS; i++) {
		if (davinci_nodes[i].cdev && davinci_nodes[i].cdev == inode->i_cdev &&
		    davinci_nodes[i].state) {
			state = davinci_pci_get(davinci_nodes[i].state);
			break;
		}
	}
	mutex_unlock(&davinci_nodes_lock);
	if (!state)
		return -ENODEV;
	/* Rust's open owns the reference from here (it drops it on failure). */
	return davinci_pci_open(state, file);
}

/* The file operations of a PCI device's node (the software devices' are helpers.c's). */
static const struct file_operations davinci_pci_fops = {
	.owner = THIS_MODULE,
	.open = davinci_pci_cdev_open,
	.release = davinci_pci_release,
	.unlocked_ioctl = davinci_pci_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.mmap = davinci_pci_mmap,
	.llseek = noop_llseek,
};

/* ---- the driver ----------------------------------------------------------------------------- */

/*
 * Whether the page BAR0 starts holds no other resource of any PCI device (BAR0 is 256 bytes:
 * another device's registers could share its page, and a client maps the whole page as its
 * doorbell page). BAR0 must start the page, and no other device's resource (nor this one's
 * other BARs) may reach into it.
 */
static bool davinci_bar0_alone(struct pci_dev *pdev)
{
	resource_size_t start = pci_resource_start(pdev, IVSHMEM_BAR_REGS);
	resource_size_t end = start + PAGE_SIZE - 1;
	struct pci_dev *other = NULL;
	int i;

	if (start & ~PAGE_MASK)
		return false;
	for_each_pci_dev(other) {
		for (i = 0; i < PCI_NUM_RESOURCES; i++) {
			struct resource *r = &other->resource[i];

			if (other == pdev && i == IVSHMEM_BAR_REGS)
				continue;
			if (!(r->flags & IORESOURCE_MEM) || !r->start)
				continue;
			if (r->start <= end && r->end >= start) {
				pci_dev_put(other);
				return false;
			}
		}
	}
	return true;
}

/*
 * Reserves the rest of BAR0's page (davinci_bar0_alone said it is free now), so that no
 * device plugged in later is given a resource there. false if it cannot be reserved: then
 * no client may map the page.
 */
static bool davinci_bar0_reserve(struct davinci_pci *dp)
{
	resource_size_t start = pci_resource_start(dp->pdev, IVSHMEM_BAR_REGS);

	if (dp->regs_len >= PAGE_SIZE)
		return true;
	dp->bar0_rest = request_mem_region(start + dp->regs_len, PAGE_SIZE - dp->regs_len,
					   "davinci bar0 page");
	if (!dp->bar0_rest) {
		dev_warn(&dp->pdev->dev, "cannot reserve the rest of BAR0's page\n");
		return false;
	}
	return true;
}

static void davinci_bar0_unreserve(struct davinci_pci *dp)
{
	resource_size_t start = pci_resource_start(dp->pdev, IVSHMEM_BAR_REGS);

	if (dp->bar0_rest)
		release_mem_region(start + dp->regs_len, PAGE_SIZE - dp->regs_len);
	dp->bar0_rest = NULL;
}

/* The watchdog's tick: Rust says whether to look again (not once the device is lost). */
static void davinci_pci_watchdog(struct work_struct *work)
{
	struct davinci_pci *dp = container_of(to_delayed_work(work), struct davinci_pci, watchdog);

	if (davinci_pci_watch(dp->state))
		schedule_delayed_work(&dp->watchdog, HZ);
}

static int davinci_pci_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	struct davinci_pci_info info = {};
	struct davinci_pci *dp;
	void *state;
	int err, v;

	/* ivshmem-plain (same ids) has no MSI-X and no doorbell: not a device for us. */
	if (!pdev->msix_cap) {
		dev_info(&pdev->dev, "no MSI-X capability (ivshmem-plain?): not an ivshmem-doorbell device, not bound\n");
		return -ENODEV;
	}
	dp = kzalloc(sizeof(*dp), GFP_KERNEL);
	if (!dp)
		return -ENOMEM;
	dp->pdev = pdev;
	init_waitqueue_head(&dp->irq_wait);
	INIT_DELAYED_WORK(&dp->watchdog, davinci_pci_watchdog);

	err = pci_enable_device_mem(pdev);
	if (err) {
		dev_err(&pdev->dev, "cannot enable the device (%d)\n", err);
		goto free_dp;
	}
	err = pci_request_regions(pdev, KBUILD_MODNAME);
	if (err) {
		dev_err(&pdev->dev, "cannot claim its BARs (%d: another driver has them?)\n", err);
		goto disable;
	}
	dp->regs_len = pci_resource_len(pdev, IVSHMEM_BAR_REGS);
	dp->shm_len = pci_resource_len(pdev, IVSHMEM_BAR_SHM);
	if (dp->regs_len < 16 || !(pci_resource_flags(pdev, IVSHMEM_BAR_REGS) & IORESOURCE_MEM) ||
	    !dp->shm_len || !(pci_resource_flags(pdev, IVSHMEM_BAR_SHM) & IORESOURCE_MEM)) {
		dev_err(&pdev->dev, "not an ivshmem device: BAR0 %pR, BAR2 %pR\n",
			&pdev->resource[IVSHMEM_BAR_REGS], &pdev->resource[IVSHMEM_BAR_SHM]);
		err = -ENODEV;
		goto release;
	}
	dp->regs = pci_iomap(pdev, IVSHMEM_BAR_REGS, 0);
	if (!dp->regs) {
		dev_err(&pdev->dev, "cannot map BAR0\n");
		err = -ENOMEM;
		goto release;
	}
	dp->shm = memremap(pci_resource_start(pdev, IVSHMEM_BAR_SHM), dp->shm_len, MEMREMAP_WB);
	if (!dp->shm) {
		dev_err(&pdev->dev, "cannot map BAR2 (%llu bytes) write-back\n",
			(unsigned long long)dp->shm_len);
		err = -ENOMEM;
		goto unmap_regs;
	}
	dp->peer = ioread32(dp->regs + IVSHMEM_REG_IV_POSITION);
	/* An MSI-X message is a write by the device: without bus mastering QEMU drops it. */
	pci_set_master(pdev);
	/* Both vectors or none: vector 0 completes admin requests, vector 1 wakes waiters. */
	dp->nvec = pci_alloc_irq_vectors(pdev, 2, DAVINCI_PCI_VECTORS, PCI_IRQ_MSIX);
	if (dp->nvec < 0) {
		err = dp->nvec == -ENOSPC ? -ENODEV : dp->nvec;
		dev_err(&pdev->dev, "not the 2 MSI-X vectors a davinci device needs (%d), not bound\n",
			dp->nvec);
		goto clear_master;
	}

	info.peer = dp->peer;
	info.vectors = dp->nvec;
	info.regs_len = dp->regs_len;
	info.shm_len = dp->shm_len;
	info.bus = pdev->bus->number;
	info.devfn = pdev->devfn;
	info.regs_phys = pci_resource_start(pdev, IVSHMEM_BAR_REGS);
	info.shm_phys = pci_resource_start(pdev, IVSHMEM_BAR_SHM);
	info.shm = dp->shm;
	info.domain = pci_domain_nr(pdev->bus);
	info.vendor = pdev->vendor;
	info.device = pdev->device;
	info.regs_alone = davinci_bar0_alone(pdev) && davinci_bar0_reserve(dp);
	state = davinci_pci_attach(dp, &info);
	if (IS_ERR(state)) {
		err = PTR_ERR(state);
		goto free_vectors;
	}
	dp->state = state;

	for (v = 0; v < dp->nvec; v++) {
		dp->vec[v].dp = dp;
		dp->vec[v].vector = v;
		err = request_irq(pci_irq_vector(pdev, v), davinci_pci_irq, 0, KBUILD_MODNAME,
				  &dp->vec[v]);
		if (err) {
			dev_err(&pdev->dev, "cannot request the irq of vector %d (%d)\n", v, err);
			goto free_irqs;
		}
	}
	pci_set_drvdata(pdev, dp);
	/* The interrupts are in: the device's node may be opened now. */
	err = davinci_pci_ready(dp->state);
	if (err) {
		dev_err(&pdev->dev, "cannot register the device node (%d)\n", err);
		pci_set_drvdata(pdev, NULL);
		goto free_irqs;
	}

	if (!IS_ERR_OR_NULL(davinci_dbg_root)) {
		dp->dbg = debugfs_create_dir(pci_name(pdev), davinci_dbg_root);
		debugfs_create_file("info", 0400, dp->dbg, dp, &davinci_pci_info_fops);
		debugfs_create_file("ring", 0200, dp->dbg, dp, &davinci_pci_ring_fops);
	}
	schedule_delayed_work(&dp->watchdog, HZ);
	dev_info(&pdev->dev, "bound: peer %u, BAR0 %llu B, BAR2 %llu B (memremap wb), %d MSI-X vectors\n",
		 dp->peer, (unsigned long long)dp->regs_len, (unsigned long long)dp->shm_len, dp->nvec);
	return 0;

free_irqs:
	davinci_pci_stop(dp->state);
	while (--v >= 0)
		free_irq(pci_irq_vector(pdev, v), &dp->vec[v]);
	davinci_pci_detach(dp->state);
free_vectors:
	davinci_bar0_unreserve(dp);
	pci_free_irq_vectors(pdev);
clear_master:
	pci_clear_master(pdev);
	memunmap(dp->shm);
unmap_regs:
	pci_iounmap(pdev, dp->regs);
release:
	pci_release_regions(pdev);
disable:
	pci_disable_device(pdev);
free_dp:
	kfree(dp);
	return err;
}

/* Unbind, rmmod, or the device going (hot unplug, sysfs remove): the reverse of probe. */
static void davinci_pci_remove(struct pci_dev *pdev)
{
	struct davinci_pci *dp = pci_get_drvdata(pdev);
	int v;

	/* The watchdog reaches the state: not from here on (it re-arms itself, this waits). */
	cancel_delayed_work_sync(&dp->watchdog);
	/*
	 * No new open; every open file's calls fail with ENODEV from now on, its waiters wake,
	 * its mappings of the BARs are gone (a later access faults and gets SIGBUS).
	 */
	davinci_pci_stop(dp->state);
	/* Waits for a ring writer or info reader still in the files. */
	debugfs_remove(dp->dbg);
	/* free_irq waits for a running handler: after this loop none reaches the state. */
	for (v = 0; v < dp->nvec; v++)
		free_irq(pci_irq_vector(pdev, v), &dp->vec[v]);
	davinci_pci_detach(dp->state);
	davinci_bar0_unreserve(dp);
	pci_free_irq_vectors(pdev);
	pci_clear_master(pdev);
	memunmap(dp->shm);
	pci_iounmap(pdev, dp->regs);
	pci_release_regions(pdev);
	pci_disable_device(pdev);
	pci_set_drvdata(pdev, NULL);
	dev_info(&pdev->dev, "unbound\n");
	kfree(dp);
}

/*
 * Shutdown (reboot, kexec): the device is marked gone and every mapping of its BARs goes,
 * as at removal, and it may not raise another interrupt (bus mastering off: an MSI-X message
 * is a write by the device). The resources stay: nothing runs after this.
 */
static void davinci_pci_shutdown(struct pci_dev *pdev)
{
	struct davinci_pci *dp = pci_get_drvdata(pdev);

	if (!dp)
		return;
	cancel_delayed_work_sync(&dp->watchdog);
	davinci_pci_stop(dp->state);
	pci_clear_master(pdev);
}

/*
 * A PCI error (AER, DPC) on the device: it is lost (its clients get ENODEV, its streams
 * stop in the error state), and the driver asks for no recovery (a reset would be a new
 * device here, as a restart is: unbind, plug a new one).
 */
static pci_ers_result_t davinci_pci_error_detected(struct pci_dev *pdev, pci_channel_state_t state)
{
	struct davinci_pci *dp = pci_get_drvdata(pdev);

	dev_err(&pdev->dev, "PCI error reported (channel state %d)\n", state);
	if (dp)
		davinci_pci_lose(dp->state);
	return PCI_ERS_RESULT_DISCONNECT;
}

static const struct pci_error_handlers davinci_pci_err_handlers = {
	.error_detected = davinci_pci_error_detected,
};

static const struct pci_device_id davinci_pci_ids[] = {
	{ PCI_DEVICE(PCI_VENDOR_ID_REDHAT_QUMRANET, 0x1110) }, /* ivshmem (doorbell or plain) */
	{}
};
MODULE_DEVICE_TABLE(pci, davinci_pci_ids);

static struct pci_driver davinci_pci_driver = {
	.name = KBUILD_MODNAME,
	.id_table = davinci_pci_ids,
	.probe = davinci_pci_probe,
	.remove = davinci_pci_remove,
	.shutdown = davinci_pci_shutdown,
	.err_handler = &davinci_pci_err_handlers,
};

/* Registers the driver (probing every matching device now); 0 or an errno. */
int davinci_pci_register(unsigned int mode)
{
	int err;

	davinci_node_mode = mode;
	err = alloc_chrdev_region(&davinci_pci_base, 0, DAVINCI_PCI_SLOTS, KBUILD_MODNAME);
	if (err)
		return err;
	davinci_pci_class = class_create(KBUILD_MODNAME);
	if (IS_ERR(davinci_pci_class)) {
		err = PTR_ERR(davinci_pci_class);
		goto region;
	}
	davinci_pci_class->devnode = davinci_devnode;
	davinci_dbg_root = debugfs_create_dir(KBUILD_MODNAME, NULL);
	err = pci_register_driver(&davinci_pci_driver);
	if (err)
		goto class;
	return 0;
class:
	debugfs_remove(davinci_dbg_root);
	class_destroy(davinci_pci_class);
region:
	unregister_chrdev_region(davinci_pci_base, DAVINCI_PCI_SLOTS);
	return err;
}

/* Unregisters it: every bound device is removed first. */
void davinci_pci_unregister(void)
{
	pci_unregister_driver(&davinci_pci_driver);
	debugfs_remove(davinci_dbg_root);
	class_destroy(davinci_pci_class);
	unregister_chrdev_region(davinci_pci_base, DAVINCI_PCI_SLOTS);
}
