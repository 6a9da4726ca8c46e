/*
 * A complete davinci client in C, from docs/abi.md and <davinci/uapi.h> alone: what a runtime
 * author does first. Open the device, check the ABI, create a context, allocate device memory
 * and map its host view, create a stream and map its rings and doorbell, submit a FILL through
 * the command ring with the right orderings and the doorbell rule, reap the completion (with
 * the error check and the wake-up of a stalled device), wait with WAIT_EVENT, check the
 * result, tear everything down.
 *
 *   cc -std=c11 -Wall -Wextra -Werror -I uapi/include uapi/examples/client.c -o client
 *   ./client /dev/davinci0
 *
 * scripts/test.sh compiles it (there is no /dev/davinciN on a CI machine; the Rust
 * conformance suite exercises the same paths on the mock device). Every step that can fail
 * says which and why, and the program exits non-zero.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <davinci/uapi.h>

/* ---- The shared memory of one stream ---------------------------------------------------- */

struct ring {
	unsigned char *base; /* the mapping */
	size_t len;
	__u32 entries;
	__u32 mask;
	__u32 slot_size;
};

static __u32 *field(const struct ring *r, size_t offset)
{
	return (__u32 *)(void *)(r->base + offset);
}

static unsigned char *slot(const struct ring *r, __u32 index)
{
	return r->base + DAVINCI_RING_HEADER_SIZE + (size_t)(index & r->mask) * r->slot_size;
}

struct stream {
	__u32 handle;
	struct ring cmd, evt;
	volatile __u32 *doorbell; /* the register or the futex word, in the doorbell page */
	void *bell_page;
	__u32 my_tail; /* every descriptor this host published (5.2) */
	__u32 my_head; /* every record this host consumed (5.4) */
};

static int fail(const char *what)
{
	fprintf(stderr, "davinci example: %s: %s\n", what, strerror(errno));
	return -1;
}

static void *map_cookie(int fd, __u64 cookie, __u64 len)
{
	/* The offset is exactly the cookie; MAP_SHARED, or the device's writes are never seen. */
	void *p = mmap(NULL, (size_t)len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)cookie);

	return p == MAP_FAILED ? NULL : p;
}

/* ---- Waking the device (5.3) ------------------------------------------------------------ */

static int ring_doorbell(int fd, const struct davinci_device_info *info, struct stream *s)
{
	if (info->features & DAVINCI_FEAT_DOORBELL_MMIO) {
		/* Hardware: one volatile store of the device's doorbell_value into its register (at
		 * doorbell_offset: s->doorbell), after a release fence. The write is the event; the
		 * value is the device's, never the tail (ABI 1.4). MMIO wins when DOORBELL_FUTEX
		 * is set too (abi.md 5.3). */
		__atomic_thread_fence(__ATOMIC_RELEASE);
		*s->doorbell = info->doorbell_value;
		return 0;
	}
	if (info->features & DAVINCI_FEAT_DOORBELL_FUTEX) {
		/* A software device watches the word: change it (increment: ABI 1.1), then wake. A
		 * shared futex, not FUTEX_WAKE_PRIVATE: the device is another process. The result is
		 * the number woken (0 is fine: nobody was asleep yet); -1 means a bad address. */
		__atomic_fetch_add((__u32 *)s->doorbell, 1u, __ATOMIC_RELAXED);
		if (syscall(SYS_futex, s->doorbell, FUTEX_WAKE, 1, NULL, NULL, 0) < 0)
			return fail("FUTEX_WAKE on the doorbell");
		return 0;
	}
	/* No doorbell the host can write: NOTIFY instead of writing it. */
	{
		struct davinci_handle_args h;

		memset(&h, 0, sizeof(h));
		h.handle = s->handle;
		if (ioctl(fd, DAVINCI_IOCTL_NOTIFY, &h) < 0)
			return fail("NOTIFY");
	}
	return 0;
}

