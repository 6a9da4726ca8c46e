/* Host callbacks (davinci_stream_launch_host_func): each runs once, in stream order, after the
 * work before it (it reads what that work wrote, or later work's), on the thread that reaps the stream; a
 * callback calling back into its own stream gets -EDEADLK and the stream keeps working; a
 * stream destroyed first runs them with -ECANCELED. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

#include <pthread.h>
#include <time.h>

#define CALLS 8

static davinci_device *dev;
static davinci_context *ctx;

struct call {
	davinci_stream *stream; /* the stream it was launched on */
	davinci_stream *other;	/* another stream it submits to (or NULL) */
	davinci_buffer *buf;	/* read when it runs */
	int runs;
	int status;
	int order;
	uint32_t seen;
	pthread_t thread;
	int same_submit;  /* davinci_stream_submit on its own stream */
	int same_sync;	  /* davinci_stream_synchronize on its own stream */
	int same_record;  /* davinci_event_record on its own stream */
	int other_submit; /* davinci_stream_submit on `other` */
	char same_text[512];
};

static int order;
static davinci_task *nop_task;
static davinci_event *ev;

static void on_reached(void *user, int status)
{
	struct call *c = user;
	c->runs++;
	c->status = status;
	c->order = ++order;
	c->thread = pthread_self();
	if (c->buf && davinci_buffer_read(c->buf, 0, &c->seen, sizeof c->seen) < 0)
		c->seen = 0xdeadbeef;
	if (c->stream) {
		c->same_submit = davinci_stream_submit(c->stream, nop_task, NULL);
		snprintf(c->same_text, sizeof c->same_text, "%s", davinci_last_error());
		c->same_sync = davinci_stream_synchronize(c->stream, TIMEOUT_NS);
		c->same_record = davinci_event_record(ev, c->stream, NULL);
		davinci_stream_destroy(c->stream); /* refused: the stream lives on */
	}
	if (c->other)
		c->other_submit = davinci_stream_submit(c->other, nop_task, NULL);
}

static void fill(davinci_stream *s, davinci_buffer *b, uint32_t v)
{
	davinci_task *t = NULL;
	CHECK(davinci_task_fill(davinci_whole(b), v, &t));
	CHECK(davinci_stream_submit(s, t, NULL));
	davinci_task_destroy(t);
}

