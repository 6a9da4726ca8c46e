/* C's own words: what davinci_last_error() says after failures of every kind names the C
 * function that failed and the errno, never a Rust item ("::"), a Rust range
 * ("Included("), or std's "(os error N)"; a stopped stream says to destroy it and call
 * davinci_stream_create. */
#include "check.h"

static int texts;

/* The message of the call just failed with `want`: C's words, containing `text`. */
#define EXPECT_C_WORDS(call, want, func, text)                                             \
	do {                                                                               \
		EXPECT_ERR(call, want, text);                                              \
		const char *m_ = davinci_last_error();                                     \
		texts++;                                                                   \
		if (strncmp(m_, func ": ", strlen(func) + 2) != 0 || strstr(m_, "::") ||   \
		    strstr(m_, "os error") || strstr(m_, "Included(") ||                   \
		    strstr(m_, "Excluded("))                                               \
			FAIL("%s: not C's words: \"%s\"", #call, m_);                      \
		else                                                                       \
			printf("%s\n", m_);                                                \
	} while (0)

int main(int argc, char **argv)
{
	davinci_device *dev = NULL, *none = NULL;
	davinci_context *ctx = NULL, *ctx2 = NULL;
	davinci_stream *s = NULL, *s2 = NULL;
	davinci_event *ev = NULL;
	davinci_record *r1 = NULL, *r2 = NULL;
	davinci_pool *pool = NULL;
	davinci_buffer *a = NULL, *half = NULL, *pb = NULL;
	davinci_task *t = NULL;
	davinci_pool_options po;
	uint64_t ns = 0;
	char bytes[64] = { 0 };

	EXPECT_C_WORDS(davinci_device_open("nowhere", &none), -EINVAL, "davinci_device_open",
		       "not a device path");
	EXPECT_C_WORDS(davinci_device_open("mock:/nonexistent/davinci0.sock", &none), -ENODEV,
		       "davinci_device_open", "/nonexistent/davinci0.sock");
	CHECK(davinci_device_open(device_arg(argc, argv), &dev));
	CHECK(davinci_context_create(dev, &ctx));
	CHECK(davinci_context_create(dev, &ctx2));
	CHECK(davinci_stream_create(ctx, NULL, &s));
	CHECK(davinci_stream_create(ctx2, NULL, &s2));
	CHECK(davinci_event_create(ctx, &ev));
	CHECK(davinci_buffer_alloc(dev, 4096, &a));
	CHECK(davinci_buffer_alloc(dev, 2048, &half));
	CHECK(davinci_pool_create(dev, NULL, &pool));
	CHECK(davinci_pool_alloc(pool, 64, &pb));

	EXPECT_C_WORDS(davinci_buffer_write(pb, 60, bytes, 8), -ERANGE, "davinci_buffer_write",
		       "ERANGE");
	EXPECT_C_WORDS(davinci_buffer_read(a, 4095, bytes, 2), -ERANGE, "davinci_buffer_read",
		       "ERANGE");
	EXPECT_C_WORDS(davinci_task_add(DAVINCI_DTYPE_F32, davinci_whole(a), davinci_whole(a),
					davinci_whole(half), &t),
		       -EINVAL, "davinci_task_add", "EINVAL");
	EXPECT_C_WORDS(davinci_event_record(ev, s2, NULL), -EINVAL, "davinci_event_record",
		       "EINVAL");
	EXPECT_C_WORDS(davinci_stream_wait_event(s2, ev), -EINVAL, "davinci_stream_wait_event",
		       "EINVAL");
	CHECK(davinci_event_record(ev, s, &r1));
	CHECK(davinci_event_record(ev, s, &r2));
	EXPECT_C_WORDS(davinci_record_elapsed_ns(r1, r2, &ns), -EAGAIN,
		       "davinci_record_elapsed_ns", "EAGAIN");
	CHECK(davinci_pool_options_default(&po));
	po.max_bytes = 64;
	davinci_pool *tiny = NULL;
	EXPECT_C_WORDS(davinci_pool_create(dev, &po, &tiny), -EINVAL, "davinci_pool_create",
		       "max_bytes");

	/* A task the device refuses stops the stream: the message says what to do, in C. */
	struct davinci_task_desc d;
	memset(&d, 0, sizeof d);
	d.opcode = DAVINCI_OP_FILL;
	d.dst = 0x10; /* no memory of this client */
	d.len = 64;
	CHECK(davinci_stream_submit_raw(s, &d, NULL));
	EXPECT_C_WORDS(davinci_stream_synchronize(s, TIMEOUT_NS), -EIO,
		       "davinci_stream_synchronize", "destroy it and create a new one");
	EXPECT(strstr(davinci_last_error(), "davinci_stream_create") != NULL);
	EXPECT_C_WORDS(davinci_stream_submit_raw(s, &d, NULL), -EIO, "davinci_stream_submit_raw",
		       "stopped");
	EXPECT(texts == 11);

	davinci_record_destroy(r1);
	davinci_record_destroy(r2);
	davinci_event_destroy(ev);
	davinci_buffer_free(pb);
	davinci_pool_destroy(pool);
	davinci_buffer_free(a);
	davinci_buffer_free(half);
	davinci_stream_destroy(s);
	davinci_stream_destroy(s2);
	davinci_context_destroy(ctx);
	davinci_context_destroy(ctx2);
	davinci_device_destroy(dev);
	return finish("texts");
}
