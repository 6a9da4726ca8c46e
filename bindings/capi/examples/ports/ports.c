/* Two backend ports over libdavinci (issue 43), as a C shared library a Python program calls
 * (ports.py, through ctypes) with numpy arrays:
 *
 *  - catlass_linear: torch_catlass's path, a framework op handing arrays to a C extension
 *    that runs a tiled GEMM on the device and an epilogue: y = relu(x . w^T + bias), with x
 *    (m x k) and w (n x k, a torch Linear's layout) in f16, bias and y in f32.
 *  - mllm_block: an mLLM-style backend's transformer block forward (one head), activations
 *    in f32 from a caching pool, weights in f16: embedding lookup by COPY, RMS norm,
 *    attention (q, k, v projections, scores q . k^T / sqrt(d), softmax, context, output
 *    projection added to the residual), RMS norm, MLP with GELU added to the residual.
 *
 * Every device call's failure is returned as a negative errno with davinci_last_error()'s
 * text in `err`. Build: cc -shared -fPIC ports.c $(pkg-config --cflags --libs davinci). */
#include <davinci/runtime.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define T_NS (30ull * 1000 * 1000 * 1000)

/* The first failing call's status and text, kept in `err`. */
#define TRY(call)                                                                        \
	do {                                                                             \
		int rc_ = (call);                                                        \
		if (rc_ < 0) {                                                           \
			snprintf(err, errlen, "%s: %s", #call, davinci_last_error());    \
			status = rc_;                                                    \
			goto out;                                                        \
		}                                                                        \
	} while (0)

static uint64_t addr(const davinci_buffer *b)
{
	uint64_t a = 0;
	davinci_buffer_dev_addr(b, &a);
	return a;
}

static uint32_t f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}

/* One launch of `kernel` with `params` over `n` buffers, submitted on `s`. */
static int launch(davinci_stream *s, uint32_t kernel, const void *params, size_t len,
		  davinci_buffer *const *ops, size_t n)
{
	davinci_region r[8];
	davinci_task *t = NULL;
	if (n > 8)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		r[i] = davinci_whole(ops[i]);
	int rc = davinci_task_kernel(kernel, params, len, r, n, &t);
	if (rc < 0)
		return rc;
	rc = davinci_stream_submit(s, t, NULL);
	davinci_task_destroy(t);
	return rc;
}

/* C (m x n, f32) = alpha . A (m x k) . op(B) + beta . C. */
static int gemm(davinci_stream *s, davinci_buffer *a, uint8_t ta, davinci_buffer *b, uint8_t tb,
		int trans_b, davinci_buffer *c, uint64_t m, uint64_t n, uint64_t k, float alpha,
		float beta)
{
	struct davinci_gemm_params g;
	memset(&g, 0, sizeof g);
	g.m = m, g.n = n, g.k = k, g.batch = 1;
	g.a = addr(a), g.b = addr(b), g.c = addr(c);
	g.lda = k, g.ldb = trans_b ? k : n, g.ldc = n;
	g.dtype_a = ta, g.dtype_b = tb, g.dtype_c = DAVINCI_DTYPE_F32;
	g.flags = trans_b ? DAVINCI_GEMM_TRANS_B : 0;
	g.alpha = f32_bits(alpha), g.beta = f32_bits(beta);
	davinci_buffer *ops[3] = {a, b, c};
	return launch(s, DAVINCI_KERNEL_GEMM, &g, sizeof g, ops, 3);
}

/* dst = op(a[, b]) over rows x cols (b broadcast along rows when b_row). */
static int ew(davinci_stream *s, uint32_t op, davinci_buffer *dst, uint8_t dd, davinci_buffer *a,
	      uint8_t da, davinci_buffer *b, int b_row, uint64_t rows, uint64_t cols)
{
	struct davinci_elementwise_params e;
	memset(&e, 0, sizeof e);
	e.op = op, e.dtype_dst = dd, e.dtype_a = da;
	e.shape[2] = rows, e.shape[3] = cols, e.shape[0] = e.shape[1] = 1;
	e.dst = addr(dst), e.a = addr(a);
	e.stride_dst[2] = cols, e.stride_dst[3] = 1;
	e.stride_a[2] = cols, e.stride_a[3] = 1;
	davinci_buffer *ops[3] = {dst, a, b};
	if (b) {
		e.dtype_b = da, e.b = addr(b);
		e.stride_b[2] = b_row ? 0 : cols, e.stride_b[3] = 1;
	}
	return launch(s, DAVINCI_KERNEL_ELEMENTWISE, &e, sizeof e, ops, b ? 3 : 2);
}

