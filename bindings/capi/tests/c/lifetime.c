/* The lifetime rule from C: a buffer freed with tasks queued on it stays allocated until
 * they have been reaped (synchronize, poll) or their stream destroyed; then it is freed.
 * Also: completions polled in pieces, and event records ordering two streams. */
#include "check.h"

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

int main(int argc, char **argv)
{
	davinci_device *dev = NULL;
	davinci_context *ctx = NULL;
	davinci_stream *s = NULL, *s2 = NULL;
	davinci_pool *pool = NULL;
	davinci_buffer *block = NULL, *big = NULL, *keep = NULL;
	davinci_task *t = NULL;

	CHECK(davinci_device_open(device_arg(argc, argv), &dev));
	CHECK(davinci_context_create(dev, &ctx));
	CHECK(davinci_stream_create(ctx, NULL, &s));
	CHECK(davinci_pool_create(dev, NULL, &pool));

	/* 1. A pool block freed with a fill queued: back in the pool only once reaped. */
	CHECK(davinci_pool_alloc(pool, 1 << 16, &block));
	CHECK(davinci_task_fill(davinci_whole(block), 0xabcd, &t));
	size_t uses = 0;
	CHECK(davinci_buffer_pending_uses(block, &uses));
	EXPECT(uses == 1); /* the built task */
	CHECK(davinci_stream_submit(s, t, NULL));
	CHECK(davinci_buffer_pending_uses(block, &uses));
	EXPECT(uses == 2); /* and the queued one */
	davinci_task_destroy(t);
	t = NULL;
	davinci_buffer_free(block);
	block = NULL;
	EXPECT(live_blocks(pool) == 1);
	CHECK(davinci_stream_synchronize(s, TIMEOUT_NS));
	EXPECT(live_blocks(pool) == 0);

	/* 2. An allocation freed with work queued: the driver frees it once reaped. */
	uint64_t before = memory_used(dev);
	CHECK(davinci_buffer_alloc(dev, 1 << 20, &big));
	uint64_t with = memory_used(dev);
	EXPECT(with >= before + (1 << 20));
	CHECK(davinci_task_fill(davinci_whole(big), 7, &t));
	CHECK(davinci_stream_submit(s, t, NULL));
	CHECK(davinci_stream_submit(s, t, NULL)); /* a task submits any number of times */
	davinci_task_destroy(t);
	t = NULL;
	davinci_buffer_free(big);
	big = NULL;
	EXPECT(memory_used(dev) == with);
	size_t n = 0;
	davinci_completion done[8];
	CHECK(davinci_stream_synchronize(s, TIMEOUT_NS));
	EXPECT(memory_used(dev) == before);
	CHECK(davinci_stream_poll(s, done, 8, &n));
	EXPECT(n == 3); /* the first fill and these two */
	for (size_t i = 0; i < n; i++)
		EXPECT(done[i].status == 0 && done[i].opcode == DAVINCI_OP_FILL && done[i].task == i);

	/* 3. Destroying the stream releases what its queued tasks held. */
	CHECK(davinci_pool_alloc(pool, 4096, &block));
	CHECK(davinci_stream_create(ctx, NULL, &s2));
	CHECK(davinci_task_fill(davinci_whole(block), 1, &t));
	for (int i = 0; i < 16; i++)
		CHECK(davinci_stream_submit(s2, t, NULL));
	davinci_task_destroy(t);
	t = NULL;
	davinci_buffer_free(block);
	block = NULL;
	EXPECT(live_blocks(pool) == 1);
	davinci_stream_destroy(s2);
	s2 = NULL;
	EXPECT(live_blocks(pool) == 0);

	/* 4. Completions in pieces, in order, with their user data. */
	davinci_task *tasks[5];
	for (int i = 0; i < 5; i++) {
		CHECK(davinci_task_nop(&tasks[i]));
		CHECK(davinci_task_set_user_data(tasks[i], 100 + i));
	}
	uint64_t first = 0;
	CHECK(davinci_stream_submit_batch(s, (const davinci_task *const *)tasks, 5, &first));
	EXPECT(first == 3);
	for (int i = 0; i < 5; i++)
		davinci_task_destroy(tasks[i]);
	CHECK(davinci_stream_synchronize(s, TIMEOUT_NS));
	uint64_t want = 100;
	for (int round = 0; round < 3; round++) {
		CHECK(davinci_stream_poll(s, done, 2, &n));
		EXPECT(n == (round < 2 ? 2u : 1u));
		for (size_t i = 0; i < n; i++, want++)
			EXPECT(done[i].user_data == want && done[i].task == want - 100 + 3);
	}
	CHECK(davinci_stream_poll(s, done, 2, &n));
	EXPECT(n == 0);

	/* 5. A record orders two streams; its value, its query, the time between records. */
	davinci_event *ev = NULL, *ev2 = NULL;
	davinci_record *r1 = NULL, *r2 = NULL;
	CHECK(davinci_event_create(ctx, &ev));
	CHECK(davinci_event_create(ctx, &ev2));
	CHECK(davinci_stream_create(ctx, NULL, &s2));
	CHECK(davinci_buffer_alloc(dev, 1 << 16, &keep));
	davinci_buffer *copy = NULL;
	CHECK(davinci_buffer_alloc(dev, 1 << 16, &copy));
	CHECK(davinci_event_record(ev, s, &r1));
	CHECK(davinci_task_fill(davinci_whole(keep), 42, &t));
	CHECK(davinci_stream_submit(s, t, NULL));
	davinci_task_destroy(t);
	CHECK(davinci_event_record(ev2, s, &r2));
	CHECK(davinci_stream_wait_record(s2, r2));
	CHECK(davinci_task_copy(davinci_whole(copy), davinci_whole(keep), &t));
	CHECK(davinci_stream_submit(s2, t, NULL));
	davinci_task_destroy(t);
	t = NULL;
	CHECK(davinci_record_synchronize(r2, TIMEOUT_NS));
	bool reached = false;
	CHECK(davinci_record_query(r2, &reached));
	EXPECT(reached);
	CHECK(davinci_event_query(ev2, &reached));
	EXPECT(reached);
	uint64_t v = 0, ns = 0;
	CHECK(davinci_record_value(r2, &v));
	EXPECT(v == 1);
	CHECK(davinci_event_recorded(ev2, &v));
	EXPECT(v == 1);
	EXPECT_ERR(davinci_record_elapsed_ns(r1, r2, &ns), -EAGAIN, "has not reaped");
	CHECK(davinci_stream_synchronize(s, TIMEOUT_NS));
	CHECK(davinci_stream_synchronize(s2, TIMEOUT_NS));
	CHECK(davinci_record_elapsed_ns(r1, r2, &ns));
	EXPECT_ERR(davinci_record_elapsed_ns(r2, r1, &ns), -EINVAL, "before the start record");
	uint32_t word = 0;
	CHECK(davinci_buffer_read(copy, (1 << 16) - 4, &word, 4));
	EXPECT(word == 42);
	CHECK(davinci_event_synchronize(ev, 0));

	/* 6. Export and import between two clients of one device (shared mode): the importer's
	 * fill lands in the exporter's buffer. */
	davinci_device *dev2 = NULL;
	davinci_context *ctx2 = NULL;
	davinci_stream *s3 = NULL;
	davinci_buffer *theirs = NULL;
	uint64_t token = 0;
	CHECK(davinci_device_set_share_mode(dev, DAVINCI_SHARE_SHARED));
	if (strcmp(device_arg(argc, argv), "embedded") == 0)
		CHECK(davinci_device_attach(dev, &dev2));
	else
		CHECK(davinci_device_open(device_arg(argc, argv), &dev2));
	CHECK(davinci_buffer_export(keep, DAVINCI_EXPORT_OWN_UID, 0, &token));
	CHECK(davinci_device_import(dev2, token, &theirs));
	EXPECT_ERR(davinci_device_import(dev2, token, &theirs), -EBUSY, "IMPORT_MEMORY");
	CHECK(davinci_context_create(dev2, &ctx2));
	CHECK(davinci_stream_create(ctx2, NULL, &s3));
	CHECK(davinci_task_fill(davinci_whole(theirs), 0x5eed, &t));
	CHECK(davinci_stream_submit(s3, t, NULL));
	davinci_task_destroy(t);
	t = NULL;
	/* A task of one open names no buffer of another. */
	CHECK(davinci_task_fill(davinci_whole(keep), 1, &t));
	EXPECT_ERR(davinci_stream_submit(s3, t, NULL), -EINVAL, "another open");
	davinci_task_destroy(t);
	t = NULL;
	CHECK(davinci_stream_synchronize(s3, TIMEOUT_NS));
	CHECK(davinci_buffer_read(keep, 0, &word, 4));
	EXPECT(word == 0x5eed);
	/* The exporter's free revokes an import, and the importer can tell. */
	int revoked = -1;
	CHECK(davinci_buffer_is_revoked(theirs, &revoked));
	EXPECT(revoked == 0);
	CHECK(davinci_buffer_is_revoked(keep, &revoked));
	EXPECT(revoked == 0);
	davinci_buffer *lent = NULL, *borrowed = NULL;
	uint64_t lent_token = 0;
	CHECK(davinci_buffer_alloc(dev, 4096, &lent));
	CHECK(davinci_buffer_export(lent, DAVINCI_EXPORT_OWN_UID, 0, &lent_token));
	CHECK(davinci_device_import(dev2, lent_token, &borrowed));
	CHECK(davinci_buffer_is_revoked(borrowed, &revoked));
	EXPECT(revoked == 0);
	davinci_buffer_free(lent);
	CHECK(davinci_buffer_is_revoked(borrowed, &revoked));
	EXPECT(revoked == 1);
	davinci_buffer_free(borrowed);
	davinci_buffer_free(theirs);
	davinci_stream_destroy(s3);
	davinci_context_destroy(ctx2);
	davinci_device_destroy(dev2);
	CHECK(davinci_device_set_share_mode(dev, DAVINCI_SHARE_EXCLUSIVE));
	EXPECT_ERR(davinci_device_set_share_mode(dev, 9), -EINVAL, "mode 9");

	davinci_record_destroy(r1);
	davinci_record_destroy(r2);
	davinci_event_destroy(ev);
	davinci_event_destroy(ev2);
	davinci_buffer_free(copy);
	davinci_buffer_free(keep);
	davinci_stream_destroy(s2);
	/* Handles in any order: the device first, the stream last. */
	davinci_device_destroy(dev);
	davinci_pool_destroy(pool);
	davinci_context_destroy(ctx);
	davinci_stream_destroy(s);
	return finish("lifetime");
}
