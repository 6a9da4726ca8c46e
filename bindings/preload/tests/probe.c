/*
 * What bindings/preload/tests/preload.rs runs under LD_PRELOAD=libdavinci-preload.so, besides the
 * unchanged uapi/examples/client.c: one check per subcommand, each printing "ok <name>" and
 * exiting 0, or saying what differed and exiting 1.
 *
 *   probe passthrough DIR [DEV]  files, pipes, ttys, mmap, dup: untouched by the library
 *                                (with DEV open throughout, when given)
 *   probe semantics /dev/davinciN  a davinci descriptor behaves as the kernel module's
 *   probe eintr /dev/davinciN      WAIT_EVENT and signals: EINTR without SA_RESTART, with
 *                                  `current` and `status` copied out
 *   probe threads /dev/davinciN    a thread blocked in WAIT_EVENT holds up no other thread
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <davinci/uapi.h>

#define CHECK(cond)                                                                        \
	do {                                                                               \
		if (!(cond)) {                                                             \
			fprintf(stderr, "probe: %s:%d: %s failed (errno %d: %s)\n", __FILE__, \
				__LINE__, #cond, errno, strerror(errno));                 \
			exit(1);                                                           \
		}                                                                          \
	} while (0)

static int passthrough(const char *dir, const char *dev)
{
	int davinci = dev ? open(dev, O_RDWR | O_CLOEXEC) : -1;

	char path[4096], buf[64];
	int fd, fd2, p[2], n;
	struct termios t;
	struct pollfd pfd;
	char *m;

	snprintf(path, sizeof(path), "%s/file", dir);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	CHECK(fd >= 0);
	CHECK(write(fd, "hello preload", 13) == 13);
	CHECK(lseek(fd, 0, SEEK_SET) == 0);
	memset(buf, 0, sizeof(buf));
	CHECK(read(fd, buf, sizeof(buf)) == 13 && strcmp(buf, "hello preload") == 0);
	/* A shared mapping of a file writes through; a private one does not. */
	m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(m != MAP_FAILED && memcmp(m, "hello", 5) == 0);
	m[0] = 'j';
	CHECK(munmap(m, 4096) == 0);
	m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	CHECK(m != MAP_FAILED && m[0] == 'j');
	m[1] = 'x';
	CHECK(munmap(m, 4096) == 0);
	CHECK(pread(fd, buf, 2, 0) == 2 && buf[0] == 'j' && buf[1] == 'e');
	/* Anonymous memory. */
	m = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(m != MAP_FAILED && m[100] == 0);
	CHECK(munmap(m, 8192) == 0);
	/* dup, dup2, fcntl on ordinary descriptors. */
	fd2 = dup(fd);
	CHECK(fd2 > fd);
	CHECK(dup2(fd, fd2) == fd2);
	CHECK(fcntl(fd2, F_DUPFD_CLOEXEC, 100) >= 100);
	CHECK(fcntl(fd, F_GETFD) == FD_CLOEXEC);
	CHECK(close(fd2) == 0);
	/* ioctl on a file that is no tty, and on a pipe. */
	errno = 0;
	CHECK(ioctl(fd, TCGETS, &t) == -1 && errno == ENOTTY);
	CHECK(pipe(p) == 0);
	CHECK(write(p[1], "abc", 3) == 3);
	CHECK(ioctl(p[0], FIONREAD, &n) == 0 && n == 3);
	pfd.fd = p[0];
	pfd.events = POLLIN;
	pfd.revents = 0;
	CHECK(poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLIN));
	CHECK(read(p[0], buf, 3) == 3);
	CHECK(poll(&pfd, 1, 0) == 0);
	CHECK(close(p[0]) == 0 && close(p[1]) == 0);
	/* Paths that look like a device but are not one are the filesystem's. */
	errno = 0;
	CHECK(open("/dev/davinci_manager", O_RDWR) == -1 && errno == ENOENT);
	errno = 0;
	CHECK(openat(AT_FDCWD, "/dev/davinci01", O_RDWR) == -1 && errno == ENOENT);
	CHECK(close(fd) == 0);
	errno = 0;
	CHECK(close(fd) == -1 && errno == EBADF);
	if (dev) {
		struct davinci_device_info info;

		CHECK(davinci >= 0);
		memset(&info, 0, sizeof(info));
		CHECK(ioctl(davinci, DAVINCI_IOCTL_GET_INFO, &info) == 0);
		CHECK(info.abi_major == DAVINCI_ABI_VERSION_MAJOR);
		CHECK(close(davinci) == 0);
	}
	printf("ok passthrough\n");
	return 0;
}

