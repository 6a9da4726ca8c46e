/* Collectives from C (davinci_ccl_*), as an NCCL program uses them:
 * - one thread drives four ranks of davinci_ccl_comm_init_all with groups (all-reduce of
 *   every operator, all-gather, reduce-scatter, broadcast, reduce, a ring of sends and
 *   receives), every element checked;
 * - the same four ranks stream-ordered: FILL, all-reduce and COPY queued on each stream;
 * - two processes (fork) join one communicator by a unique id sent as text, and exchange
 *   buffers with send and recv in a group, then all-reduce;
 * - bad calls: their errno and message. */
#include "check.h"

#include <sys/wait.h>
#include <unistd.h>

#define N 4
#define COUNT 70000 /* past the one-shot path */

static float value(int rank, size_t i)
{
	return (float)((int)(i % 7) + rank * 3 - 5);
}

static void fill(davinci_buffer *b, int rank, size_t count)
{
	float *v = malloc(count * sizeof(float));
	for (size_t i = 0; i < count; i++)
		v[i] = value(rank, i);
	CHECK(davinci_buffer_write(b, 0, v, count * sizeof(float)));
	free(v);
}

static float *read_all(davinci_buffer *b, size_t count)
{
	float *v = malloc(count * sizeof(float));
	CHECK(davinci_buffer_read(b, 0, v, count * sizeof(float)));
	return v;
}

