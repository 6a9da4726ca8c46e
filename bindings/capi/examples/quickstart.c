/*
 * Quick start: one complete libdavinci program, the C twin of shim/examples/quickstart.rs.
 *
 *   cc -std=c11 quickstart.c $(pkg-config --cflags --libs davinci) -o quickstart
 *   ./quickstart                   # the embedded mock device
 *   ./quickstart /dev/davinci0     # the kernel driver
 *   ./quickstart mock:/run/davinci/davinci0.sock
 *
 * It takes device memory from a pool, writes an input in place through a host view, fills
 * and adds vectors, makes a second stream wait for the first through an event record, frees
 * a buffer with work still queued on it (safe: it returns to the pool once that work ran),
 * reads the result through a host view and checks it, then shows what errors look like: one
 * caught on the host before submitting, one the device reports. Exit status 0 only when
 * every check passed.
 */
#include <davinci/runtime.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define N 1024
#define TIMEOUT_NS (10ull * 1000 * 1000 * 1000)

/* CHECK(call): on failure, print the call, its errno and davinci_last_error(), and fail. */
#define CHECK(call)                                                                        \
	do {                                                                               \
		int rc_ = (call);                                                          \
		if (rc_ < 0) {                                                             \
			fprintf(stderr, "quickstart: %s: %s (%d)\n  %s\n", #call,          \
				strerror(-rc_), rc_, davinci_last_error());                \
			goto out;                                                          \
		}                                                                          \
	} while (0)

