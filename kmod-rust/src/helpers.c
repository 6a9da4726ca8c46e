// SPDX-License-Identifier: GPL-2.0
/*
 * What the module needs to know about the opener that lives in task_struct: its cgroup (for
 * the container id) and its name. The accessors are static inlines and macros over
 * task_struct fields, which the module's Rust side cannot reach safely on 6.12 (bindgen's
 * task_struct layout is off for this configuration; see docs/kernel.md), so they stay in C.
 * Also the module's parameters (the Rust module! macro of 6.12 has none) and its random
 * source.
 */
#include <linux/cgroup.h>
#include <linux/init_task.h>
#include <linux/moduleparam.h>
#include <linux/nsproxy.h>
#include <linux/random.h>
#include <linux/rcupdate.h>
#include <linux/sched.h>
#include <linux/string.h>

int davinci_current_cgroup_path(char *buf, size_t len);
void davinci_current_comm(char buf[16]);
int davinci_need_resched(void);
void davinci_cpu_relax(void);
void davinci_quota_params(unsigned int out[4]);
u64 davinci_random_u64(void);

/*
 * What one client may hold of each table while a device is shared (docs/kernel.md); 0 is
 * driver-core's default, a quarter of the table. Read-only once loaded: a device takes them
 * before its first open.
 */
static unsigned int quota_contexts;
module_param(quota_contexts, uint, 0444);
MODULE_PARM_DESC(quota_contexts, "contexts one client may hold on a shared device (0: a quarter of the 256)");
static unsigned int quota_streams;
module_param(quota_streams, uint, 0444);
MODULE_PARM_DESC(quota_streams, "streams one client may hold on a shared device (0: a quarter of the 256)");
static unsigned int quota_events;
module_param(quota_events, uint, 0444);
MODULE_PARM_DESC(quota_events, "events one client may hold on a shared device (0: a quarter of the 1024)");
static unsigned int quota_allocations;
module_param(quota_allocations, uint, 0444);
MODULE_PARM_DESC(quota_allocations, "allocations one client may hold on a shared device (0: a quarter of the 1024)");

/* The quota parameters: contexts, streams, events, allocations (0: the default). */
void davinci_quota_params(unsigned int out[4])
{
	out[0] = quota_contexts;
	out[1] = quota_streams;
	out[2] = quota_events;
	out[3] = quota_allocations;
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
