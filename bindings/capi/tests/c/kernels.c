/* The device's built-in kernels from C (ABI 1.5): davinci_device_kernels lists them,
 * davinci_task_kernel launches a GEMM whose struct davinci_gemm_params the program fills
 * (uapi.h's layout, device addresses from davinci_buffer_dev_addr), a block naming memory
 * outside the operands given is refused on the host, a C overlapping A is refused by the
 * device naming C, and davinci_task_fill_bytes is a memset at any offset. On a device
 * without kernels (the kernel module's software device) the list is empty and only the
 * memset runs. */
#include "check.h"

int main(int argc, char **argv)
{
	const char *path = device_arg(argc, argv);
	davinci_device *dev = NULL;
	davinci_context *ctx = NULL;
	davinci_stream *s = NULL;
	davinci_buffer *a = NULL, *b = NULL, *c = NULL, *m = NULL;
	davinci_task *t = NULL;
	davinci_device_props p;
	struct davinci_kernel_info k[8];
	CHECK(davinci_device_open(path, &dev));
	CHECK(davinci_device_query_info(dev, &p));
	CHECK(davinci_context_create(dev, &ctx));
	CHECK(davinci_stream_create(ctx, NULL, &s));

	/* A memset of 5 bytes at offset 3, on every device with DAVINCI_FEAT_DTYPES. */
	CHECK(davinci_buffer_alloc(dev, 64, &m));
	unsigned char zero[16] = {0}, got[16];
	CHECK(davinci_buffer_write(m, 0, zero, sizeof zero));
	davinci_region r = {m, 3, 5};
	CHECK(davinci_task_fill_bytes(r, 0xAB, &t));
	CHECK(davinci_stream_submit(s, t, NULL));
	davinci_task_destroy(t);
	CHECK(davinci_stream_synchronize(s, TIMEOUT_NS));
	CHECK(davinci_buffer_read(m, 0, got, sizeof got));
	for (int i = 0; i < 16; i++)
		EXPECT(got[i] == (i >= 3 && i < 8 ? 0xAB : 0));

	int n = davinci_device_kernels(dev, k, 8);
	EXPECT(n >= 0);
	if (!(p.features & DAVINCI_FEAT_KERNELS)) {
		EXPECT(n == 0);
		printf("kernels: none on this device\n");
		goto out;
	}
	EXPECT(n == 5);
	EXPECT(k[0].id == DAVINCI_KERNEL_GEMM && strcmp((const char *)k[0].name, "gemm") == 0);
	EXPECT(k[0].params_size == sizeof(struct davinci_gemm_params));
	EXPECT(k[0].params_version == DAVINCI_KERNEL_PARAMS_VERSION);
	EXPECT(k[0].dtypes & (1u << DAVINCI_DTYPE_F16));

	/* C (3x2) = A (3x4) . B (4x2), f32. */
	float ha[12], hb[8], hc[6];
	for (int i = 0; i < 12; i++)
		ha[i] = (float)(i % 5) - 2.0f;
	for (int i = 0; i < 8; i++)
		hb[i] = (float)(i % 3);
	CHECK(davinci_buffer_alloc(dev, sizeof ha, &a));
	CHECK(davinci_buffer_alloc(dev, sizeof hb, &b));
	CHECK(davinci_buffer_alloc(dev, sizeof hc, &c));
	CHECK(davinci_buffer_write(a, 0, ha, sizeof ha));
	CHECK(davinci_buffer_write(b, 0, hb, sizeof hb));
	struct davinci_gemm_params g;
	memset(&g, 0, sizeof g);
	g.m = 3, g.n = 2, g.k = 4, g.batch = 1;
	uint64_t da, db, dc; /* __u64 is another type than uint64_t on some ABIs */
	CHECK(davinci_buffer_dev_addr(a, &da));
	CHECK(davinci_buffer_dev_addr(b, &db));
	CHECK(davinci_buffer_dev_addr(c, &dc));
	g.a = da, g.b = db, g.c = dc;
	g.lda = 4, g.ldb = 2, g.ldc = 2;
	g.dtype_a = g.dtype_b = g.dtype_c = DAVINCI_DTYPE_F32;
	float one = 1.0f;
	memcpy(&g.alpha, &one, sizeof one);
	davinci_region ops[3] = {davinci_whole(a), davinci_whole(b), davinci_whole(c)};
	CHECK(davinci_task_kernel(DAVINCI_KERNEL_GEMM, &g, sizeof g, ops, 3, &t));
	CHECK(davinci_stream_submit(s, t, NULL));
	davinci_task_destroy(t);
	CHECK(davinci_stream_synchronize(s, TIMEOUT_NS));
	CHECK(davinci_buffer_read(c, 0, hc, sizeof hc));
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < 2; j++) {
			float want = 0;
			for (int q = 0; q < 4; q++)
				want += ha[i * 4 + q] * hb[q * 2 + j];
			EXPECT(hc[i * 2 + j] == want);
		}

	/* The host refuses a block naming memory outside the operands given, and a wrong size. */
	EXPECT_ERR(davinci_task_kernel(DAVINCI_KERNEL_GEMM, &g, sizeof g, ops, 2, &t), -EINVAL,
		   "lies in none of the operand regions");
	EXPECT_ERR(davinci_task_kernel(DAVINCI_KERNEL_GEMM, &g, 64, ops, 3, &t), -EINVAL,
		   "128 bytes");
	EXPECT_ERR(davinci_task_kernel(99, &g, sizeof g, ops, 3, &t), -EINVAL, "none of");

	/* The device refuses C overlapping A, naming C; the stream stops. */
	davinci_stream *bad = NULL;
	CHECK(davinci_stream_create(ctx, NULL, &bad));
	g.c = g.a + 4;
	davinci_region ops2[2] = {davinci_whole(a), davinci_whole(b)};
	CHECK(davinci_task_kernel(DAVINCI_KERNEL_GEMM, &g, sizeof g, ops2, 2, &t));
	CHECK(davinci_stream_submit(bad, t, NULL));
	davinci_task_destroy(t);
	EXPECT_ERR(davinci_stream_synchronize(bad, TIMEOUT_NS), -EIO, "kernel output C");
	davinci_stream_destroy(bad);
	printf("kernels: %d listed, a GEMM and its refusals checked\n", n);
out:
	davinci_buffer_free(a);
	davinci_buffer_free(b);
	davinci_buffer_free(c);
	davinci_buffer_free(m);
	davinci_stream_destroy(s);
	davinci_context_destroy(ctx);
	davinci_device_destroy(dev);
	return finish("kernels");
}
