/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The mmap and fault wrappers both kinds of node share (helpers.c: the software devices;
 * pci/helpers.c: the PCI devices): what differs is the Rust check and fault handler, and the
 * vma flags.
 */
#ifndef DAVINCI_MMAP_COMMON_H
#define DAVINCI_MMAP_COMMON_H

#include <linux/mm.h>

/* Rust's fault handler of a mapping: maps page `page` of the object at `cookie`; 0 or -errno. */
typedef int (*davinci_fault_fn)(void *open, u64 cookie, u64 page, struct vm_area_struct *vma,
				unsigned long addr);
/* Rust's mmap check: the object at `cookie` exists, is the caller's, holds `len`; 0 or -errno. */
typedef int (*davinci_mmap_check_fn)(void *open, u64 cookie, u64 len);

/* A fault: the page's offset within the object, from the cookie's first page kept at mmap. */
static inline vm_fault_t davinci_fault_common(struct vm_fault *vmf, davinci_fault_fn fault)
{
	struct vm_area_struct *vma = vmf->vma;
	/* The cookie's first page, kept at mmap: vm_pgoff moves when the vma is split. */
	pgoff_t first = (pgoff_t)(uintptr_t)vma->vm_private_data;
	int ret;

	if (vmf->pgoff < first)
		return VM_FAULT_SIGBUS;
	ret = fault(vma->vm_file->private_data, (u64)first << PAGE_SHIFT, vmf->pgoff - first, vma,
		    vmf->address & PAGE_MASK);
	if (ret == 0)
		return VM_FAULT_NOPAGE;
	if (ret == -ENOMEM)
		return VM_FAULT_OOM;
	/* Killed while waiting for the device's lock: no page, the task dies on its way out. */
	if (ret == -EINTR)
		return VM_FAULT_NOPAGE;
	return VM_FAULT_SIGBUS;
}

/* An mmap: shared only, a cookie that fits, Rust's check, then `flags` and `ops` (0 or -errno). */
static inline int davinci_mmap_common(struct file *file, struct vm_area_struct *vma,
				      davinci_mmap_check_fn check, vm_flags_t flags,
				      const struct vm_operations_struct *ops)
{
	u64 len = vma->vm_end - vma->vm_start;
	int ret;

	/* A private mapping would copy on write: the device would never see the copy. */
	if (!(vma->vm_flags & VM_SHARED))
		return -EINVAL;
	/* A cookie is below 2^51; a larger page offset would lose its high bits when shifted. */
	if (vma->vm_pgoff > (U64_MAX >> PAGE_SHIFT))
		return -EINVAL;
	ret = check(file->private_data, (u64)vma->vm_pgoff << PAGE_SHIFT, len);
	if (ret)
		return ret;
	vm_flags_set(vma, flags);
	vma->vm_ops = ops;
	vma->vm_private_data = (void *)(uintptr_t)vma->vm_pgoff;
	return 0;
}

#endif
