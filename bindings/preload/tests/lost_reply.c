/*
 * What bindings/preload/tests/preload.rs runs under LD_PRELOAD=libdavinci-preload.so against a shared
 * davinci-mockd device: a create whose reply cannot be copied back (the argument is readable
 * but not writable: EFAULT) creates nothing (docs/abi.md 1.4, "A failed call creates
 * nothing"), as the kernel module undoes it. For each creating command the device's object
 * counts (GET_COUNTERS), memory in use (GET_INFO) and the client's own allocations
 * (LIST_CLIENTS) are the same before and after, and the call made again with a writable
 * argument succeeds (an import undone can be imported again: no EBUSY for a handle nobody
 * learned). EXPORT_MEMORY creates no handle: the same grant made again returns the token.
 *
 *   lost_reply /dev/davinciN   prints "ok lost_reply" and exits 0, or says what differed
 *                              (the device shared, with a context quota of 2)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <davinci/uapi.h>

#define CHECK(cond)                                                                        \
	do {                                                                               \
		if (!(cond)) {                                                             \
			fprintf(stderr, "lost_reply: %s:%d: %s failed (errno %d: %s)\n",   \
				__FILE__, __LINE__, #cond, errno, strerror(errno));        \
			exit(1);                                                           \
		}                                                                          \
	} while (0)

/* A page the test writes an argument into, then makes read-only. */
static void *page;

static void *read_only(const void *arg, size_t size)
{
	CHECK(mprotect(page, 4096, PROT_READ | PROT_WRITE) == 0);
	memset(page, 0, 4096);
	memcpy(page, arg, size);
	CHECK(mprotect(page, 4096, PROT_READ) == 0);
	return page;
}

struct seen {
	struct davinci_device_counters c;
	__u64 memory_used;
	__u32 allocations; /* this client's, from LIST_CLIENTS */
};

static struct seen look(int fd)
{
	struct davinci_device_info info;
	struct davinci_list_clients_args lc;
	struct davinci_client_usage users[16];
	struct seen s;
	unsigned i;

	memset(&s, 0, sizeof(s));
	CHECK(ioctl(fd, DAVINCI_IOCTL_GET_COUNTERS, &s.c) == 0);
	memset(&info, 0, sizeof(info));
	CHECK(ioctl(fd, DAVINCI_IOCTL_GET_INFO, &info) == 0);
	s.memory_used = info.memory_used;
	memset(&lc, 0, sizeof(lc));
	lc.buf = (__u64)(unsigned long)users;
	lc.capacity = 16;
	lc.entry_size = sizeof(users[0]);
	CHECK(ioctl(fd, DAVINCI_IOCTL_LIST_CLIENTS, &lc) == 0);
	s.allocations = ~0u;
	for (i = 0; i < lc.count && i < 16; i++)
		if (users[i].client_id == info.caller_id)
			s.allocations = users[i].allocations;
	CHECK(s.allocations != ~0u);
	return s;
}

/* The same objects exist before and after `what`. */
static void same(const char *what, struct seen a, struct seen b)
{
	if (a.c.contexts != b.c.contexts || a.c.streams != b.c.streams ||
	    a.c.events != b.c.events || a.c.allocations != b.c.allocations ||
	    a.memory_used != b.memory_used || a.allocations != b.allocations) {
		fprintf(stderr,
			"lost_reply: %s left something behind: contexts %u -> %u, streams %u -> %u, "
			"events %u -> %u, allocations %u -> %u, memory_used %llu -> %llu, "
			"the client's allocations %u -> %u\n",
			what, a.c.contexts, b.c.contexts, a.c.streams, b.c.streams, a.c.events,
			b.c.events, a.c.allocations, b.c.allocations,
			(unsigned long long)a.memory_used, (unsigned long long)b.memory_used,
			a.allocations, b.allocations);
		exit(1);
	}
}

/* `request` with its argument in read-only memory: EFAULT, and nothing created. */
static void lost(int fd, const char *what, unsigned long request, const void *arg, size_t size)
{
	struct seen before = look(fd), after;
	int r;

	errno = 0;
	r = ioctl(fd, request, read_only(arg, size));
	if (r != -1 || errno != EFAULT) {
		fprintf(stderr, "lost_reply: %s with a read-only argument: %d (errno %d: %s), not EFAULT\n",
			what, r, errno, strerror(errno));
		exit(1);
	}
	after = look(fd);
	same(what, before, after);
}