static int semantics(const char *dev)
{
	struct davinci_device_info info;
	struct davinci_list_clients_args lc;
	struct davinci_client_usage users[8];
	struct pollfd pfd;
	struct epoll_event ev;
	char c;
	int fd, ctl, d, ep, status;
	pid_t child;
	unsigned i;
	int seen = 0;
	/* Flags the compiler cannot see: built with _FORTIFY_SOURCE, this open is glibc's
	 * __open_2, and the openat below __openat_2. */
	volatile int rw = O_RDWR | O_CLOEXEC;

	fd = open(dev, rw);
	CHECK(fd >= 0);
	memset(&info, 0, sizeof(info));
	CHECK(ioctl(fd, DAVINCI_IOCTL_GET_INFO, &info) == 0);
	CHECK(info.abi_major == DAVINCI_ABI_VERSION_MAJOR);
	/* What the module's file does: no read or write, always ready for poll, not pollable
	 * by epoll, ENOTTY for foreign ioctls, EFAULT for a bad argument, shared mappings only. */
	errno = 0;
	CHECK(read(fd, &c, 1) == -1 && errno == EINVAL);
	errno = 0;
	CHECK(write(fd, &c, 1) == -1 && errno == EINVAL);
	pfd.fd = fd;
	pfd.events = POLLIN | POLLOUT;
	pfd.revents = 0;
	CHECK(poll(&pfd, 1, 0) == 1 && pfd.revents == (POLLIN | POLLOUT));
	ep = epoll_create1(EPOLL_CLOEXEC);
	CHECK(ep >= 0);
	ev.events = EPOLLIN;
	ev.data.fd = fd;
	errno = 0;
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == -1 && errno == EPERM);
	close(ep);
	errno = 0;
	CHECK(ioctl(fd, TCGETS, &c) == -1 && errno == ENOTTY);
	errno = 0;
	CHECK(ioctl(fd, DAVINCI_IOCTL_GET_INFO, NULL) == -1 && errno == EFAULT);
	errno = 0;
	CHECK(mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0) == MAP_FAILED && errno == EINVAL);
	/* FIOCLEX is the VFS's: it reaches the descriptor itself. */
	CHECK(ioctl(fd, FIONCLEX) == 0 && fcntl(fd, F_GETFD) == 0);
	CHECK(ioctl(fd, FIOCLEX) == 0 && fcntl(fd, F_GETFD) == FD_CLOEXEC);
	/* A duplicate shares the open, and outlives the original. */
	d = dup(fd);
	CHECK(d >= 0);
	CHECK(close(fd) == 0);
	memset(&info, 0, sizeof(info));
	CHECK(ioctl(d, DAVINCI_IOCTL_GET_INFO, &info) == 0 && info.abi_major == DAVINCI_ABI_VERSION_MAJOR);
	fd = fcntl(d, F_DUPFD_CLOEXEC, 0);
	CHECK(fd >= 0);
	CHECK(close(d) == 0);
	/* A descriptor number above the library's bitmap (4096), where the limit allows one. */
	{
		struct rlimit rl;

		CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
		if (rl.rlim_cur < 5001 && rl.rlim_max >= 5001) {
			rl.rlim_cur = 5001;
			CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
		}
		if (rl.rlim_cur >= 5001) {
			CHECK(dup2(fd, 5000) == 5000);
			memset(&info, 0, sizeof(info));
			CHECK(ioctl(5000, DAVINCI_IOCTL_GET_INFO, &info) == 0);
			CHECK(info.abi_major == DAVINCI_ABI_VERSION_MAJOR);
			errno = 0;
			CHECK(read(5000, &c, 1) == -1 && errno == EINVAL);
			CHECK(close(5000) == 0);
			/* The number, now a pipe's, is not taken for the device. */
			{
				int p[2];

				CHECK(pipe(p) == 0 && dup2(p[1], 5000) == 5000);
				CHECK(write(5000, "x", 1) == 1 && read(p[0], &c, 1) == 1 && c == 'x');
				CHECK(close(5000) == 0 && close(p[0]) == 0 && close(p[1]) == 0);
			}
		}
	}
	/* A control open beside it lists the clients through the caller's buffer. */
	ctl = openat(AT_FDCWD, dev, rw & ~O_ACCMODE); /* O_RDONLY: a control open */
	CHECK(ctl >= 0);
	memset(&lc, 0, sizeof(lc));
	memset(users, 0xff, sizeof(users));
	lc.buf = (__u64)(unsigned long)users;
	lc.capacity = 8;
	lc.entry_size = sizeof(users[0]);
	CHECK(ioctl(ctl, DAVINCI_IOCTL_LIST_CLIENTS, &lc) == 0);
	CHECK(lc.count >= 1 && lc.count <= 8);
	for (i = 0; i < lc.count; i++)
		seen += users[i].pid == (__u32)getpid();
	CHECK(seen == 1);
	lc.buf = 8; /* unmapped */
	errno = 0;
	CHECK(ioctl(ctl, DAVINCI_IOCTL_LIST_CLIENTS, &lc) == -1 && errno == EFAULT);
	/* The device's event log through the caller's buffer: a fresh device's first event is
	 * DEVICE_STARTED (ABI 1.5). */
	{
		struct davinci_read_events_args re;
		struct davinci_device_event evs[4];

		memset(&re, 0, sizeof(re));
		memset(evs, 0xff, sizeof(evs));
		re.buf = (__u64)(unsigned long)evs;
		re.capacity = 4;
		re.entry_size = sizeof(evs[0]);
		CHECK(ioctl(ctl, DAVINCI_IOCTL_READ_EVENTS, &re) == 0);
		CHECK(re.count >= 1 && re.count <= 4 && re.cursor >= re.count);
		CHECK(re.lost > 0 || (evs[0].seq == 0 && evs[0].code == DAVINCI_DEVICE_EVENT_DEVICE_STARTED));
		re.pad = 1;
		errno = 0;
		CHECK(ioctl(ctl, DAVINCI_IOCTL_READ_EVENTS, &re) == -1 && errno == EINVAL);
	}
	CHECK(close(ctl) == 0);
	/* A child after fork must not use the parent's open: a clear error, not a stolen reply. */
	child = fork();
	CHECK(child >= 0);
	if (child == 0) {
		errno = 0;
		if (ioctl(fd, DAVINCI_IOCTL_GET_INFO, &info) == -1 && errno == EBADFD)
			_exit(0);
		_exit(1);
	}
	CHECK(waitpid(child, &status, 0) == child);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK(ioctl(fd, DAVINCI_IOCTL_GET_INFO, &info) == 0);
	CHECK(close(fd) == 0);
	errno = 0;
	CHECK(ioctl(fd, DAVINCI_IOCTL_GET_INFO, &info) == -1 && errno == EBADF);
	printf("ok semantics\n");
	return 0;
}