int main(int argc, char **argv)
{
	davinci_stream *s = NULL, *s2 = NULL;
	davinci_buffer *b = NULL;
	struct call calls[CALLS];
	uint64_t id = 0;
	CHECK(davinci_device_open(device_arg(argc, argv), &dev));
	CHECK(davinci_context_create(dev, &ctx));
	CHECK(davinci_stream_create(ctx, NULL, &s));
	CHECK(davinci_stream_create(ctx, NULL, &s2));
	CHECK(davinci_event_create(ctx, &ev));
	CHECK(davinci_task_nop(&nop_task));
	CHECK(davinci_buffer_alloc(dev, 1 << 20, &b));
	EXPECT_ERR(davinci_stream_launch_host_func(s, NULL, NULL, NULL), -EINVAL, "func is NULL");
	EXPECT_ERR(davinci_stream_launch_host_func(NULL, on_reached, NULL, NULL), -EINVAL,
		   "stream is NULL");

	/* In order, after the fill before each; on this thread (the one synchronizing). */
	memset(calls, 0, sizeof calls);
	calls[0].stream = s; /* the first one calls back into s */
	calls[1].other = s2; /* the second one submits to another stream */
	for (uint32_t i = 0; i < CALLS; i++) {
		calls[i].buf = b;
		fill(s, b, 100 + i);
		CHECK(davinci_stream_launch_host_func(s, on_reached, &calls[i], &id));
	}
	CHECK(davinci_stream_synchronize(s, TIMEOUT_NS));
	for (uint32_t i = 0; i < CALLS; i++) {
		EXPECT(calls[i].runs == 1 && calls[i].status == 0);
		EXPECT(calls[i].order == (int)i + 1);
		/* The device does not wait for a callback: later fills may have run too. */
		EXPECT(calls[i].seen >= 100 + i && calls[i].seen < 100 + CALLS);
		EXPECT(pthread_equal(calls[i].thread, pthread_self()));
	}
	EXPECT(calls[0].same_submit == -EDEADLK && calls[0].same_sync == -EDEADLK &&
	       calls[0].same_record == -EDEADLK);
	EXPECT(strstr(calls[0].same_text, "davinci_stream_submit: ") == calls[0].same_text);
	EXPECT(strstr(calls[0].same_text, "host callback") != NULL);
	EXPECT(calls[1].other_submit == 0);
	/* The stream lives on after the callback's refused calls and destroy. */
	fill(s, b, 7);
	CHECK(davinci_stream_synchronize(s, TIMEOUT_NS));
	uint32_t word = 0;
	CHECK(davinci_buffer_read(b, 0, &word, sizeof word));
	EXPECT(word == 7);
	CHECK(davinci_stream_synchronize(s2, TIMEOUT_NS));

	/* Its NOP is a completion like any other; polling reaps it and runs the callback. */
	davinci_completion c[32];
	size_t n = 0, seen_nop = 0;
	do
		CHECK(davinci_stream_poll(s, c, 32, &n));
	while (n > 0); /* drop what the synchronizes kept */
	memset(calls, 0, sizeof calls);
	CHECK(davinci_stream_launch_host_func(s, on_reached, &calls[0], &id));
	/* Polled every 0.1 ms for at most 10 s (the device may be slow on a loaded machine). */
	for (int tries = 0; calls[0].runs == 0 && tries < 100000; tries++) {
		if (tries)
			nanosleep(&(struct timespec){ .tv_nsec = 100 * 1000 }, NULL);
		CHECK(davinci_stream_poll(s, c, 32, &n));
		for (size_t i = 0; i < n; i++)
			seen_nop += c[i].task == id && c[i].opcode == DAVINCI_OP_NOP && c[i].status == 0;
	}
	EXPECT(calls[0].runs == 1 && calls[0].status == 0 && seen_nop == 1);

	/* Destroyed first: -ECANCELED, once, on the destroying thread; the callback's calls on
	 * the stream being destroyed are refused without touching it. A raw EVENT_WAIT on an
	 * event nobody records holds the stream before the callbacks. */
	davinci_event *gate = NULL;
	davinci_task *wait_gate = NULL;
	struct davinci_task_desc d;
	CHECK(davinci_event_create(ctx, &gate));
	memset(&d, 0, sizeof d);
	d.opcode = DAVINCI_OP_EVENT_WAIT;
	d.imm = 1;
	CHECK(davinci_event_handle(gate, &d.handle));
	CHECK(davinci_task_from_desc(&d, &wait_gate));
	CHECK(davinci_stream_submit(s, wait_gate, NULL));
	memset(calls, 0, sizeof calls);
	calls[0].stream = s;
	calls[1].buf = b;
	CHECK(davinci_stream_launch_host_func(s, on_reached, &calls[0], NULL));
	fill(s, b, 8);
	CHECK(davinci_stream_launch_host_func(s, on_reached, &calls[1], NULL));
	size_t done = 0;
	CHECK(davinci_stream_poll(s, c, 32, &done));
	EXPECT(done == 0 && calls[0].runs == 0);
	order = 0;
	davinci_stream_destroy(s);
	EXPECT(calls[0].runs == 1 && calls[0].status == -ECANCELED && calls[0].order == 1);
	EXPECT(calls[1].runs == 1 && calls[1].status == -ECANCELED && calls[1].order == 2);
	EXPECT(calls[1].seen == 7); /* the fill queued behind the gate never ran */
	EXPECT(calls[0].same_submit == -EDEADLK && calls[0].same_sync == -EDEADLK);
	EXPECT(pthread_equal(calls[0].thread, pthread_self()));

	davinci_task_destroy(wait_gate);
	davinci_event_destroy(gate);
	davinci_task_destroy(nop_task);
	davinci_event_destroy(ev);
	davinci_buffer_free(b);
	davinci_stream_destroy(s2);
	davinci_context_destroy(ctx);
	davinci_device_destroy(dev);
	return finish("callbacks");
}