static void one_thread_four_ranks(const char *path)
{
	davinci_ccl_comm *comms[N];
	davinci_device *dev = NULL;
	davinci_context *ctx = NULL;
	davinci_stream *s[N];
	davinci_buffer *send[N], *recv[N], *big[N];
	CHECK(davinci_device_open(path, &dev));
	CHECK(davinci_context_create(dev, &ctx));
	CHECK(davinci_ccl_comm_init_all(comms, N));
	for (int r = 0; r < N; r++) {
		int rank = -1, nranks = -1;
		CHECK(davinci_ccl_comm_rank(comms[r], &rank, &nranks));
		EXPECT(rank == r && nranks == N);
		CHECK(davinci_stream_create(ctx, NULL, &s[r]));
		CHECK(davinci_buffer_alloc(dev, COUNT * sizeof(float), &send[r]));
		CHECK(davinci_buffer_alloc(dev, COUNT * sizeof(float), &recv[r]));
		CHECK(davinci_buffer_alloc(dev, N * COUNT * sizeof(float), &big[r]));
		fill(send[r], r, COUNT);
	}
	/* Without a group one thread would wait for itself: every rank's call in one group. */
	const uint32_t ops[] = {DAVINCI_CCL_SUM, DAVINCI_CCL_PROD, DAVINCI_CCL_MAX, DAVINCI_CCL_MIN};
	for (int o = 0; o < 4; o++) {
		CHECK(davinci_ccl_group_start());
		for (int r = 0; r < N; r++)
			CHECK(davinci_ccl_all_reduce(send[r], recv[r], COUNT, DAVINCI_CCL_FLOAT32, ops[o],
						     comms[r], s[r]));
		CHECK(davinci_ccl_group_end());
		for (int r = 0; r < N; r++) {
			float *got = read_all(recv[r], COUNT);
			int bad = 0;
			for (size_t i = 0; i < COUNT; i++) {
				float want = value(0, i);
				for (int k = 1; k < N; k++) {
					float x = value(k, i);
					want = o == 0   ? want + x
					       : o == 1 ? want * x
					       : o == 2 ? (x > want ? x : want)
							: (x < want ? x : want);
				}
				bad += got[i] != want;
			}
			EXPECT(bad == 0);
			free(got);
		}
	}
	/* All-gather, then reduce-scatter of the gathered blocks, broadcast and reduce. */
	CHECK(davinci_ccl_group_start());
	for (int r = 0; r < N; r++)
		CHECK(davinci_ccl_all_gather(send[r], big[r], COUNT, DAVINCI_CCL_FLOAT32, comms[r], s[r]));
	CHECK(davinci_ccl_group_end());
	for (int r = 0; r < N; r++) {
		float *got = read_all(big[r], N * COUNT);
		int bad = 0;
		for (int k = 0; k < N; k++)
			for (size_t i = 0; i < COUNT; i++)
				bad += got[k * COUNT + i] != value(k, i);
		EXPECT(bad == 0);
		free(got);
	}
	CHECK(davinci_ccl_group_start());
	for (int r = 0; r < N; r++)
		CHECK(davinci_ccl_reduce_scatter(big[r], recv[r], COUNT, DAVINCI_CCL_FLOAT32,
						 DAVINCI_CCL_SUM, comms[r], s[r]));
	CHECK(davinci_ccl_group_end());
	for (int r = 0; r < N; r++) {
		float *got = read_all(recv[r], COUNT);
		int bad = 0;
		for (size_t i = 0; i < COUNT; i++)
			bad += got[i] != N * value(r, i);
		EXPECT(bad == 0);
		free(got);
	}
	CHECK(davinci_ccl_group_start());
	for (int r = 0; r < N; r++)
		CHECK(davinci_ccl_broadcast(send[r], recv[r], COUNT, DAVINCI_CCL_FLOAT32, 2, comms[r],
					    s[r]));
	CHECK(davinci_ccl_group_end());
	for (int r = 0; r < N; r++) {
		float *got = read_all(recv[r], COUNT);
		EXPECT(got[0] == value(2, 0) && got[COUNT - 1] == value(2, COUNT - 1));
		free(got);
	}
	/* A ring of sends and receives, every rank's pair in one (nested) group. */
	CHECK(davinci_ccl_group_start());
	for (int r = 0; r < N; r++) {
		CHECK(davinci_ccl_group_start());
		CHECK(davinci_ccl_send(send[r], COUNT, DAVINCI_CCL_FLOAT32, (r + 1) % N, comms[r], s[r]));
		CHECK(davinci_ccl_recv(recv[r], COUNT, DAVINCI_CCL_FLOAT32, (r + N - 1) % N, comms[r],
				       s[r]));
		CHECK(davinci_ccl_group_end());
	}
	CHECK(davinci_ccl_group_end());
	for (int r = 0; r < N; r++) {
		float *got = read_all(recv[r], COUNT);
		int prev = (r + N - 1) % N, bad = 0;
		for (size_t i = 0; i < COUNT; i++)
			bad += got[i] != value(prev, i);
		EXPECT(bad == 0);
		free(got);
	}

	/* Bad calls. */
	EXPECT_ERR(davinci_ccl_all_reduce(send[0], recv[0], COUNT, 9, DAVINCI_CCL_SUM, comms[0], s[0]),
		   -EINVAL, "datatype 9");
	EXPECT_ERR(davinci_ccl_all_reduce(send[0], recv[0], COUNT, DAVINCI_CCL_FLOAT32, 7, comms[0],
					  s[0]),
		   -EINVAL, "op 7");
	EXPECT_ERR(davinci_ccl_all_reduce(send[0], NULL, COUNT, DAVINCI_CCL_FLOAT32, DAVINCI_CCL_SUM,
					  comms[0], s[0]),
		   -EINVAL, "NULL");
	EXPECT_ERR(davinci_ccl_send(send[0], COUNT, DAVINCI_CCL_FLOAT32, N, comms[0], s[0]), -EINVAL,
		   "peer 4");
	EXPECT_ERR(davinci_ccl_group_end(), -EINVAL, "no group is open");
	CHECK(davinci_ccl_group_start());
	CHECK(davinci_ccl_all_reduce(send[0], recv[0], COUNT, DAVINCI_CCL_FLOAT32, DAVINCI_CCL_SUM,
				     comms[0], s[0]));
	CHECK(davinci_ccl_all_reduce(send[1], recv[1], COUNT, DAVINCI_CCL_FLOAT32, DAVINCI_CCL_SUM,
				     comms[1], s[0]));
	EXPECT_ERR(davinci_ccl_group_end(), -EINVAL, "one stream");
	/* One rank, alone: one element more than its buffer holds. */
	EXPECT_ERR(davinci_ccl_all_reduce(send[0], recv[0], COUNT + 1, DAVINCI_CCL_FLOAT32,
					  DAVINCI_CCL_SUM, comms[0], s[0]),
		   -EINVAL, "the buffer has");

	for (int r = 0; r < N; r++) {
		davinci_buffer_free(send[r]);
		davinci_buffer_free(recv[r]);
		davinci_buffer_free(big[r]);
		davinci_stream_destroy(s[r]);
		davinci_ccl_comm_destroy(comms[r]);
	}
	davinci_ccl_comm_destroy(NULL);
	davinci_context_destroy(ctx);
	davinci_device_destroy(dev);
}

