/*
 * How CUDA/ACL backends use streams and events (issue 39), each on small rings (16 command
 * and 16 event slots) and on the default rings, each checking the bytes the device wrote:
 *
 *   a. a side stream nobody synchronizes or polls feeding a synchronized one;
 *   b. fire-and-forget FILLs on several streams, then a device-wide synchronize (and each
 *      stream's, which returns every completion);
 *   c. a burst of 100,000 tasks, then return: the last record waited for (not the stream),
 *      or the stream destroyed at once;
 *   d. event ping-pong across four streams (100,000 rounds);
 *   e. a thread per stream, all recording and waiting on one shared event;
 *   f. a stream destroyed while another stream and a host thread wait on its record: the
 *      record can never be reached, so both fail at once with -EIO (docs/abi.md section 8);
 *      neither hangs.
 *
 * A watchdog (alarm, WATCHDOG_S per pattern) ends a pattern that hangs with its name, instead
 * of the test's timeout. It is generous: a 100,000-task burst through 16-slot rings on an
 * unoptimized davinci-mockd, instrumented, on two cores busy building a kernel (CI), takes
 * over a minute.
 * Each pattern prints its time: the bounds are the bench's business, not this test's.
 * Usage: patterns [DEVICE [LETTERS]] (LETTERS: the patterns to run, default "abcdef").
 */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#define WORDS 256
#define WAIT_NS (5ull * 1000 * 1000 * 1000)
#define SIDE_ROUNDS 3000
#define FF_STREAMS 4
#define FF_FILLS 500
#define BURST 100000
#define BATCH 1000
#define PP_STREAMS 4
#define PP_ROUNDS 100000
#define TH_THREADS 4
#define TH_ROUNDS 300
#define WATCHDOG_S 600

static davinci_device *dev;
static davinci_context *ctx;
static const davinci_stream_options *opts; /* NULL: the default rings */
static const char *rings;
static const char *volatile pattern = "setup";
static struct timespec started;

static void on_alarm(int sig)
{
	static const char head[] = "patterns: FAIL: watchdog: hung in pattern ";
	(void)sig;
	ssize_t ignored = write(2, head, sizeof head - 1);
	ignored = write(2, pattern, strlen(pattern));
	ignored = write(2, "\n", 1);
	(void)ignored;
	_exit(3);
}

static double elapsed_ms(void)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - started.tv_sec) * 1e3 +
	       (double)(now.tv_nsec - started.tv_nsec) / 1e6;
}

static void begin(const char *name)
{
	pattern = name;
	clock_gettime(CLOCK_MONOTONIC, &started);
	alarm(WATCHDOG_S);
}

static void end(void)
{
	alarm(0);
	printf("%-44s %s rings: %8.1f ms\n", pattern, rings, elapsed_ms());
	fflush(stdout);
}

static davinci_stream *stream(void)
{
	davinci_stream *s = NULL;
	CHECK(davinci_stream_create(ctx, opts, &s));
	return s;
}

static davinci_buffer *buffer(size_t bytes)
{
	davinci_buffer *b = NULL;
	CHECK(davinci_buffer_alloc(dev, bytes, &b));
	return b;
}

static void fill(davinci_stream *s, davinci_buffer *b, uint32_t value)
{
	davinci_task *t = NULL;
	CHECK(davinci_task_fill(davinci_whole(b), value, &t));
	CHECK(davinci_stream_submit(s, t, NULL));
	davinci_task_destroy(t);
}

static void nop(davinci_stream *s)
{
	davinci_task *t = NULL;
	CHECK(davinci_task_nop(&t));
	CHECK(davinci_stream_submit(s, t, NULL));
	davinci_task_destroy(t);
}

/* Every word of the first `words` of `b` is `want`. */
static int holds(davinci_buffer *b, size_t words, uint32_t want, const char *what)
{
	uint32_t got[WORDS];
	checks++;
	CHECK(davinci_buffer_read(b, 0, got, words * sizeof got[0]));
	for (size_t i = 0; i < words; i++) {
		if (got[i] != want) {
			FAIL("%s (%s rings): %s: word %zu is %#" PRIx32 ", want %#" PRIx32,
			     pattern, rings, what, i, got[i], want);
			return 0;
		}
	}
	return 1;
}

static size_t pending_uses(davinci_buffer *b)
{
	size_t n = 0;
	CHECK(davinci_buffer_pending_uses(b, &n));
	return n;
}

/* a. `fill on s1; record on s1; s0 waits for that record; NOP on s0; synchronize s0`,
 * with s1 never synchronized nor polled. */