static int rmsnorm(davinci_stream *s, davinci_buffer *dst, davinci_buffer *src,
		   davinci_buffer *gamma, uint64_t rows, uint64_t cols)
{
	struct davinci_norm_params p;
	memset(&p, 0, sizeof p);
	p.kind = DAVINCI_NORM_RMSNORM, p.eps = f32_bits(1e-6f);
	p.rows = rows, p.cols = cols, p.src = addr(src), p.dst = addr(dst);
	p.ld_src = p.ld_dst = cols, p.gamma = addr(gamma);
	p.dtype_src = p.dtype_dst = p.dtype_gamma = DAVINCI_DTYPE_F32;
	davinci_buffer *ops[3] = {dst, src, gamma};
	return launch(s, DAVINCI_KERNEL_NORM, &p, sizeof p, ops, 3);
}

static int softmax(davinci_stream *s, davinci_buffer *x, uint64_t rows, uint64_t cols)
{
	struct davinci_softmax_params p;
	memset(&p, 0, sizeof p);
	p.rows = rows, p.cols = cols, p.src = p.dst = addr(x), p.ld_src = p.ld_dst = cols;
	p.dtype_src = p.dtype_dst = DAVINCI_DTYPE_F32;
	davinci_buffer *ops[1] = {x};
	return launch(s, DAVINCI_KERNEL_SOFTMAX, &p, sizeof p, ops, 1);
}

/* A buffer of `len` bytes from `pool`, `src` written in (when not NULL). */
static int upload(davinci_pool *pool, const void *src, size_t len, davinci_buffer **out)
{
	int rc = davinci_pool_alloc(pool, len, out);
	if (rc < 0 || !src)
		return rc;
	return davinci_buffer_write(*out, 0, src, len);
}

int catlass_linear(const char *device, int m, int n, int k, const uint16_t *x, const uint16_t *w,
		   const float *bias, float *y, char *err, size_t errlen)
{
	int status = 0;
	davinci_device *dev = NULL;
	davinci_context *ctx = NULL;
	davinci_stream *s = NULL;
	davinci_pool *pool = NULL;
	davinci_buffer *bx = NULL, *bw = NULL, *bb = NULL, *by = NULL;
	size_t mm = (size_t)m, nn = (size_t)n, kk = (size_t)k;
	TRY(davinci_device_open(device, &dev));
	TRY(davinci_context_create(dev, &ctx));
	TRY(davinci_stream_create(ctx, NULL, &s));
	TRY(davinci_pool_create(dev, NULL, &pool));
	TRY(upload(pool, x, mm * kk * 2, &bx));
	TRY(upload(pool, w, nn * kk * 2, &bw));
	TRY(upload(pool, bias, nn * 4, &bb));
	TRY(upload(pool, NULL, mm * nn * 4, &by));
	/* The tiled GEMM (the device cuts it into units), then the epilogue: + bias, relu. */
	TRY(gemm(s, bx, DAVINCI_DTYPE_F16, bw, DAVINCI_DTYPE_F16, 1, by, mm, nn, kk, 1.0f, 0.0f));
	TRY(ew(s, DAVINCI_EW_ADD, by, DAVINCI_DTYPE_F32, by, DAVINCI_DTYPE_F32, bb, 1, mm, nn));
	TRY(ew(s, DAVINCI_EW_RELU, by, DAVINCI_DTYPE_F32, by, DAVINCI_DTYPE_F32, NULL, 0, mm, nn));
	TRY(davinci_stream_synchronize(s, T_NS));
	TRY(davinci_buffer_read(by, 0, y, mm * nn * 4));
out:
	davinci_buffer_free(bx);
	davinci_buffer_free(bw);
	davinci_buffer_free(bb);
	davinci_buffer_free(by);
	davinci_pool_destroy(pool);
	davinci_stream_destroy(s);
	davinci_context_destroy(ctx);
	davinci_device_destroy(dev);
	return status;
}

/* The block's weights: emb (vocab x d), wq, wk, wv, wo (d x d), w1 (d x f), w2 (f x d), all
 * f16 and row-major ("x . W"); g1, g2 (d) f32. tokens: seq ids below vocab. y: seq x d f32. */
