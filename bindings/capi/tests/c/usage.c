/* davinci_device_get_usage (ABI 1.5): this open's own usage against each of its limits, as
 * a C backend's caching allocator reads it before it grows: it tracks creates and frees, its
 * limits are davinci_device_query_info's, and an allocation past the memory limit fails with
 * -ENOMEM whose davinci_last_error() carries the numbers (asked, held, limit) and the
 * setting. The 64-bit fields print with PRIu64. */
#include "check.h"

int main(int argc, char **argv)
{
	const char *path = device_arg(argc, argv);
	davinci_device *dev = NULL;
	davinci_context *ctx = NULL;
	davinci_buffer *buf = NULL, *big = NULL;
	davinci_device_props p;
	davinci_device_usage u, v;
	char want[160];
	CHECK(davinci_device_open(path, &dev));
	CHECK(davinci_device_query_info(dev, &p));
	EXPECT(p.features & DAVINCI_FEAT_USAGE);
	CHECK(davinci_device_get_usage(dev, &u));
	printf("memory %" PRIu64 " of %" PRIu64 " bytes, contexts %" PRIu32 "/%" PRIu32
	       ", streams %" PRIu32 "/%" PRIu32 ", events %" PRIu32 "/%" PRIu32
	       ", allocations %" PRIu32 "/%" PRIu32 ", exports %" PRIu32 "/%" PRIu32 "\n",
	       u.memory_bytes, u.memory_limit, u.contexts, u.quota_contexts, u.streams,
	       u.quota_streams, u.events, u.quota_events, u.allocations, u.quota_allocations,
	       u.exports, u.quota_exports);
	/* The limits GET_INFO reports, for this open. */
	EXPECT(u.memory_limit == p.client_memory_limit);
	EXPECT(u.quota_contexts == p.quota_contexts && u.quota_streams == p.quota_streams);
	EXPECT(u.quota_events == p.quota_events && u.quota_allocations == p.quota_allocations);
	EXPECT(u.quota_exports >= 1 && u.share_mode == p.share_mode);
	EXPECT(u.client_id == p.caller_id);
	/* Creates and frees move it. */
	CHECK(davinci_context_create(dev, &ctx));
	CHECK(davinci_buffer_alloc(dev, 3 * 4096, &buf));
	CHECK(davinci_device_get_usage(dev, &v));
	EXPECT(v.contexts == u.contexts + 1 && v.allocations == u.allocations + 1);
	EXPECT(v.memory_bytes == u.memory_bytes + 3 * 4096);
	/* One page past what is left: -ENOMEM, with the numbers. */
	uint64_t over = v.memory_limit - v.memory_bytes + 4096;
	EXPECT_ERR(davinci_buffer_alloc(dev, (size_t)over, &big), -ENOMEM, "asked");
	snprintf(want, sizeof want, "holds %" PRIu64 ", limit %" PRIu64, v.memory_bytes,
		 v.memory_limit);
	if (!strstr(davinci_last_error(), want))
		FAIL("\"%s\" lacks \"%s\"", davinci_last_error(), want);
	EXPECT(strstr(davinci_last_error(), "--tenant-memory-limit") != NULL);
	EXPECT(big == NULL);
	davinci_buffer_free(buf);
	davinci_context_destroy(ctx);
	CHECK(davinci_device_get_usage(dev, &v));
	EXPECT(v.contexts == u.contexts && v.allocations == u.allocations);
	EXPECT(v.memory_bytes == u.memory_bytes);
	/* Bad arguments: named. */
	EXPECT_ERR(davinci_device_get_usage(dev, NULL), -EINVAL, "out");
	EXPECT_ERR(davinci_device_get_usage(NULL, &v), -EINVAL, "dev");
	davinci_device_destroy(dev);
	return finish("usage");
}