static void side_stream(void)
{
	begin("a: side stream never synchronized");
	davinci_stream *s0 = stream(), *s1 = stream();
	davinci_buffer *b = buffer(WORDS * 4);
	davinci_event *ev = NULL;
	CHECK(davinci_event_create(ctx, &ev));
	for (uint32_t i = 1; i <= SIDE_ROUNDS; i++) {
		davinci_record *rec = NULL;
		fill(s1, b, i);
		CHECK(davinci_event_record(ev, s1, &rec));
		CHECK(davinci_stream_wait_record(s0, rec));
		davinci_record_destroy(rec);
		nop(s0);
		CHECK(davinci_stream_synchronize(s0, WAIT_NS));
		if (!holds(b, WORDS, i, "the side stream's fill, after synchronizing s0"))
			break;
	}
	davinci_stream_destroy(s1);
	EXPECT(pending_uses(b) == 0);
	davinci_stream_destroy(s0);
	davinci_event_destroy(ev);
	davinci_buffer_free(b);
	end();
}

/* b. FILLs on several streams, nothing waited for, then the device synchronized: every fill
 * ran in order (the last one's value is there); each stream's poll returns every completion. */
static void fire_and_forget(void)
{
	begin("b: fire-and-forget fills, then synchronize");
	davinci_stream *s[FF_STREAMS];
	davinci_buffer *b[FF_STREAMS];
	for (int k = 0; k < FF_STREAMS; k++) {
		s[k] = stream();
		b[k] = buffer(WORDS * 4);
	}
	for (uint32_t r = 1; r <= FF_FILLS; r++)
		for (uint32_t k = 0; k < FF_STREAMS; k++)
			fill(s[k], b[k], k << 16 | r);
	/* cudaDeviceSynchronize: every stream's work done, nothing reaped. */
	CHECK(davinci_device_synchronize(dev, WAIT_NS));
	for (uint32_t k = 0; k < FF_STREAMS; k++)
		holds(b[k], WORDS, k << 16 | FF_FILLS, "the last fill, after the device's synchronize");
	for (uint32_t k = 0; k < FF_STREAMS; k++) {
		CHECK(davinci_stream_synchronize(s[k], WAIT_NS));
		davinci_completion c[64];
		size_t n = 0, total = 0, bad = 0;
		do {
			CHECK(davinci_stream_poll(s[k], c, 64, &n));
			for (size_t i = 0; i < n; i++)
				bad += c[i].status != 0 || c[i].opcode != DAVINCI_OP_FILL;
			total += n;
		} while (n > 0);
		EXPECT(total == FF_FILLS && bad == 0);
		davinci_stream_destroy(s[k]);
		davinci_buffer_free(b[k]);
	}
	end();
}

/* c. 100,000 tasks in batches, then the last record waited for on the host (the stream
 * itself never synchronized) and the stream destroyed; a second burst destroyed at once. */
static void burst(void)
{
	begin("c: 100,000-task burst, then return");
	davinci_stream *s = stream();
	davinci_buffer *b = buffer(64);
	davinci_event *ev = NULL;
	davinci_record *rec = NULL;
	davinci_task *odd = NULL, *even = NULL;
	static const davinci_task *batch[BATCH];
	CHECK(davinci_event_create(ctx, &ev));
	CHECK(davinci_task_fill(davinci_whole(b), 0x0dd, &odd));
	CHECK(davinci_task_fill(davinci_whole(b), 0xe7e7, &even));
	for (int i = 0; i < BATCH; i++)
		batch[i] = i % 2 ? odd : even;
	for (int i = 0; i < BURST; i += BATCH)
		CHECK(davinci_stream_submit_batch(s, batch, BATCH, NULL));
	CHECK(davinci_event_record(ev, s, &rec));
	CHECK(davinci_record_synchronize(rec, 4 * WAIT_NS));
	holds(b, 16, 0x0dd, "the burst's last fill");
	davinci_stream_destroy(s);
	EXPECT(pending_uses(b) == 2); /* the two built tasks */

	/* The same burst, and the stream destroyed with it queued. */
	s = stream();
	for (int i = 0; i < BURST; i += BATCH)
		CHECK(davinci_stream_submit_batch(s, batch, BATCH, NULL));
	davinci_stream_destroy(s);
	davinci_task_destroy(odd);
	davinci_task_destroy(even);
	EXPECT(pending_uses(b) == 0);
	davinci_record_destroy(rec);
	davinci_event_destroy(ev);
	davinci_buffer_free(b);
	end();
}

/* d. Round r adds one to a counter on stream r % 4, after waiting for round r - 1's record
 * on the stream before it: the counter ends at the number of rounds. */