static volatile sig_atomic_t alarms;

static void on_alarm(int sig)
{
	(void)sig;
	alarms++;
}

/* WAIT_EVENT on an event nobody records, a signal arriving during it; `w` is what the call
 * left in its argument (`current` and `status` start as 0xdead so a copy-out shows). */
static int wait_with_signal(int fd, __u32 ev, int restart, __u64 timeout_ns,
			    struct davinci_wait_event_args *w)
{
	struct sigaction sa;
	struct itimerval it;
	int r;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alarm;
	sa.sa_flags = restart ? SA_RESTART : 0;
	sigemptyset(&sa.sa_mask);
	CHECK(sigaction(SIGALRM, &sa, NULL) == 0);
	memset(&it, 0, sizeof(it));
	it.it_value.tv_usec = 200000;
	alarms = 0;
	CHECK(setitimer(ITIMER_REAL, &it, NULL) == 0);
	memset(w, 0, sizeof(*w));
	w->kind = DAVINCI_WAIT_EVENT;
	w->handle = ev;
	w->value = 1;
	w->timeout_ns = timeout_ns;
	w->current = 0xdead;
	w->status = 0xdead;
	r = ioctl(fd, DAVINCI_IOCTL_WAIT_EVENT, w);
	return r < 0 ? errno : 0;
}

static int eintr(const char *dev)
{
	struct davinci_create_context_args ctx;
	struct davinci_create_event_args ev;
	struct davinci_device_info info;
	struct davinci_wait_event_args w;
	int fd, e;

	fd = open(dev, O_RDWR | O_CLOEXEC);
	CHECK(fd >= 0);
	memset(&ctx, 0, sizeof(ctx));
	CHECK(ioctl(fd, DAVINCI_IOCTL_CREATE_CONTEXT, &ctx) == 0);
	memset(&ev, 0, sizeof(ev));
	ev.ctx = ctx.handle;
	CHECK(ioctl(fd, DAVINCI_IOCTL_CREATE_EVENT, &ev) == 0);
	/* Without SA_RESTART: the wait (60 s) ends with EINTR once the handler ran, with
	 * `current` and `status` copied out as the module does (the event is at 0). */
	e = wait_with_signal(fd, ev.handle, 0, 60000000000ull, &w);
	if (e != EINTR || alarms != 1) {
		fprintf(stderr, "probe: WAIT_EVENT without SA_RESTART: %s, %d alarms\n", strerror(e),
			(int)alarms);
		return 1;
	}
	if (w.current != 0 || w.status != 0) {
		fprintf(stderr, "probe: WAIT_EVENT's EINTR left current %#llx, status %#x (not copied out)\n",
			(unsigned long long)w.current, w.status);
		return 1;
	}
	/* The open is still in order: the cancelled wait's reply did not go astray. */
	memset(&info, 0, sizeof(info));
	CHECK(ioctl(fd, DAVINCI_IOCTL_GET_INFO, &info) == 0 && info.abi_major == DAVINCI_ABI_VERSION_MAJOR);
	/* With SA_RESTART: the handler runs and the wait goes on to its own end (1 s). */
	e = wait_with_signal(fd, ev.handle, 1, 1000000000ull, &w);
	if (e != ETIMEDOUT || alarms != 1) {
		fprintf(stderr, "probe: WAIT_EVENT with SA_RESTART: %s, %d alarms\n", strerror(e),
			(int)alarms);
		return 1;
	}
	CHECK(ioctl(fd, DAVINCI_IOCTL_GET_INFO, &info) == 0);
	CHECK(close(fd) == 0);
	printf("ok eintr\n");
	return 0;
}