int main(int argc, char **argv)
{
	struct davinci_create_context_args ctx, cx;
	struct davinci_create_stream_args st;
	struct davinci_create_event_args ev;
	struct davinci_alloc_memory_args mem, m;
	struct davinci_export_memory_args ex, ex2;
	struct davinci_import_memory_args im;
	struct davinci_device_info info;
	struct davinci_device_share_args share;
	int fd, other, i;

	if (argc != 2) {
		fprintf(stderr, "usage: lost_reply /dev/davinciN (a shared device)\n");
		return 2;
	}
	page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(page != MAP_FAILED);
	fd = open(argv[1], O_RDWR | O_CLOEXEC);
	CHECK(fd >= 0);
	memset(&share, 0, sizeof(share));
	CHECK(ioctl(fd, DAVINCI_IOCTL_QUERY_DEVICE_SHARE, &share) == 0);
	CHECK(share.mode == DAVINCI_SHARE_SHARED);

	memset(&cx, 0, sizeof(cx));
	/* More lost replies than the client's context quota (the test's daemon gives it 2):
	 * none of them holds a slot. */
	for (i = 0; i < 3; i++)
		lost(fd, "CREATE_CONTEXT", DAVINCI_IOCTL_CREATE_CONTEXT, &cx, sizeof(cx));
	memset(&ctx, 0, sizeof(ctx));
	CHECK(ioctl(fd, DAVINCI_IOCTL_CREATE_CONTEXT, &ctx) == 0);

	memset(&st, 0, sizeof(st));
	st.ctx = ctx.handle;
	st.cmd_entries = 64;
	st.event_entries = 64;
	lost(fd, "CREATE_STREAM", DAVINCI_IOCTL_CREATE_STREAM, &st, sizeof(st));
	CHECK(ioctl(fd, DAVINCI_IOCTL_CREATE_STREAM, &st) == 0);

	memset(&ev, 0, sizeof(ev));
	ev.ctx = ctx.handle;
	lost(fd, "CREATE_EVENT", DAVINCI_IOCTL_CREATE_EVENT, &ev, sizeof(ev));
	CHECK(ioctl(fd, DAVINCI_IOCTL_CREATE_EVENT, &ev) == 0);

	memset(&m, 0, sizeof(m));
	m.size = 1 << 20;
	lost(fd, "ALLOC_MEMORY", DAVINCI_IOCTL_ALLOC_MEMORY, &m, sizeof(m));
	memset(&mem, 0, sizeof(mem));
	mem.size = 8192;
	CHECK(ioctl(fd, DAVINCI_IOCTL_ALLOC_MEMORY, &mem) == 0);

	/* EXPORT_MEMORY makes no handle: lost, the export stays, and the same grant made again
	 * returns its token (abi.md, EXPORT_MEMORY). */
	memset(&ex, 0, sizeof(ex));
	ex.handle = mem.handle;
	ex.uid = DAVINCI_EXPORT_OWN_UID;
	errno = 0;
	CHECK(ioctl(fd, DAVINCI_IOCTL_EXPORT_MEMORY, read_only(&ex, sizeof(ex))) == -1 &&
	      errno == EFAULT);
	CHECK(ioctl(fd, DAVINCI_IOCTL_EXPORT_MEMORY, &ex) == 0 && ex.token != 0);
	ex2 = ex;
	ex2.token = 0;
	CHECK(ioctl(fd, DAVINCI_IOCTL_EXPORT_MEMORY, &ex2) == 0 && ex2.token == ex.token);

	/* Another client of the same user imports it; a lost import is undone, so importing
	 * again succeeds (not EBUSY for a handle nobody learned). */
	other = open(argv[1], O_RDWR | O_CLOEXEC);
	CHECK(other >= 0);
	memset(&im, 0, sizeof(im));
	im.token = ex.token;
	lost(other, "IMPORT_MEMORY", DAVINCI_IOCTL_IMPORT_MEMORY, &im, sizeof(im));
	lost(other, "IMPORT_MEMORY again", DAVINCI_IOCTL_IMPORT_MEMORY, &im, sizeof(im));
	CHECK(ioctl(other, DAVINCI_IOCTL_IMPORT_MEMORY, &im) == 0 && im.handle != 0);
	CHECK(im.dev_addr == mem.dev_addr);

	/* The opens are in order: their replies did not go astray. */
	memset(&info, 0, sizeof(info));
	CHECK(ioctl(fd, DAVINCI_IOCTL_GET_INFO, &info) == 0 && info.abi_major == DAVINCI_ABI_VERSION_MAJOR);
	CHECK(close(other) == 0);
	CHECK(close(fd) == 0);
	printf("ok lost_reply\n");
	return 0;
}