/* ---- Submitting (5.2) ------------------------------------------------------------------- */

static int submit(int fd, const struct davinci_device_info *info, struct stream *s,
		  const struct davinci_task_desc *desc, __u32 n)
{
	__u32 head = __atomic_load_n(field(&s->cmd, offsetof(struct davinci_ring_header, head)),
				     __ATOMIC_ACQUIRE);
	__u32 used = davinci_ring_used(s->my_tail, head);
	__u32 flags, i;

	if (used > s->cmd.entries) {
		errno = EPROTO; /* a head no correct device writes: report it, do not follow it */
		return fail("command ring head is corrupt");
	}
	if (s->cmd.entries - used < n) {
		errno = EAGAIN; /* full: reap completions (5.4) and retry */
		return -1;
	}
	for (i = 0; i < n; i++)
		memcpy(slot(&s->cmd, s->my_tail + i), &desc[i], sizeof(desc[i]));
	s->my_tail += n;
	__atomic_store_n(field(&s->cmd, offsetof(struct davinci_ring_header, tail)), s->my_tail,
			 __ATOMIC_RELEASE);                 /* publish */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);            /* Dekker pair with the device */
	flags = __atomic_load_n(field(&s->cmd, offsetof(struct davinci_ring_header, flags)),
				__ATOMIC_RELAXED);
	if (flags & DAVINCI_RING_F_NEED_WAKEUP)
		return ring_doorbell(fd, info, s);
	return 0;
}

/* ---- Reaping (5.4) ---------------------------------------------------------------------- */

/* Copies out every published record; returns how many, or -1 with errno = EIO once the
 * stream is in the error state. */
static int reap(int fd, const struct davinci_device_info *info, struct stream *s,
		struct davinci_event_record *out, int max)
{
	__u32 tail = __atomic_load_n(field(&s->evt, offsetof(struct davinci_ring_header, tail)),
				     __ATOMIC_ACQUIRE);
	__u32 flags;
	int n = 0;

	if (davinci_ring_used(tail, s->my_head) > s->evt.entries) {
		errno = EPROTO;
		return fail("event ring tail is corrupt");
	}
	while (s->my_head != tail && n < max) {
		memcpy(&out[n++], slot(&s->evt, s->my_head), sizeof(*out)); /* copy, then use */
		s->my_head++;
	}
	if (n > 0) {
		__atomic_store_n(field(&s->evt, offsetof(struct davinci_ring_header, head)), s->my_head,
				 __ATOMIC_RELEASE);             /* slots may be reused */
		__atomic_thread_fence(__ATOMIC_SEQ_CST);        /* Dekker pair with a stalled device */
	}
	flags = __atomic_load_n(field(&s->cmd, offsetof(struct davinci_ring_header, flags)),
				__ATOMIC_ACQUIRE);
	if (n > 0 && (flags & DAVINCI_RING_F_NEED_WAKEUP) && ring_doorbell(fd, info, s) < 0)
		return -1;
	if (n == 0 && (flags & DAVINCI_RING_F_ERROR)) {
		/* Acquire on flags made error and error_index visible. */
		__u32 err = *field(&s->cmd, offsetof(struct davinci_ring_header, error));
		__u32 at = *field(&s->cmd, offsetof(struct davinci_ring_header, error_index));

		fprintf(stderr, "davinci example: stream error %u at command index %u\n", err, at);
		errno = EIO;
		return -1;
	}
	return n;
}

/* ---- Setup and teardown ----------------------------------------------------------------- */