int main(int argc, char **argv)
{
	const char *path = argc > 1 ? argv[1] : "embedded";
	int status = 1;
	davinci_device *dev = NULL;
	davinci_pool *pool = NULL;
	davinci_buffer *a = NULL, *b = NULL, *sum = NULL, *lone = NULL;
	davinci_host_view *a_view = NULL, *sum_view = NULL;
	davinci_context *ctx = NULL;
	davinci_stream *producer = NULL, *consumer = NULL, *s = NULL, *again = NULL;
	davinci_event *filled = NULL;
	davinci_record *ready = NULL;
	davinci_task *fill = NULL, *add = NULL, *half_add = NULL, *copy = NULL;

	if ((davinci_runtime_version() >> 16) != DAVINCI_RUNTIME_VERSION_MAJOR) {
		fprintf(stderr, "quickstart: libdavinci %#x, built for %#x\n",
			davinci_runtime_version(), DAVINCI_RUNTIME_VERSION);
		return 1;
	}
	CHECK(davinci_device_open(path, &dev));
	char name[256];
	CHECK(davinci_device_describe(dev, name, sizeof name));
	printf("device: %s (libdavinci %u.%u.%u)\n", name, DAVINCI_RUNTIME_VERSION_MAJOR,
	       DAVINCI_RUNTIME_VERSION_MINOR, DAVINCI_RUNTIME_VERSION_PATCH);

	/* Device memory from a pool (one driver allocation for all three): two inputs and
	 * a result, N floats each. */
	const size_t bytes = N * sizeof(float);
	CHECK(davinci_pool_create(dev, NULL, &pool));
	CHECK(davinci_pool_alloc(pool, bytes, &a));
	CHECK(davinci_pool_alloc(pool, bytes, &b));
	CHECK(davinci_pool_alloc(pool, bytes, &sum));
	/* The input written in place: a host view is a pointer into the buffer's own bytes
	 * (davinci_buffer_write would copy). No task names `a` yet, so nothing races. */
	CHECK(davinci_buffer_map(a, &a_view));
	float *a_in = davinci_host_view_data(a_view);
	for (int i = 0; i < N; i++)
		a_in[i] = (float)i;
	davinci_host_view_release(a_view);
	a_view = NULL;

	/* Two streams in one context: `producer` fills b and records an event; `consumer`
	 * waits for that record on the device, then adds. */
	CHECK(davinci_context_create(dev, &ctx));
	CHECK(davinci_stream_create(ctx, NULL, &producer));
	CHECK(davinci_stream_create(ctx, NULL, &consumer));
	CHECK(davinci_event_create(ctx, &filled));

	float half = 0.5f;
	uint32_t half_bits;
	memcpy(&half_bits, &half, sizeof half_bits);
	CHECK(davinci_task_fill(davinci_whole(b), half_bits, &fill));
	CHECK(davinci_task_set_user_data(fill, 1));
	CHECK(davinci_stream_submit(producer, fill, NULL));
	/* The record names its value: a wait for it waits for exactly this record. */
	CHECK(davinci_event_record(filled, producer, &ready));
	CHECK(davinci_stream_wait_record(consumer, ready));
	CHECK(davinci_task_add(DAVINCI_DTYPE_F32, davinci_whole(sum), davinci_whole(a),
			       davinci_whole(b), &add));
	CHECK(davinci_task_set_user_data(add, 2));
	CHECK(davinci_stream_submit(consumer, add, NULL));
	/* A built task holds its buffers too (it can be submitted again): done with them. */
	davinci_task_destroy(fill);
	davinci_task_destroy(add);
	fill = add = NULL;
	/* Safe with the add still queued: b goes back to the pool once the tasks that name
	 * it (the fill, the add) have run and their streams reaped them. */
	davinci_buffer_free(b);
	b = NULL;
	davinci_pool_stats st;
	CHECK(davinci_pool_get_stats(pool, &st));
	if (st.blocks != 3) {
		fprintf(stderr, "quickstart: b returned to the pool with work queued (%zu blocks)\n",
			st.blocks);
		goto out;
	}
	CHECK(davinci_stream_synchronize(consumer, TIMEOUT_NS));
	CHECK(davinci_stream_synchronize(producer, TIMEOUT_NS));
	CHECK(davinci_pool_get_stats(pool, &st));
	uint64_t value;
	CHECK(davinci_record_value(ready, &value));
	printf("event reached value %" PRIu64 "; pool: %zu blocks live, %" PRIu64
	       " bytes reserved in %zu chunk(s)\n",
	       value, st.blocks, st.reserved_bytes, st.chunks);
	if (st.blocks != 2) {
		fprintf(stderr, "quickstart: b did not return to the pool (%zu blocks)\n", st.blocks);
		goto out;
	}

	/* The result read in place, now that the streams are synchronized (before, the
	 * device may still be writing it). The view holds `sum` until it is released. */
	CHECK(davinci_buffer_map(sum, &sum_view));
	const float *out_sum = davinci_host_view_data(sum_view);
	for (int i = 0; i < N; i++) {
		if (out_sum[i] != (float)i + 0.5f) {
			fprintf(stderr, "quickstart: sum[%d] = %f, want %f\n", i, out_sum[i],
				(float)i + 0.5f);
			goto out;
		}
	}
	printf("sum[0..4] = [%.1f, %.1f, %.1f, %.1f] (%d elements checked)\n", out_sum[0],
	       out_sum[1], out_sum[2], out_sum[3], N);

	/* Errors, 1: caught on the host. The regions differ in length, so no task is built. */
	davinci_region first_half = { a, 0, bytes / 2 };
	int rc = davinci_task_add(DAVINCI_DTYPE_F32, davinci_whole(sum), first_half,
				  davinci_whole(a), &half_add);
	if (rc != -EINVAL) {
		fprintf(stderr, "quickstart: an add of different lengths gave %d\n", rc);
		goto out;
	}
	printf("host check: %s\n", davinci_last_error());

	/* Errors, 2: reported by the device. This COPY reads 4 bytes past the end of `lone`
	 * (a raw descriptor: no host checks, and nothing keeps its memory: `lone` lives
	 * until the stream is destroyed, below); the device stops the stream, and the error
	 * says which operand. (A buffer of its own: past a pool block is still the pool's.) */
	CHECK(davinci_buffer_alloc(dev, bytes, &lone));
	uint64_t at;
	CHECK(davinci_buffer_dev_addr(lone, &at));
	struct davinci_task_desc past_end;
	memset(&past_end, 0, sizeof past_end);
	past_end.opcode = DAVINCI_OP_COPY;
	past_end.user_data = 3;
	past_end.dst = at;
	past_end.src0 = at + 4;
	past_end.len = bytes;
	CHECK(davinci_stream_create(ctx, NULL, &s));
	CHECK(davinci_stream_submit_raw(s, &past_end, NULL));
	rc = davinci_stream_synchronize(s, TIMEOUT_NS);
	if (rc >= 0) {
		fprintf(stderr, "quickstart: a copy past the end succeeded\n");
		goto out;
	}
	printf("device error (%s): %s\n", strerror(-rc), davinci_last_error());
	/* The context and the other streams are unaffected; a new stream works. */
	davinci_stream_destroy(s);
	s = NULL;
	CHECK(davinci_stream_create(ctx, NULL, &again));
	CHECK(davinci_task_copy(davinci_whole(sum), davinci_whole(a), &copy));
	CHECK(davinci_stream_submit(again, copy, NULL));
	CHECK(davinci_stream_synchronize(again, TIMEOUT_NS));
	printf("a new stream works after the error\n");
	status = 0;
out:
	/* Any order, NULL allowed. */
	davinci_task_destroy(fill);
	davinci_task_destroy(add);
	davinci_task_destroy(half_add);
	davinci_task_destroy(copy);
	davinci_record_destroy(ready);
	davinci_host_view_release(a_view);
	davinci_host_view_release(sum_view);
	davinci_event_destroy(filled);
	davinci_stream_destroy(producer);
	davinci_stream_destroy(consumer);
	davinci_stream_destroy(s);
	davinci_stream_destroy(again);
	davinci_buffer_free(a);
	davinci_buffer_free(b);
	davinci_buffer_free(sum);
	davinci_buffer_free(lone);
	davinci_pool_destroy(pool);
	davinci_context_destroy(ctx);
	davinci_device_destroy(dev);
	return status;
}
