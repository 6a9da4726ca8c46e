// SPDX-License-Identifier: GPL-2.0
/*
 * The PCI side of the module (issue 27): a pci_driver for QEMU's ivshmem-doorbell device
 * (1af4:1110), whose engine runs in a host process (davinci-ivshmem). Linux 6.12 has no Rust
 * PCI abstractions, so everything that touches struct pci_dev, BARs and interrupts is here, in
 * C; the Rust side (pci.rs) keeps the per-device state and decides what a device is for.
 *
 * The boundary (see pci.rs for the Rust half):
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
 * BAR sizes, peer id, vectors and the interrupts counted per vector; writing
 * "VECTOR COUNT [TIMEOUT_MS]" to .../ring rings peer 0's doorbell VECTOR COUNT times, each
 * time waiting (up to TIMEOUT_MS, default 2000, at most 60000) for the interrupt count of that
 * vector to move (the host answers each doorbell with one interrupt), and fails with
 * ETIMEDOUT if it does not (COUNT at most 1000: remove waits for a writer still in the file).
 */
#include <linux/debugfs.h>
#include <linux/err.h>
#include <linux/interrupt.h>
#include <linux/io.h>
#include <linux/jiffies.h>
#include <linux/kernel.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include <linux/wait.h>

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
};

/* What probe tells Rust about a device (pci.rs's PciInfo, same layout). */
struct davinci_pci_info {
	u32 peer;
	u32 vectors;
	u64 regs_len;
	u64 shm_len;
	u32 bus;
	u32 devfn;
};

/* In Rust (pci.rs). */
void *davinci_pci_attach(struct davinci_pci *dp, const struct davinci_pci_info *info);
void davinci_pci_interrupt(void *state, u32 vector);
void davinci_pci_detach(void *state);
u64 davinci_pci_count(void *state, u32 vector);
int davinci_pci_ring(void *state, u32 vector);

/* For Rust. */
int davinci_pci_register(void);
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

/* ---- the driver ----------------------------------------------------------------------------- */

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
	dp->nvec = pci_alloc_irq_vectors(pdev, 1, DAVINCI_PCI_VECTORS, PCI_IRQ_MSIX);
	if (dp->nvec < 0) {
		err = dp->nvec;
		dev_err(&pdev->dev, "no MSI-X vectors (%d)\n", err);
		goto clear_master;
	}

	info.peer = dp->peer;
	info.vectors = dp->nvec;
	info.regs_len = dp->regs_len;
	info.shm_len = dp->shm_len;
	info.bus = pdev->bus->number;
	info.devfn = pdev->devfn;
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

	if (!IS_ERR_OR_NULL(davinci_dbg_root)) {
		dp->dbg = debugfs_create_dir(pci_name(pdev), davinci_dbg_root);
		debugfs_create_file("info", 0400, dp->dbg, dp, &davinci_pci_info_fops);
		debugfs_create_file("ring", 0200, dp->dbg, dp, &davinci_pci_ring_fops);
	}
	dev_info(&pdev->dev, "bound: peer %u, BAR0 %llu B, BAR2 %llu B (memremap wb), %d MSI-X vectors\n",
		 dp->peer, (unsigned long long)dp->regs_len, (unsigned long long)dp->shm_len, dp->nvec);
	return 0;

free_irqs:
	while (--v >= 0)
		free_irq(pci_irq_vector(pdev, v), &dp->vec[v]);
	davinci_pci_detach(dp->state);
free_vectors:
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

	/* Waits for a ring writer or info reader still in the files. */
	debugfs_remove(dp->dbg);
	/* free_irq waits for a running handler: after this loop none reaches the state. */
	for (v = 0; v < dp->nvec; v++)
		free_irq(pci_irq_vector(pdev, v), &dp->vec[v]);
	davinci_pci_detach(dp->state);
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
};

/* Registers the driver (probing every matching device now); 0 or an errno. */
int davinci_pci_register(void)
{
	int err;

	davinci_dbg_root = debugfs_create_dir(KBUILD_MODNAME, NULL);
	err = pci_register_driver(&davinci_pci_driver);
	if (err)
		debugfs_remove(davinci_dbg_root);
	return err;
}

/* Unregisters it: every bound device is removed first. */
void davinci_pci_unregister(void)
{
	pci_unregister_driver(&davinci_pci_driver);
	debugfs_remove(davinci_dbg_root);
}
