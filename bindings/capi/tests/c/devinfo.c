/* What a device is, printed as a C programmer prints it: every 64-bit field of
 * davinci_device_props and of runtime.h's structs with PRIu64 (scripts/capi-test.sh builds
 * this with -Wall -Wextra -Werror -Wformat=2); and the one rule for the default device
 * (davinci_device_open(NULL)): $DAVINCI_DEVICE, else this node's device, else the embedded
 * mock, with davinci_default_device and davinci_device_describe saying which. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

#include <unistd.h>

/* Opens the default device and checks that davinci_device_describe names `want`. */
static void open_default(const char *want_describe, uint32_t want_source, const char *want_path)
{
	davinci_device *d = NULL;
	char path[256], text[256];
	uint32_t source = 0;
	int n = davinci_default_device(path, sizeof path, &source);
	EXPECT(n > 0 && (size_t)n < sizeof path && source == want_source);
	if (want_path)
		EXPECT(strcmp(path, want_path) == 0);
	CHECK(davinci_device_open(NULL, &d));
	CHECK(davinci_device_describe(d, text, sizeof text));
	printf("default device: %s (source %" PRIu32 "): %s\n", path, source, text);
	if (!strstr(text, want_describe))
		FAIL("davinci_device_describe says \"%s\", want \"%s\" in it", text, want_describe);
	davinci_device_destroy(d);
}