static void submit(davinci_stream *s, davinci_task *t)
{
	CHECK(davinci_stream_submit(s, t, NULL));
	davinci_task_destroy(t);
}

/* Stream-ordered: each rank's FILL, all-reduce and COPY queued on its stream, nothing run
 * when they are submitted; the all-reduce waits for the FILL and the COPY for the result. */
static void stream_ordered(const char *path)
{
	davinci_ccl_comm *comms[N];
	davinci_device *dev = NULL;
	davinci_context *ctx = NULL;
	davinci_stream *s[N];
	davinci_buffer *send[N], *recv[N], *out[N];
	davinci_task *t = NULL;
	CHECK(davinci_device_open(path, &dev));
	CHECK(davinci_context_create(dev, &ctx));
	CHECK(davinci_ccl_comm_init_all(comms, N));
	for (int r = 0; r < N; r++) {
		CHECK(davinci_ccl_comm_stream_ordered(comms[r], ctx));
		CHECK(davinci_stream_create(ctx, NULL, &s[r]));
		CHECK(davinci_buffer_alloc(dev, COUNT * 4, &send[r]));
		CHECK(davinci_buffer_alloc(dev, COUNT * 4, &recv[r]));
		CHECK(davinci_buffer_alloc(dev, COUNT * 4, &out[r]));
	}
	EXPECT_ERR(davinci_ccl_comm_stream_ordered(comms[0], ctx), -EINVAL, "already");
	for (uint32_t round = 0; round < 3; round++) {
		for (int r = 0; r < N; r++) {
			CHECK(davinci_task_fill(davinci_whole(send[r]), (uint32_t)(r + 1) * 10 + round, &t));
			submit(s[r], t);
		}
		/* Queued and returned: one thread may call every rank without a group too. */
		for (int r = 0; r < N; r++)
			CHECK(davinci_ccl_all_reduce(send[r], recv[r], COUNT, DAVINCI_CCL_INT32,
						     DAVINCI_CCL_SUM, comms[r], s[r]));
		for (int r = 0; r < N; r++) {
			CHECK(davinci_task_copy(davinci_whole(out[r]), davinci_whole(recv[r]), &t));
			submit(s[r], t);
		}
		for (int r = 0; r < N; r++) {
			CHECK(davinci_stream_synchronize(s[r], TIMEOUT_NS));
			int32_t *got = malloc(COUNT * 4);
			CHECK(davinci_buffer_read(out[r], 0, got, COUNT * 4));
			int32_t want = 0, bad = 0;
			for (int k = 0; k < N; k++)
				want += (k + 1) * 10 + (int32_t)round;
			for (size_t i = 0; i < COUNT; i++)
				bad += got[i] != want;
			EXPECT(bad == 0);
			free(got);
		}
	}
	/* A ring of sends and receives, every rank sending first, one group per rank. */
	for (int r = 0; r < N; r++) {
		CHECK(davinci_ccl_group_start());
		CHECK(davinci_ccl_send(send[r], COUNT, DAVINCI_CCL_INT32, (r + 1) % N, comms[r], s[r]));
		CHECK(davinci_ccl_recv(recv[r], COUNT, DAVINCI_CCL_INT32, (r + N - 1) % N, comms[r], s[r]));
		CHECK(davinci_ccl_group_end());
	}
	for (int r = 0; r < N; r++) {
		int32_t first = 0;
		CHECK(davinci_stream_synchronize(s[r], TIMEOUT_NS));
		CHECK(davinci_buffer_read(recv[r], 0, &first, 4));
		EXPECT(first == ((r + N - 1) % N + 1) * 10 + 2);
		CHECK(davinci_ccl_comm_synchronize(comms[r], TIMEOUT_NS));
	}
	for (int r = 0; r < N; r++) {
		davinci_buffer_free(send[r]);
		davinci_buffer_free(recv[r]);
		davinci_buffer_free(out[r]);
		davinci_stream_destroy(s[r]);
		davinci_ccl_comm_destroy(comms[r]);
	}
	davinci_context_destroy(ctx);
	davinci_device_destroy(dev);
}

