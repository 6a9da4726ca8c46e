/* Error paths: NULL handles and out-parameters, bad sizes and ranges, a bad device path
 * naming itself in davinci_last_error(), bad arguments to the task builders. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "check.h"

#include <unistd.h>

int main(int argc, char **argv)
{
	const char *path = device_arg(argc, argv);
	davinci_device *dev = NULL;
	davinci_context *ctx = NULL;
	davinci_stream *s = NULL;
	davinci_buffer *buf = NULL, *small = NULL;
	davinci_pool *pool = NULL;
	davinci_task *t = NULL;

	EXPECT(davinci_runtime_version() == DAVINCI_RUNTIME_VERSION);
	EXPECT(strcmp(davinci_last_error(), "") == 0);

	/* Device paths. */
	EXPECT_ERR(davinci_device_open("/dev/davinci-capi-test-missing", &dev), -ENODEV,
		   "/dev/davinci-capi-test-missing");
	EXPECT(dev == NULL);
	EXPECT_ERR(davinci_device_open("davinci0", &dev), -EINVAL, "mock:SOCKET");
	EXPECT_ERR(davinci_device_open("mock:/nonexistent/capi.sock", &dev), -ENODEV,
		   "/nonexistent/capi.sock");
	EXPECT_ERR(davinci_device_open(path, NULL), -EINVAL, "out (out-parameter) is NULL");
	/* NULL: the device $DAVINCI_DEVICE names (the default-device rule: devinfo.c). */
	EXPECT(setenv("DAVINCI_DEVICE", "bogus-device", 1) == 0);
	EXPECT_ERR(davinci_device_open(NULL, &dev), -EINVAL, "bogus-device");
	EXPECT(setenv("DAVINCI_DEVICE", path, 1) == 0);
	CHECK(davinci_device_open(NULL, &dev));
	EXPECT(dev != NULL);
	davinci_device_destroy(dev);
	dev = NULL;
	CHECK(davinci_device_open(path, &dev));
	EXPECT(dev != NULL);

	/* NULL handles. */
	EXPECT_ERR(davinci_context_create(NULL, &ctx), -EINVAL, "dev is NULL");
	EXPECT_ERR(davinci_device_get_info(dev, NULL), -EINVAL, "out");
	EXPECT_ERR(davinci_buffer_alloc(NULL, 64, &buf), -EINVAL, "davinci_buffer_alloc: dev is NULL");
	EXPECT_ERR(davinci_stream_synchronize(NULL, 0), -EINVAL, "stream is NULL");
	EXPECT_ERR(davinci_stream_submit(NULL, NULL, NULL), -EINVAL, "stream is NULL");
	EXPECT_ERR(davinci_record_elapsed_ns(NULL, NULL, NULL), -EINVAL, "start is NULL");
	EXPECT_ERR(davinci_task_nop(NULL), -EINVAL, "out");
	davinci_device_destroy(NULL);
	davinci_context_destroy(NULL);
	davinci_stream_destroy(NULL);
	davinci_event_destroy(NULL);
	davinci_record_destroy(NULL);
	davinci_buffer_free(NULL);
	davinci_pool_destroy(NULL);
	davinci_task_destroy(NULL);

	davinci_device_props info;
	CHECK(davinci_device_get_info(dev, &info));
	EXPECT(info.abi_major == DAVINCI_ABI_VERSION_MAJOR);
	char name[8];
	int n = davinci_device_describe(dev, name, sizeof name);
	EXPECT(n >= (int)sizeof name && strlen(name) == sizeof name - 1); /* truncated */
	EXPECT(davinci_device_describe(dev, NULL, 0) == n);

	/* Sizes and ranges. */
	EXPECT_ERR(davinci_buffer_alloc(dev, 0, &buf), -EINVAL, "0 bytes");
	CHECK(davinci_buffer_alloc(dev, 64, &buf));
	CHECK(davinci_buffer_alloc(dev, 32, &small));
	uint32_t words[32] = { 0 };
	EXPECT_ERR(davinci_buffer_write(buf, 60, words, 8), -ERANGE, "outside the 64-byte buffer");
	EXPECT_ERR(davinci_buffer_read(buf, SIZE_MAX, words, 1), -ERANGE, "64-byte buffer");
	EXPECT_ERR(davinci_buffer_write(buf, 0, NULL, 4), -EINVAL, "src is NULL");
	CHECK(davinci_buffer_write(buf, 0, NULL, 0));
	EXPECT_ERR(davinci_buffer_read(buf, 0, words, SIZE_MAX), -EINVAL, "larger than any object");

	/* The task builders check on the host, naming the operand. */
	davinci_region past = { buf, 32, 64 };
	EXPECT_ERR(davinci_task_fill(past, 0, &t), -ERANGE, "dst");
	davinci_region odd = { buf, 2, 8 };
	EXPECT_ERR(davinci_task_fill(odd, 0, &t), -EINVAL, "must be a multiple of 4");
	davinci_region nobuf = { NULL, 0, DAVINCI_WHOLE };
	EXPECT_ERR(davinci_task_fill(nobuf, 0, &t), -EINVAL, "dst.buffer is NULL");
	EXPECT_ERR(davinci_task_copy(davinci_whole(buf), davinci_whole(small), &t), -EINVAL,
		   "dst is 64 bytes and src 32 bytes");
	EXPECT_ERR(davinci_task_add(7, davinci_whole(buf), davinci_whole(buf), davinci_whole(buf), &t),
		   -EINVAL, "dtype 7");
	EXPECT_ERR(davinci_task_add(DAVINCI_DTYPE_U32, davinci_whole(buf), davinci_whole(small),
				    davinci_whole(buf), &t),
		   -EINVAL, "a (src0)");
	EXPECT(t == NULL);
	struct davinci_task_desc d;
	memset(&d, 0, sizeof d);
	d.opcode = DAVINCI_OP_FILL;
	EXPECT_ERR(davinci_task_from_desc(&d, &t), -EINVAL, "nothing would keep alive");

	/* Streams: options, poll arguments. */
	CHECK(davinci_context_create(dev, &ctx));
	davinci_stream_options o;
	CHECK(davinci_stream_options_default(&o));
	EXPECT(o.cmd_entries == 256 && o.keep_completions);
	o.cmd_entries = 3;
	EXPECT_ERR(davinci_stream_create(ctx, &o, &s), -EINVAL, "CREATE_STREAM");
	CHECK(davinci_stream_create(ctx, NULL, &s));
	uint32_t handle = 0;
	CHECK(davinci_stream_handle(s, &handle));
	EXPECT(handle != 0);
	EXPECT_ERR(davinci_stream_handle(s, NULL), -EINVAL, "out (out-parameter) is NULL");
	size_t got = 99;
	EXPECT_ERR(davinci_stream_poll(s, NULL, 4, &got), -EINVAL, "out is NULL with cap 4");
	EXPECT_ERR(davinci_stream_poll(s, NULL, 0, NULL), -EINVAL, "n (out-parameter)");
	CHECK(davinci_stream_poll(s, NULL, 0, &got));
	EXPECT(got == 0);
	const davinci_task *none[2] = { NULL, NULL };
	EXPECT_ERR(davinci_stream_submit_batch(s, none, 2, NULL), -EINVAL, "tasks[0] is NULL");
	EXPECT_ERR(davinci_stream_submit_batch(s, NULL, 2, NULL), -EINVAL, "tasks is NULL");
	CHECK(davinci_stream_submit_batch(s, NULL, 0, NULL));

	/* Events of another context. */
	davinci_context *other = NULL;
	davinci_event *ev = NULL;
	CHECK(davinci_context_create(dev, &other));
	CHECK(davinci_event_create(other, &ev));
	EXPECT_ERR(davinci_event_record(ev, s, NULL), -EINVAL, "events work within one context");

	/* Pools and export. */
	EXPECT_ERR(davinci_pool_create(dev, NULL, NULL), -EINVAL, "out");
	CHECK(davinci_pool_create(dev, NULL, &pool));
	davinci_buffer *block = NULL;
	CHECK(davinci_pool_alloc(pool, 100, &block));
	uint64_t token = 0;
	/* A block of a pool of 64-byte blocks is not whole pages: refused, saying the align. */
	EXPECT_ERR(davinci_buffer_export(block, DAVINCI_EXPORT_OWN_UID, 0, &token), -EINVAL,
		   "whole pages");
	CHECK(davinci_buffer_export(buf, DAVINCI_EXPORT_OWN_UID, 0, &token));
	EXPECT(token != 0);
	davinci_buffer *imported = NULL;
	EXPECT_ERR(davinci_device_import(dev, token, &imported), -EINVAL, "IMPORT_MEMORY");
	/* Export fds are the kernel module's; this device exports by token (and says so). */
	int efd = -1;
	EXPECT_ERR(davinci_buffer_export_fd(buf, DAVINCI_EXPORT_OWN_UID, 0, NULL), -EINVAL,
		   "fd (out-parameter) is NULL");
	if (davinci_buffer_export_fd(buf, DAVINCI_EXPORT_OWN_UID, 0, &efd) == 0) {
		/* A device with export fds: the fd is a descriptor of this process. */
		EXPECT(efd >= 0);
		close(efd);
	} else {
		EXPECT(strstr(davinci_last_error(), "no export fds") != NULL ||
		       strstr(davinci_last_error(), "exported already") != NULL);
	}
	EXPECT_ERR(davinci_device_import_fd(dev, -1, &imported), -EBADF, "not an open descriptor");
	EXPECT_ERR(davinci_device_import_fd(dev, 0x7ffffff, &imported), -EBADF,
		   "not an open descriptor");
	EXPECT_ERR(davinci_pool_alloc(pool, 0, &imported), -EINVAL, "0 bytes");

	/* The message is per thread and stays until the next failure. */
	CHECK(davinci_buffer_size(buf, &got));
	EXPECT(strstr(davinci_last_error(), "davinci_pool_alloc") != NULL);

	davinci_buffer_free(block);
	davinci_pool_destroy(pool);
	davinci_event_destroy(ev);
	davinci_context_destroy(other);
	davinci_stream_destroy(s);
	davinci_context_destroy(ctx);
	davinci_buffer_free(buf);
	davinci_buffer_free(small);
	davinci_device_destroy(dev);
	return finish("errors");
}