static void ping_pong(void)
{
	begin("d: event ping-pong across four streams");
	davinci_stream *s[PP_STREAMS];
	davinci_event *ev[PP_STREAMS];
	davinci_buffer *acc = buffer(64), *ones = buffer(64);
	davinci_task *add = NULL;
	davinci_record *prev = NULL;
	for (int k = 0; k < PP_STREAMS; k++) {
		s[k] = stream();
		CHECK(davinci_event_create(ctx, &ev[k]));
	}
	fill(s[0], ones, 1);
	CHECK(davinci_stream_synchronize(s[0], WAIT_NS));
	CHECK(davinci_task_add(DAVINCI_DTYPE_U32, davinci_whole(acc), davinci_whole(acc),
			       davinci_whole(ones), &add));
	for (int r = 0; r < PP_ROUNDS; r++) {
		int k = r % PP_STREAMS;
		if (prev) {
			CHECK(davinci_stream_wait_record(s[k], prev));
			davinci_record_destroy(prev);
		}
		CHECK(davinci_stream_submit(s[k], add, NULL));
		CHECK(davinci_event_record(ev[k], s[k], &prev));
	}
	CHECK(davinci_record_synchronize(prev, 4 * WAIT_NS));
	holds(acc, 16, PP_ROUNDS, "the counter every round added one to");
	davinci_record_destroy(prev);
	davinci_task_destroy(add);
	for (int k = 0; k < PP_STREAMS; k++) {
		CHECK(davinci_stream_synchronize(s[k], WAIT_NS));
		davinci_stream_destroy(s[k]);
		davinci_event_destroy(ev[k]);
	}
	davinci_buffer_free(acc);
	davinci_buffer_free(ones);
	end();
}

/* e. Threads, each with its own stream, record one shared event and wait for its latest
 * record (whoever made it) before adding. */
static davinci_event *shared_event;
static davinci_buffer *shared_ones;

struct worker {
	uint32_t id;
	char failed[256];
};

#define W_CHECK(call)                                                                      \
	do {                                                                               \
		if ((call) < 0) {                                                          \
			snprintf(w->failed, sizeof w->failed, "%s: %s", #call,             \
				 davinci_last_error());                                    \
			return NULL;                                                       \
		}                                                                          \
	} while (0)

static void *worker(void *arg)
{
	struct worker *w = arg;
	davinci_stream *s = NULL;
	davinci_buffer *a = NULL, *sum = NULL;
	davinci_task *t = NULL;
	uint32_t got[16];
	W_CHECK(davinci_stream_create(ctx, opts, &s));
	W_CHECK(davinci_buffer_alloc(dev, 64, &a));
	W_CHECK(davinci_buffer_alloc(dev, 64, &sum));
	W_CHECK(davinci_task_add(DAVINCI_DTYPE_U32, davinci_whole(sum), davinci_whole(a),
				 davinci_whole(shared_ones), &t));
	for (uint32_t r = 0; r < TH_ROUNDS && !w->failed[0]; r++) {
		uint32_t v = w->id << 20 | r;
		davinci_task *f = NULL;
		davinci_record *rec = NULL;
		bool done = false;
		W_CHECK(davinci_task_fill(davinci_whole(a), v, &f));
		W_CHECK(davinci_stream_submit(s, f, NULL));
		davinci_task_destroy(f);
		W_CHECK(davinci_event_record(shared_event, s, &rec));
		W_CHECK(davinci_stream_wait_event(s, shared_event));
		W_CHECK(davinci_stream_submit(s, t, NULL));
		W_CHECK(davinci_stream_synchronize(s, WAIT_NS));
		W_CHECK(davinci_record_query(rec, &done));
		davinci_record_destroy(rec);
		W_CHECK(davinci_buffer_read(sum, 0, got, sizeof got));
		if (!done || got[0] != v + 1 || got[15] != v + 1)
			snprintf(w->failed, sizeof w->failed,
				 "thread %u round %u: record done %d, sum %#x, want %#x", w->id, r,
				 done, got[0], v + 1);
	}
	davinci_task_destroy(t);
	davinci_buffer_free(a);
	davinci_buffer_free(sum);
	davinci_stream_destroy(s);
	return NULL;
}