int main(int argc, char **argv)
{
	const char *path = device_arg(argc, argv);
	davinci_device *dev = NULL;
	davinci_device_props p;
	CHECK(davinci_device_open(path, &dev));
	CHECK(davinci_device_query_info(dev, &p));
	printf("abi %" PRIu16 ".%" PRIu16 ", features %#" PRIx32 ", device %" PRIu32 "\n",
	       p.abi_major, p.abi_minor, p.features, p.device_id);
	printf("memory_size %" PRIu64 ", memory_used %" PRIu64 ", client_memory_limit %" PRIu64
	       "\n",
	       p.memory_size, p.memory_used, p.client_memory_limit);
	EXPECT(p.abi_major == DAVINCI_ABI_VERSION_MAJOR);
	EXPECT(p.memory_size > 0 && p.memory_used <= p.memory_size);
	EXPECT(p.client_memory_limit > 0 && p.client_memory_limit <= p.memory_size);
	EXPECT(p.max_cmd_entries >= 16 && p.max_event_entries >= 16 && p.mem_align >= 64);

	/* The same bytes as uapi.h's struct, whose __u64 fields PRIu64 cannot print. */
	EXPECT(sizeof p == sizeof(struct davinci_device_info));

	davinci_pool *pool = NULL;
	davinci_buffer *b = NULL;
	davinci_pool_options po;
	davinci_pool_stats ps;
	CHECK(davinci_pool_options_default(&po));
	CHECK(davinci_pool_create(dev, &po, &pool));
	CHECK(davinci_pool_alloc(pool, 4096, &b));
	CHECK(davinci_pool_get_stats(pool, &ps));
	printf("pool: max_bytes %" PRIu64 ", reserved %" PRIu64 ", in use %" PRIu64
	       ", allocs %" PRIu64 ", driver allocs %" PRIu64 ", driver frees %" PRIu64 "\n",
	       po.max_bytes, ps.reserved_bytes, ps.in_use_bytes, ps.allocs, ps.driver_allocs,
	       ps.driver_frees);
	EXPECT(ps.in_use_bytes >= 4096 && ps.allocs == 1 && ps.driver_allocs == 1);

	davinci_context *ctx = NULL;
	davinci_stream *s = NULL;
	davinci_stream_options so;
	davinci_task *t = NULL;
	davinci_completion c;
	size_t n = 0;
	uint64_t id = 0, addr = 0;
	CHECK(davinci_stream_options_default(&so));
	printf("stream: submit_timeout_ns %" PRIu64 "\n", so.submit_timeout_ns);
	CHECK(davinci_context_create(dev, &ctx));
	CHECK(davinci_stream_create(ctx, &so, &s));
	CHECK(davinci_task_fill(davinci_whole(b), 3, &t));
	CHECK(davinci_task_set_user_data(t, UINT64_C(0x1234567890)));
	CHECK(davinci_stream_submit(s, t, &id));
	CHECK(davinci_stream_synchronize(s, TIMEOUT_NS));
	CHECK(davinci_stream_poll(s, &c, 1, &n));
	EXPECT(n == 1 && c.user_data == UINT64_C(0x1234567890) && c.task == id && c.result > 0);
	CHECK(davinci_buffer_dev_addr(b, &addr));
	printf("completion: user_data %" PRIu64 ", task %" PRIu64 ", result %" PRIu64
	       ", timestamp_ns %" PRIu64 ", status %" PRId32 "; buffer at %#" PRIx64 "\n",
	       c.user_data, c.task, c.result, c.timestamp_ns, c.status, addr);
	davinci_task_destroy(t);
	davinci_stream_destroy(s);
	davinci_context_destroy(ctx);
	davinci_buffer_free(b);

	/* A chunk above max_bytes is lowered to it; a max_bytes nothing fits in is refused at
	 * creation, not at every allocation. */
	davinci_pool_destroy(pool);
	po.chunk_size = 4u << 20;
	po.max_bytes = 1u << 20;
	CHECK(davinci_pool_create(dev, &po, &pool));
	CHECK(davinci_pool_alloc(pool, 4096, &b));
	CHECK(davinci_pool_get_stats(pool, &ps));
	EXPECT(ps.reserved_bytes > 0 && ps.reserved_bytes <= po.max_bytes);
	davinci_buffer_free(b);
	davinci_pool_destroy(pool);
	pool = NULL;
	po.max_bytes = 64;
	EXPECT_ERR(davinci_pool_create(dev, &po, &pool), -EINVAL, "max_bytes");
	EXPECT(pool == NULL);
	EXPECT(strstr(davinci_last_error(), "davinci_pool_create: ") == davinci_last_error());
	davinci_device_destroy(dev);

	/* The default device. $DAVINCI_DEVICE first. */
	const char *want = strncmp(path, "mock:", 5) == 0 ? path + 5 : path;
	setenv("DAVINCI_DEVICE", path, 1);
	open_default(want, DAVINCI_DEVICE_FROM_ENV, path);
	setenv("DAVINCI_DEVICE", "nonsense", 1);
	davinci_device *none = NULL;
	EXPECT_ERR(davinci_device_open(NULL, &none), -EINVAL, "DAVINCI_DEVICE=\"nonsense\"");
	EXPECT(davinci_default_device(NULL, 0, NULL) == -EINVAL);
	/* Without it: this node's device if it has one, else the embedded mock. */
	unsetenv("DAVINCI_DEVICE");
	char node[256];
	uint32_t source = 0;
	CHECK(davinci_default_device(node, sizeof node, &source));
	if (access("/dev/davinci0", F_OK) == 0) {
		EXPECT(source == DAVINCI_DEVICE_FROM_NODE && strcmp(node, "/dev/davinci0") == 0);
	} else if (source == DAVINCI_DEVICE_FROM_NODE) {
		EXPECT(strncmp(node, "mock:", 5) == 0 && strstr(node, "/davinci0.sock"));
		open_default(node + 5, DAVINCI_DEVICE_FROM_NODE, node);
	} else {
		EXPECT(source == DAVINCI_DEVICE_FROM_NOTHING && strcmp(node, "embedded") == 0);
		open_default("embedded mock device", DAVINCI_DEVICE_FROM_NOTHING, "embedded");
	}
	/* snprintf's contract: the whole length, a truncated, terminated copy. */
	char small[4];
	int len = davinci_default_device(small, sizeof small, NULL);
	EXPECT(len == (int)strlen(node) && strlen(small) == 3 && strncmp(small, node, 3) == 0);
	return finish("devinfo");
}