struct waiter {
	int fd;
	__u32 ev;
	int err;
	volatile int done;
};

static void *wait_long(void *p)
{
	struct waiter *w = p;
	struct davinci_wait_event_args a;

	memset(&a, 0, sizeof(a));
	a.kind = DAVINCI_WAIT_EVENT;
	a.handle = w->ev;
	a.value = 1;
	a.timeout_ns = 600000000000ull; /* 10 minutes: only the signal below ends it */
	w->err = ioctl(w->fd, DAVINCI_IOCTL_WAIT_EVENT, &a) < 0 ? errno : 0;
	__atomic_store_n(&w->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

/* One open, two threads: while one is blocked in WAIT_EVENT, the other creates and destroys
 * contexts and reads GET_INFO; then a signal (no SA_RESTART) ends the wait with EINTR. */
static int threads(const char *dev)
{
	struct davinci_create_context_args ctx;
	struct davinci_create_event_args ev;
	struct davinci_device_info info;
	struct davinci_handle_args h;
	struct sigaction sa;
	struct waiter w;
	pthread_t t;
	int fd, i;

	fd = open(dev, O_RDWR | O_CLOEXEC);
	CHECK(fd >= 0);
	memset(&ctx, 0, sizeof(ctx));
	CHECK(ioctl(fd, DAVINCI_IOCTL_CREATE_CONTEXT, &ctx) == 0);
	memset(&ev, 0, sizeof(ev));
	ev.ctx = ctx.handle;
	CHECK(ioctl(fd, DAVINCI_IOCTL_CREATE_EVENT, &ev) == 0);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alarm;
	sigemptyset(&sa.sa_mask);
	CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
	memset(&w, 0, sizeof(w));
	w.fd = fd;
	w.ev = ev.handle;
	CHECK(pthread_create(&t, NULL, wait_long, &w) == 0);
	for (i = 0; i < 200; i++) {
		struct davinci_create_context_args c;

		memset(&c, 0, sizeof(c));
		CHECK(ioctl(fd, DAVINCI_IOCTL_CREATE_CONTEXT, &c) == 0);
		memset(&h, 0, sizeof(h));
		h.handle = c.handle;
		CHECK(ioctl(fd, DAVINCI_IOCTL_DESTROY_CONTEXT, &h) == 0);
		memset(&info, 0, sizeof(info));
		CHECK(ioctl(fd, DAVINCI_IOCTL_GET_INFO, &info) == 0);
	}
	/* The wait cannot have ended by itself (nothing records the event). */
	CHECK(__atomic_load_n(&w.done, __ATOMIC_SEQ_CST) == 0);
	while (!__atomic_load_n(&w.done, __ATOMIC_SEQ_CST)) {
		CHECK(pthread_kill(t, SIGUSR1) == 0);
		usleep(10000);
	}
	CHECK(pthread_join(t, NULL) == 0);
	if (w.err != EINTR) {
		fprintf(stderr, "probe: the signalled WAIT_EVENT ended with %s\n", strerror(w.err));
		return 1;
	}
	CHECK(ioctl(fd, DAVINCI_IOCTL_GET_INFO, &info) == 0);
	CHECK(close(fd) == 0);
	printf("ok threads\n");
	return 0;
}

int main(int argc, char **argv)
{
	if ((argc == 3 || argc == 4) && strcmp(argv[1], "passthrough") == 0)
		return passthrough(argv[2], argc == 4 ? argv[3] : NULL);
	if (argc == 3 && strcmp(argv[1], "semantics") == 0)
		return semantics(argv[2]);
	if (argc == 3 && strcmp(argv[1], "eintr") == 0)
		return eintr(argv[2]);
	if (argc == 3 && strcmp(argv[1], "threads") == 0)
		return threads(argv[2]);
	fprintf(stderr, "usage: probe passthrough DIR [DEV] | semantics /dev/davinciN | eintr /dev/davinciN | threads /dev/davinciN\n");
	return 2;
}