int mllm_block(const char *device, int seq, int d, int f, int vocab, const int32_t *tokens,
	       const uint16_t *emb, const uint16_t *wq, const uint16_t *wk, const uint16_t *wv,
	       const uint16_t *wo, const uint16_t *w1, const uint16_t *w2, const float *g1,
	       const float *g2, float *y, char *err, size_t errlen)
{
	int status = 0;
	davinci_device *dev = NULL;
	davinci_context *ctx = NULL;
	davinci_stream *s = NULL;
	davinci_pool *pool = NULL;
	enum { EMB, WQ, WK, WV, WO, W1, W2, G1, G2, X16, X, H, Q, K, V, S, A, U, N_BUF };
	davinci_buffer *b[N_BUF] = {0};
	size_t S_ = (size_t)seq, D = (size_t)d, F = (size_t)f;
	TRY(davinci_device_open(device, &dev));
	TRY(davinci_context_create(dev, &ctx));
	TRY(davinci_stream_create(ctx, NULL, &s));
	/* The caching pool: every activation below is a block of it, returned to it (not to
	 * the driver) when freed. */
	TRY(davinci_pool_create(dev, NULL, &pool));
	TRY(upload(pool, emb, (size_t)vocab * D * 2, &b[EMB]));
	TRY(upload(pool, wq, D * D * 2, &b[WQ]));
	TRY(upload(pool, wk, D * D * 2, &b[WK]));
	TRY(upload(pool, wv, D * D * 2, &b[WV]));
	TRY(upload(pool, wo, D * D * 2, &b[WO]));
	TRY(upload(pool, w1, D * F * 2, &b[W1]));
	TRY(upload(pool, w2, F * D * 2, &b[W2]));
	TRY(upload(pool, g1, D * 4, &b[G1]));
	TRY(upload(pool, g2, D * 4, &b[G2]));
	TRY(upload(pool, NULL, S_ * D * 2, &b[X16]));
	for (int i = X; i <= A; i++)
		TRY(upload(pool, NULL, (i == S ? S_ * S_ : S_ * D) * 4, &b[i]));
	TRY(upload(pool, NULL, S_ * F * 4, &b[U]));
	/* Embedding lookup: one COPY per token, f16 rows, then a cast to f32. */
	for (int i = 0; i < seq; i++) {
		if (tokens[i] < 0 || tokens[i] >= vocab) {
			snprintf(err, errlen, "token %d of %d is %d, not below %d", i, seq, tokens[i],
				 vocab);
			status = -EINVAL;
			goto out;
		}
		davinci_task *t = NULL;
		davinci_region dst = {b[X16], (size_t)i * D * 2, D * 2};
		davinci_region src = {b[EMB], (size_t)tokens[i] * D * 2, D * 2};
		TRY(davinci_task_copy(dst, src, &t));
		int rc = davinci_stream_submit(s, t, NULL);
		davinci_task_destroy(t);
		TRY(rc);
	}
	TRY(ew(s, DAVINCI_EW_CAST, b[X], DAVINCI_DTYPE_F32, b[X16], DAVINCI_DTYPE_F16, NULL, 0, S_, D));
	/* Attention. */
	TRY(rmsnorm(s, b[H], b[X], b[G1], S_, D));
	TRY(gemm(s, b[H], DAVINCI_DTYPE_F32, b[WQ], DAVINCI_DTYPE_F16, 0, b[Q], S_, D, D, 1.0f, 0.0f));
	TRY(gemm(s, b[H], DAVINCI_DTYPE_F32, b[WK], DAVINCI_DTYPE_F16, 0, b[K], S_, D, D, 1.0f, 0.0f));
	TRY(gemm(s, b[H], DAVINCI_DTYPE_F32, b[WV], DAVINCI_DTYPE_F16, 0, b[V], S_, D, D, 1.0f, 0.0f));
	TRY(gemm(s, b[Q], DAVINCI_DTYPE_F32, b[K], DAVINCI_DTYPE_F32, 1, b[S], S_, S_, D,
		 1.0f / sqrtf((float)d), 0.0f));
	TRY(softmax(s, b[S], S_, S_));
	TRY(gemm(s, b[S], DAVINCI_DTYPE_F32, b[V], DAVINCI_DTYPE_F32, 0, b[A], S_, D, S_, 1.0f, 0.0f));
	/* x += a . wo (beta 1: the residual is C). */
	TRY(gemm(s, b[A], DAVINCI_DTYPE_F32, b[WO], DAVINCI_DTYPE_F16, 0, b[X], S_, D, D, 1.0f, 1.0f));
	/* MLP: x += gelu(rmsnorm(x) . w1) . w2. */
	TRY(rmsnorm(s, b[H], b[X], b[G2], S_, D));
	TRY(gemm(s, b[H], DAVINCI_DTYPE_F32, b[W1], DAVINCI_DTYPE_F16, 0, b[U], S_, F, D, 1.0f, 0.0f));
	TRY(ew(s, DAVINCI_EW_GELU, b[U], DAVINCI_DTYPE_F32, b[U], DAVINCI_DTYPE_F32, NULL, 0, S_, F));
	TRY(gemm(s, b[U], DAVINCI_DTYPE_F32, b[W2], DAVINCI_DTYPE_F16, 0, b[X], S_, D, F, 1.0f, 1.0f));
	TRY(davinci_stream_synchronize(s, T_NS));
	TRY(davinci_buffer_read(b[X], 0, y, S_ * D * 4));
out:
	for (int i = 0; i < N_BUF; i++)
		davinci_buffer_free(b[i]);
	davinci_pool_destroy(pool);
	davinci_stream_destroy(s);
	davinci_context_destroy(ctx);
	davinci_device_destroy(dev);
	return status;
}
