/* Threads: several threads, each with its own stream on one device and context, fill and
 * add and check their results; two threads share one stream (its lock serialises them);
 * davinci_last_error() is per thread. */
#include "check.h"

#include <pthread.h>

#define THREADS 4
#define ROUNDS 50
#define WORDS 256

static davinci_device *dev;
static davinci_context *ctx;
static davinci_stream *shared;

struct worker {
	int id;
	int failed;
	char message[256];
};

#define W_CHECK(call)                                                                      \
	do {                                                                               \
		if ((call) < 0) {                                                          \
			snprintf(w->message, sizeof w->message, "%s: %s", #call,           \
				 davinci_last_error());                                    \
			w->failed = 1;                                                     \
			return NULL;                                                       \
		}                                                                          \
	} while (0)

static void *own_stream(void *arg)
{
	struct worker *w = arg;
	davinci_stream *s = NULL;
	davinci_buffer *a = NULL, *b = NULL, *sum = NULL;
	davinci_task *t = NULL;
	uint32_t out[WORDS];
	W_CHECK(davinci_stream_create(ctx, NULL, &s));
	W_CHECK(davinci_buffer_alloc(dev, sizeof out, &a));
	W_CHECK(davinci_buffer_alloc(dev, sizeof out, &b));
	W_CHECK(davinci_buffer_alloc(dev, sizeof out, &sum));
	for (uint32_t r = 0; r < ROUNDS; r++) {
		uint32_t x = (uint32_t)w->id * 1000 + r;
		W_CHECK(davinci_task_fill(davinci_whole(a), x, &t));
		W_CHECK(davinci_stream_submit(s, t, NULL));
		davinci_task_destroy(t);
		W_CHECK(davinci_task_fill(davinci_whole(b), r, &t));
		W_CHECK(davinci_stream_submit(s, t, NULL));
		davinci_task_destroy(t);
		W_CHECK(davinci_task_add(DAVINCI_DTYPE_U32, davinci_whole(sum), davinci_whole(a),
					 davinci_whole(b), &t));
		W_CHECK(davinci_stream_submit(s, t, NULL));
		davinci_task_destroy(t);
		t = NULL;
		W_CHECK(davinci_stream_synchronize(s, TIMEOUT_NS));
		W_CHECK(davinci_buffer_read(sum, 0, out, sizeof out));
		for (int i = 0; i < WORDS; i++) {
			if (out[i] != x + r) {
				snprintf(w->message, sizeof w->message,
					 "thread %d round %u: sum[%d] = %u, want %u", w->id, r, i,
					 out[i], x + r);
				w->failed = 1;
				return NULL;
			}
		}
	}
	/* A failure here sets this thread's message only. */
	davinci_buffer *none = NULL;
	if (davinci_buffer_alloc(dev, 0, &none) != -EINVAL ||
	    !strstr(davinci_last_error(), "0 bytes")) {
		snprintf(w->message, sizeof w->message, "no EINVAL for 0 bytes");
		w->failed = 1;
	}
	davinci_buffer_free(a);
	davinci_buffer_free(b);
	davinci_buffer_free(sum);
	davinci_stream_destroy(s);
	return NULL;
}

static void *shared_stream(void *arg)
{
	struct worker *w = arg;
	davinci_task *t = NULL;
	W_CHECK(davinci_task_nop(&t));
	W_CHECK(davinci_task_set_user_data(t, (uint64_t)w->id));
	for (int i = 0; i < 200; i++)
		W_CHECK(davinci_stream_submit(shared, t, NULL));
	davinci_task_destroy(t);
	W_CHECK(davinci_stream_synchronize(shared, TIMEOUT_NS));
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t th[THREADS];
	struct worker w[THREADS];
	CHECK(davinci_device_open(device_arg(argc, argv), &dev));
	CHECK(davinci_context_create(dev, &ctx));
	EXPECT_ERR(davinci_stream_synchronize(NULL, 0), -EINVAL, "stream is NULL");

	for (int i = 0; i < THREADS; i++) {
		w[i] = (struct worker){ .id = i + 1 };
		EXPECT(pthread_create(&th[i], NULL, own_stream, &w[i]) == 0);
	}
	for (int i = 0; i < THREADS; i++) {
		pthread_join(th[i], NULL);
		if (w[i].failed)
			FAIL("own stream, thread %d: %s", w[i].id, w[i].message);
	}
	/* The other threads' failures did not touch this thread's message. */
	EXPECT(strstr(davinci_last_error(), "stream is NULL") != NULL);

	CHECK(davinci_stream_create(ctx, NULL, &shared));
	for (int i = 0; i < 2; i++) {
		w[i] = (struct worker){ .id = i + 1 };
		EXPECT(pthread_create(&th[i], NULL, shared_stream, &w[i]) == 0);
	}
	for (int i = 0; i < 2; i++) {
		pthread_join(th[i], NULL);
		if (w[i].failed)
			FAIL("shared stream, thread %d: %s", w[i].id, w[i].message);
	}
	/* Every completion is there, each thread's in its own order. */
	davinci_completion c[64];
	size_t n, total = 0, per[3] = { 0, 0, 0 };
	do {
		CHECK(davinci_stream_poll(shared, c, 64, &n));
		for (size_t i = 0; i < n; i++) {
			EXPECT(c[i].status == 0 && c[i].user_data >= 1 && c[i].user_data <= 2);
			if (c[i].user_data <= 2)
				per[c[i].user_data]++;
		}
		total += n;
	} while (n > 0);
	EXPECT(total == 400 && per[1] == 200 && per[2] == 200);
	davinci_stream_destroy(shared);
	davinci_context_destroy(ctx);
	davinci_device_destroy(dev);
	return finish("threads");
}
