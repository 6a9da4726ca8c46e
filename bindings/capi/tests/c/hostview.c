/* Host views (davinci_buffer_map) from C: the view sees what davinci_buffer_write wrote and,
 * after synchronize, what a device FILL wrote; what is written through it the device and
 * davinci_buffer_read see; it outlives davinci_buffer_free (and holds the memory, or the
 * pool block, until released); release takes NULL; bad arguments are -EINVAL with a
 * message. */
#include "check.h"

#include <stdint.h>

static size_t live_blocks(davinci_pool *pool)
{
	davinci_pool_stats st;
	CHECK(davinci_pool_get_stats(pool, &st));
	return st.blocks;
}

static uint64_t memory_used(davinci_device *dev)
{
	davinci_device_props info;
	CHECK(davinci_device_query_info(dev, &info));
	return info.memory_used;
}

static int all_equal(const uint32_t *w, size_t n, uint32_t want)
{
	for (size_t i = 0; i < n; i++)
		if (w[i] != want)
			return 0;
	return 1;
}

int main(int argc, char **argv)
{
	davinci_device *dev = NULL;
	davinci_context *ctx = NULL;
	davinci_stream *s = NULL;
	davinci_pool *pool = NULL;
	davinci_buffer *buf = NULL, *src = NULL, *block = NULL;
	davinci_host_view *view = NULL, *src_view = NULL, *block_view = NULL;
	davinci_task *t = NULL;
	const size_t words = 4096, bytes = words * sizeof(uint32_t);

	CHECK(davinci_device_open(device_arg(argc, argv), &dev));
	CHECK(davinci_context_create(dev, &ctx));
	CHECK(davinci_stream_create(ctx, NULL, &s));

	/* 1. An allocation's view: every byte, page-aligned, one more use of the buffer. */
	uint64_t before = memory_used(dev);
	CHECK(davinci_buffer_alloc(dev, bytes, &buf));
	CHECK(davinci_buffer_map(buf, &view));
	uint32_t *w = davinci_host_view_data(view);
	EXPECT(w != NULL);
	EXPECT(davinci_host_view_size(view) == bytes);
	EXPECT((uintptr_t)w % 4096 == 0);
	size_t uses = 0;
	CHECK(davinci_buffer_pending_uses(buf, &uses));
	EXPECT(uses == 1);
	EXPECT(all_equal(w, words, 0)); /* allocations are zeroed */

	/* 2. It sees what davinci_buffer_write wrote, and davinci_buffer_read what it wrote. */
	uint32_t word = 0x12345678;
	CHECK(davinci_buffer_write(buf, 40, &word, sizeof word));
	EXPECT(w[10] == 0x12345678);
	w[11] = 0xfeed;
	uint32_t back = 0;
	CHECK(davinci_buffer_read(buf, 44, &back, sizeof back));
	EXPECT(back == 0xfeed);

	/* 3. A device FILL, seen after synchronize. */
	CHECK(davinci_task_fill(davinci_whole(buf), 0xdeadbeef, &t));
	CHECK(davinci_stream_submit(s, t, NULL));
	davinci_task_destroy(t);
	t = NULL;
	CHECK(davinci_stream_synchronize(s, TIMEOUT_NS));
	EXPECT(all_equal(w, words, 0xdeadbeef));

	/* 4. An input written in place, copied by the device, read through another view. */
	CHECK(davinci_buffer_alloc(dev, bytes, &src));
	CHECK(davinci_buffer_map(src, &src_view));
	uint32_t *in = davinci_host_view_data(src_view);
	for (size_t i = 0; i < words; i++)
		in[i] = (uint32_t)i * 3;
	CHECK(davinci_task_copy(davinci_whole(buf), davinci_whole(src), &t));
	CHECK(davinci_stream_submit(s, t, NULL));
	davinci_task_destroy(t);
	t = NULL;
	CHECK(davinci_stream_synchronize(s, TIMEOUT_NS));
	int copied = 1;
	for (size_t i = 0; i < words; i++)
		copied &= w[i] == (uint32_t)i * 3;
	EXPECT(copied);

	/* 5. The view outlives davinci_buffer_free: the memory stays until its release. */
	uint64_t with = memory_used(dev);
	EXPECT(with >= before + 2 * bytes);
	davinci_buffer_free(buf);
	buf = NULL;
	EXPECT(memory_used(dev) == with);
	EXPECT(w[words - 1] == (uint32_t)(words - 1) * 3);
	w[0] = 7; /* still writable */
	EXPECT(w[0] == 7);
	davinci_host_view_release(view);
	view = NULL;
	EXPECT(memory_used(dev) < with);

	/* 6. A pool block's view holds the block after its free; two views, one set of bytes. */
	CHECK(davinci_pool_create(dev, NULL, &pool));
	CHECK(davinci_pool_alloc(pool, 100, &block));
	CHECK(davinci_buffer_map(block, &block_view));
	davinci_host_view *again = NULL;
	CHECK(davinci_buffer_map(block, &again));
	EXPECT(davinci_host_view_data(again) == davinci_host_view_data(block_view));
	EXPECT((uintptr_t)davinci_host_view_data(block_view) % 64 == 0);
	size_t block_size = 0;
	CHECK(davinci_buffer_size(block, &block_size));
	EXPECT(davinci_host_view_size(block_view) == block_size);
	memset(davinci_host_view_data(block_view), 0x5a, block_size);
	unsigned char b0 = 0;
	CHECK(davinci_buffer_read(block, block_size - 1, &b0, 1));
	EXPECT(b0 == 0x5a);
	davinci_buffer_free(block);
	block = NULL;
	EXPECT(live_blocks(pool) == 1);
	davinci_host_view_release(again);
	EXPECT(live_blocks(pool) == 1);
	EXPECT(((unsigned char *)davinci_host_view_data(block_view))[0] == 0x5a);
	davinci_host_view_release(block_view);
	block_view = NULL;
	EXPECT(live_blocks(pool) == 0);

	/* 7. Bad arguments: -EINVAL naming them; NULL views give NULL and 0; release takes
	 * NULL. */
	davinci_host_view *none = NULL;
	EXPECT_ERR(davinci_buffer_map(NULL, &none), -EINVAL, "davinci_buffer_map: buf is NULL");
	EXPECT(none == NULL);
	EXPECT_ERR(davinci_buffer_map(src, NULL), -EINVAL, "out (out-parameter) is NULL");
	EXPECT(davinci_host_view_data(NULL) == NULL);
	EXPECT(strstr(davinci_last_error(), "davinci_host_view_data: view is NULL") != NULL);
	EXPECT(davinci_host_view_size(NULL) == 0);
	EXPECT(strstr(davinci_last_error(), "davinci_host_view_size: view is NULL") != NULL);
	davinci_host_view_release(NULL);

	/* Any order. */
	davinci_buffer_free(src);
	davinci_host_view_release(src_view);
	davinci_pool_destroy(pool);
	davinci_stream_destroy(s);
	davinci_context_destroy(ctx);
	davinci_device_destroy(dev);
	return finish("hostview");
}