static void thread_per_stream(void)
{
	begin("e: thread per stream, one shared event");
	pthread_t th[TH_THREADS];
	struct worker w[TH_THREADS];
	davinci_stream *s = stream();
	CHECK(davinci_event_create(ctx, &shared_event));
	shared_ones = buffer(64);
	fill(s, shared_ones, 1);
	CHECK(davinci_stream_synchronize(s, WAIT_NS));
	for (int i = 0; i < TH_THREADS; i++) {
		w[i] = (struct worker){ .id = (uint32_t)i + 1 };
		EXPECT(pthread_create(&th[i], NULL, worker, &w[i]) == 0);
	}
	for (int i = 0; i < TH_THREADS; i++) {
		pthread_join(th[i], NULL);
		if (w[i].failed[0])
			FAIL("%s (%s rings): %s", pattern, rings, w[i].failed);
	}
	uint64_t recorded = 0;
	CHECK(davinci_event_recorded(shared_event, &recorded));
	EXPECT(recorded == TH_THREADS * TH_ROUNDS);
	CHECK(davinci_event_synchronize(shared_event, WAIT_NS));
	davinci_event_destroy(shared_event);
	davinci_buffer_free(shared_ones);
	davinci_stream_destroy(s);
	end();
}

/* f. s1 is held by a wait on a gate nobody opens, then fills and records; s0 waits for that
 * record, then fills; a host thread waits for it too. s1 is destroyed: its record will never
 * run, so s0's wait fails (-EIO, s0 stops) and so does the host's, at once. */
static davinci_record *doomed;
static int host_rc;

static void *host_waiter(void *arg)
{
	(void)arg;
	host_rc = davinci_record_synchronize(doomed, 4 * WAIT_NS);
	return NULL;
}

static void destroyed_with_waiters(void)
{
	begin("f: stream destroyed with waiters pending");
	davinci_stream *s0 = stream(), *s1 = stream();
	davinci_buffer *b1 = buffer(64), *b0 = buffer(64);
	davinci_event *gate = NULL, *ev = NULL;
	davinci_task *wait_gate = NULL;
	struct davinci_task_desc d;
	pthread_t th;
	CHECK(davinci_event_create(ctx, &gate));
	CHECK(davinci_event_create(ctx, &ev));
	memset(&d, 0, sizeof d);
	d.opcode = DAVINCI_OP_EVENT_WAIT;
	d.imm = 1; /* the gate is never recorded */
	CHECK(davinci_event_handle(gate, &d.handle));
	CHECK(davinci_task_from_desc(&d, &wait_gate));
	CHECK(davinci_stream_submit(s1, wait_gate, NULL));
	fill(s1, b1, 0x51);
	CHECK(davinci_event_record(ev, s1, &doomed));
	CHECK(davinci_stream_wait_record(s0, doomed));
	fill(s0, b0, 0x50);
	EXPECT(pthread_create(&th, NULL, host_waiter, NULL) == 0);
	nanosleep(&(struct timespec){ .tv_nsec = 20 * 1000 * 1000 }, NULL); /* the host waits */
	davinci_stream_destroy(s1);
	pthread_join(th, NULL);
	EXPECT(host_rc == -EIO);
	EXPECT_ERR(davinci_stream_synchronize(s0, WAIT_NS), -EIO, "stopped");
	EXPECT_ERR(davinci_record_synchronize(doomed, WAIT_NS), -EIO, "");
	holds(b1, 16, 0, "s1's fill, which never ran");
	holds(b0, 16, 0, "s0's fill after the failed wait, which never ran");
	davinci_stream_destroy(s0);
	davinci_task_destroy(wait_gate);
	davinci_record_destroy(doomed);
	davinci_event_destroy(ev);
	davinci_event_destroy(gate);
	EXPECT(pending_uses(b0) == 0 && pending_uses(b1) == 0);
	davinci_buffer_free(b0);
	davinci_buffer_free(b1);
	end();
}

int main(int argc, char **argv)
{
	davinci_stream_options small;
	const char *only = argc > 2 ? argv[2] : "abcdef";
	signal(SIGALRM, on_alarm);
	alarm(WATCHDOG_S);
	CHECK(davinci_device_open(device_arg(argc, argv), &dev));
	CHECK(davinci_context_create(dev, &ctx));
	CHECK(davinci_stream_options_default(&small));
	small.cmd_entries = 16;
	small.event_entries = 16;
	for (int pass = 0; pass < 2; pass++) {
		opts = pass == 0 ? &small : NULL;
		rings = pass == 0 ? "16/16" : "default";
		static void (*const run[])(void) = { side_stream,	   fire_and_forget,
						     burst,		   ping_pong,
						     thread_per_stream, destroyed_with_waiters };
		for (size_t i = 0; i < sizeof run / sizeof run[0]; i++)
			if (strchr(only, (int)('a' + i)))
				run[i]();
	}
	davinci_context_destroy(ctx);
	davinci_device_destroy(dev);
	return finish("patterns");
}
