/* Export leases, ranges and unexport from C (ABI 1.5, DAVINCI_FEAT_EXPORT_LEASE): a lease
 * export's token, the same again for the same grant, a plain export of the same buffer
 * another token; ranges that are not whole pages or run past the end refused with the
 * reason; unexport of what nobody imported leaves no import standing; a pool block exported
 * alone under a lease (its pool's align a page) and one that is not whole pages refused;
 * the pool holds no block for a lease nobody imported. (Importers in other clients and
 * processes: the conformance suite and the Python tests, which open two clients of one
 * shared device.) */
#include "check.h"

int main(int argc, char **argv)
{
	const char *path = device_arg(argc, argv);
	davinci_device *dev = NULL;
	davinci_buffer *buf = NULL, *mine = NULL, *blk = NULL, *small_blk = NULL;
	davinci_pool *pool = NULL, *small = NULL;
	davinci_pool_options o;
	davinci_device_props p;
	uint64_t token = 0, again = 0, plain = 0, range = 0;
	uint32_t left = 99;
	size_t leased = 99;

	CHECK(davinci_device_open(path, &dev));
	CHECK(davinci_device_query_info(dev, &p));
	EXPECT(p.features & DAVINCI_FEAT_EXPORT_LEASE);
	const uint64_t page = p.page_size;
	CHECK(davinci_buffer_alloc(dev, 4 * page, &buf));

	CHECK(davinci_buffer_export_lease(buf, DAVINCI_EXPORT_OWN_UID, 0, &token));
	EXPECT(token != 0);
	CHECK(davinci_buffer_export_lease(buf, DAVINCI_EXPORT_OWN_UID, 0, &again));
	EXPECT(again == token);
	CHECK(davinci_buffer_export(buf, DAVINCI_EXPORT_OWN_UID, 0, &plain));
	EXPECT(plain != token);
	EXPECT_ERR(davinci_device_import(dev, token, &mine), -EINVAL, "this client");

	EXPECT_ERR(davinci_buffer_export_range(buf, 100, page, DAVINCI_EXPORT_OWN_UID, 0, 0, &range),
		   -EINVAL, "whole pages");
	EXPECT_ERR(davinci_buffer_export_range(buf, 3 * page, 2 * page, DAVINCI_EXPORT_OWN_UID, 0, 1,
					       &range),
		   -ERANGE, "past the end");
	CHECK(davinci_buffer_export_range(buf, page, page, DAVINCI_EXPORT_OWN_UID, 0, 1, &range));
	EXPECT(range != token && range != plain);

	CHECK(davinci_buffer_unexport(buf, page, page, &left));
	EXPECT(left == 0);
	CHECK(davinci_buffer_unexport(buf, 0, 0, NULL));
	EXPECT_ERR(davinci_buffer_unexport(buf, 1, page, &left), -EINVAL, "whole pages");

	/* A pool block alone. */
	CHECK(davinci_pool_options_default(&o));
	CHECK(davinci_pool_create(dev, &o, &small));
	CHECK(davinci_pool_alloc(small, 256, &small_blk));
	EXPECT_ERR(davinci_buffer_export_lease(small_blk, DAVINCI_EXPORT_OWN_UID, 0, &again), -EINVAL,
		   "align");
	o.align = page;
	CHECK(davinci_pool_create(dev, &o, &pool));
	CHECK(davinci_pool_alloc(pool, page, &blk));
	CHECK(davinci_buffer_export_lease(blk, DAVINCI_EXPORT_OWN_UID, 0, &again));
	EXPECT_ERR(davinci_buffer_export_range(blk, 0, page, DAVINCI_EXPORT_OWN_UID, 0, 1, &again),
		   -EINVAL, "whole");
	EXPECT_ERR(davinci_buffer_unexport(blk, 0, 0, &left), -EINVAL, "pool block");
	davinci_buffer_free(blk);
	CHECK(davinci_pool_leased_blocks(pool, &leased));
	EXPECT(leased == 0);
	EXPECT_ERR(davinci_pool_leased_blocks(NULL, &leased), -EINVAL, "pool");

	davinci_buffer_free(small_blk);
	davinci_pool_destroy(small);
	davinci_pool_destroy(pool);
	davinci_buffer_free(buf);
	davinci_device_destroy(dev);
	return finish("leases");
}