static int map_ring(int fd, struct ring *r, const struct davinci_ring_mapping *m)
{
	r->base = map_cookie(fd, m->mmap_offset, m->mmap_size);
	if (r->base == NULL)
		return fail("mmap of a ring");
	r->len = (size_t)m->mmap_size;
	r->entries = m->entries;
	r->mask = m->entries - 1;
	r->slot_size = m->offsets.slot_size;
	/* Offsets are fixed in ABI major 1; the driver reports them so a client can check. */
	if (m->offsets.tail != offsetof(struct davinci_ring_header, tail) ||
	    m->offsets.head != offsetof(struct davinci_ring_header, head) ||
	    m->offsets.flags != offsetof(struct davinci_ring_header, flags) ||
	    m->offsets.slots != DAVINCI_RING_HEADER_SIZE) {
		errno = EPROTO;
		return fail("ring layout differs from this header");
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *path = argc > 1 ? argv[1] : "/dev/davinci0";
	struct davinci_device_info info;
	struct davinci_create_context_args ctx;
	struct davinci_alloc_memory_args mem;
	struct davinci_create_stream_args cs;
	struct davinci_wait_event_args wait;
	struct davinci_handle_args h;
	struct davinci_task_desc fill;
	struct davinci_event_record rec[8];
	struct stream s;
	__u32 *host_view;
	int fd, n, status = 1;

	memset(&s, 0, sizeof(s));
	fd = open(path, O_RDWR | O_CLOEXEC); /* a client open; O_RDONLY is a control open */
	if (fd < 0)
		{
		fail(path);
		return 1;
	}

	memset(&info, 0, sizeof(info));
	if (ioctl(fd, DAVINCI_IOCTL_GET_INFO, &info) < 0)
		{
		fail("GET_INFO");
		return 1;
	}
	if (info.abi_major != DAVINCI_ABI_VERSION_MAJOR) {
		fprintf(stderr, "davinci example: driver speaks ABI %u.%u, this client %u.%u\n",
			info.abi_major, info.abi_minor, DAVINCI_ABI_VERSION_MAJOR,
			DAVINCI_ABI_VERSION_MINOR);
		return 1;
	}
	if ((info.features & DAVINCI_FEAT_OPCODE_MASK) &&
	    !(info.opcodes & (1u << DAVINCI_OP_FILL))) {
		fprintf(stderr, "davinci example: this device does not run FILL\n");
		return 1;
	}

	memset(&ctx, 0, sizeof(ctx));
	if (ioctl(fd, DAVINCI_IOCTL_CREATE_CONTEXT, &ctx) < 0)
		{
		fail("CREATE_CONTEXT");
		return 1;
	}

	memset(&mem, 0, sizeof(mem));
	mem.size = 4096;
	if (ioctl(fd, DAVINCI_IOCTL_ALLOC_MEMORY, &mem) < 0) {
		fail("ALLOC_MEMORY");
		goto destroy_context;
	}
	host_view = map_cookie(fd, mem.mmap_offset, mem.alloc_size);
	if (host_view == NULL) {
		fail("mmap of device memory");
		goto free_memory;
	}

	memset(&cs, 0, sizeof(cs));
	cs.ctx = ctx.handle;
	cs.cmd_entries = 16;
	cs.event_entries = 32;
	if (ioctl(fd, DAVINCI_IOCTL_CREATE_STREAM, &cs) < 0) {
		fail("CREATE_STREAM");
		goto unmap_memory;
	}
	s.handle = cs.handle;
	if (map_ring(fd, &s.cmd, &cs.cmd_ring) < 0 || map_ring(fd, &s.evt, &cs.event_ring) < 0)
		goto destroy_stream;
	s.bell_page = map_cookie(fd, cs.doorbell_offset, cs.doorbell_size);
	if (s.bell_page == NULL) {
		fail("mmap of the doorbell");
		goto destroy_stream;
	}
	/* Where the doorbell is: a hardware register where GET_INFO says (checked against the
	 * mapping: a register outside it is a driver of another kind), else the futex word. */
	if (info.features & DAVINCI_FEAT_DOORBELL_MMIO) {
		if (info.doorbell_offset % 4 != 0 ||
		    (__u64)info.doorbell_offset + 4 > cs.doorbell_size) {
			errno = EPROTO;
			fail("GET_INFO's doorbell register lies outside the doorbell page");
			goto destroy_stream;
		}
		s.doorbell = (volatile __u32 *)(void *)((unsigned char *)s.bell_page +
							info.doorbell_offset);
	} else {
		s.doorbell = (volatile __u32 *)(void *)((unsigned char *)s.bell_page +
							DAVINCI_DOORBELL_REG_OFFSET);
	}
	/* The indices start where the device initialised them (normally 0). */
	s.my_tail = __atomic_load_n(field(&s.cmd, offsetof(struct davinci_ring_header, tail)),
				    __ATOMIC_RELAXED);
	s.my_head = __atomic_load_n(field(&s.evt, offsetof(struct davinci_ring_header, head)),
				    __ATOMIC_RELAXED);

	/* One FILL of the whole allocation: device addresses come from ALLOC_MEMORY only. */
	memset(&fill, 0, sizeof(fill));
	fill.opcode = DAVINCI_OP_FILL;
	fill.user_data = 42;
	fill.dst = mem.dev_addr;
	fill.len = mem.alloc_size;
	fill.imm = 0x5a5a5a5au;
	if (submit(fd, &info, &s, &fill, 1) < 0) {
		fail("submit");
		goto destroy_stream;
	}

	/* Block until the stream has completed everything published (its completion count). */
	memset(&wait, 0, sizeof(wait));
	wait.kind = DAVINCI_WAIT_STREAM;
	wait.handle = s.handle;
	wait.value = s.my_tail;
	wait.timeout_ns = 5000000000ull;
	if (ioctl(fd, DAVINCI_IOCTL_WAIT_EVENT, &wait) < 0) {
		fprintf(stderr, "davinci example: WAIT_EVENT: %s (stream status %u)\n",
			strerror(errno), wait.status);
		goto destroy_stream;
	}
	n = reap(fd, &info, &s, rec, 8);
	if (n != 1 || rec[0].user_data != 42 || davinci_record_errno(&rec[0]) != 0) {
		fprintf(stderr, "davinci example: expected one clean completion, got %d\n", n);
		goto destroy_stream;
	}
	if (host_view[0] != 0x5a5a5a5au || host_view[mem.alloc_size / 4 - 1] != 0x5a5a5a5au) {
		fprintf(stderr, "davinci example: the FILL did not reach the host view\n");
		goto destroy_stream;
	}
	printf("davinci example: FILL of %llu bytes completed on %s (client %u)\n",
	       (unsigned long long)mem.alloc_size, path,
	       (info.features & DAVINCI_FEAT_CALLER_ID) ? info.caller_id : 0u);
	status = 0;

	/* Teardown, in reverse order of creation (docs/abi.md 1.2). */
destroy_stream:
	memset(&h, 0, sizeof(h));
	h.handle = s.handle;
	if (s.handle != 0 && ioctl(fd, DAVINCI_IOCTL_DESTROY_STREAM, &h) < 0)
		fail("DESTROY_STREAM");
	if (s.bell_page != NULL)
		munmap(s.bell_page, (size_t)cs.doorbell_size);
	if (s.evt.base != NULL)
		munmap(s.evt.base, s.evt.len);
	if (s.cmd.base != NULL)
		munmap(s.cmd.base, s.cmd.len);
unmap_memory:
	munmap(host_view, (size_t)mem.alloc_size);
free_memory:
	memset(&h, 0, sizeof(h));
	h.handle = mem.handle;
	if (ioctl(fd, DAVINCI_IOCTL_FREE_MEMORY, &h) < 0)
		fail("FREE_MEMORY");
destroy_context:
	memset(&h, 0, sizeof(h));
	h.handle = ctx.handle;
	if (ioctl(fd, DAVINCI_IOCTL_DESTROY_CONTEXT, &h) < 0)
		fail("DESTROY_CONTEXT");
	close(fd); /* would release everything above anyway */
	return status;
}