/* A rank in its own process: joins by the id's text, swaps with its peer, all-reduces. */
static int child(const char *text, int rank)
{
	davinci_ccl_unique_id id;
	davinci_ccl_comm *comm = NULL;
	davinci_device *dev = NULL;
	davinci_context *ctx = NULL;
	davinci_stream *s = NULL;
	davinci_buffer *mine = NULL, *theirs = NULL;
	CHECK(davinci_ccl_unique_id_parse(text, &id));
	CHECK(davinci_ccl_comm_init_rank(&comm, 2, &id, rank));
	CHECK(davinci_device_open("embedded", &dev));
	CHECK(davinci_context_create(dev, &ctx));
	CHECK(davinci_stream_create(ctx, NULL, &s));
	CHECK(davinci_buffer_alloc(dev, COUNT * sizeof(float), &mine));
	CHECK(davinci_buffer_alloc(dev, COUNT * sizeof(float), &theirs));
	fill(mine, rank, COUNT);
	CHECK(davinci_ccl_group_start());
	CHECK(davinci_ccl_send(mine, COUNT, DAVINCI_CCL_FLOAT32, 1 - rank, comm, s));
	CHECK(davinci_ccl_recv(theirs, COUNT, DAVINCI_CCL_FLOAT32, 1 - rank, comm, s));
	CHECK(davinci_ccl_group_end());
	float *got = read_all(theirs, COUNT);
	int bad = 0;
	for (size_t i = 0; i < COUNT; i++)
		bad += got[i] != value(1 - rank, i);
	EXPECT(bad == 0);
	free(got);
	CHECK(davinci_ccl_all_reduce(mine, mine, COUNT, DAVINCI_CCL_FLOAT32, DAVINCI_CCL_SUM, comm, s));
	got = read_all(mine, COUNT);
	bad = 0;
	for (size_t i = 0; i < COUNT; i++)
		bad += got[i] != value(0, i) + value(1, i);
	EXPECT(bad == 0);
	free(got);
	davinci_buffer_free(mine);
	davinci_buffer_free(theirs);
	davinci_stream_destroy(s);
	davinci_context_destroy(ctx);
	davinci_device_destroy(dev);
	davinci_ccl_comm_destroy(comm);
	return failures ? 1 : 0;
}

static void two_processes(void)
{
	davinci_ccl_unique_id id, back;
	char text[33], small[8];
	CHECK(davinci_ccl_get_unique_id(&id));
	CHECK(davinci_ccl_unique_id_to_string(&id, text, sizeof text));
	EXPECT(strlen(text) == 32);
	CHECK(davinci_ccl_unique_id_parse(text, &back));
	EXPECT(memcmp(&id, &back, sizeof id) == 0);
	EXPECT_ERR(davinci_ccl_unique_id_to_string(&id, small, sizeof small), -ERANGE, "needs 33");
	EXPECT_ERR(davinci_ccl_unique_id_parse("xyz", &back), -EINVAL, "32 hex digits");
	pid_t kids[2];
	for (int r = 0; r < 2; r++) {
		fflush(NULL);
		kids[r] = fork();
		if (kids[r] == 0)
			_exit(child(text, r));
		EXPECT(kids[r] > 0);
	}
	for (int r = 0; r < 2; r++) {
		int status = 0;
		EXPECT(waitpid(kids[r], &status, 0) == kids[r]);
		EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
}

int main(int argc, char **argv)
{
	one_thread_four_ranks(device_arg(argc, argv));
	stream_ordered(device_arg(argc, argv));
	two_processes();
	return finish("ccl");
}
