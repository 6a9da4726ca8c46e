/* A timeline of a C program (issue 46): davinci_trace_start, work on two streams (a FILL,
 * an event recorded on one and waited for on the other, NOPs), davinci_trace_stop writing
 * Chrome trace-event JSON; the summary counts every task, nothing lost, the clock bound
 * small; the file names the tasks; and the misuses: start twice (-EBUSY), stop or drain with
 * no trace (-ENOENT), an unwritable path (its errno, the trace stopped anyway). */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

#include <unistd.h>

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *text;
	long n;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	text = calloc(1, (size_t)n + 1);
	if (text && fread(text, 1, (size_t)n, f) != (size_t)n) {
		free(text);
		text = NULL;
	}
	fclose(f);
	return text;
}

int main(int argc, char **argv)
{
	const char *path = device_arg(argc, argv);
	davinci_device *dev = NULL;
	davinci_context *ctx = NULL;
	davinci_stream *a = NULL, *b = NULL;
	davinci_buffer *buf = NULL;
	davinci_task *fill = NULL, *nop = NULL;
	davinci_event *ev = NULL;
	davinci_record *rec = NULL;
	davinci_trace_summary s;
	char file[64];
	char *json;
	int i;

	snprintf(file, sizeof file, "/tmp/davinci-capi-trace-%d.json", (int)getpid());
	CHECK(davinci_device_open(path, &dev));
	EXPECT_ERR(davinci_trace_stop(dev, file, &s), -ENOENT, "no trace is running");
	EXPECT_ERR(davinci_trace_drain(dev), -ENOENT, "no trace is running");
	CHECK(davinci_trace_start(dev));
	EXPECT_ERR(davinci_trace_start(dev), -EBUSY, "tracing already");

	CHECK(davinci_context_create(dev, &ctx));
	CHECK(davinci_stream_create(ctx, NULL, &a));
	CHECK(davinci_stream_create(ctx, NULL, &b));
	CHECK(davinci_buffer_alloc(dev, 1 << 20, &buf));
	struct davinci_region whole = {buf, 0, DAVINCI_WHOLE};
	CHECK(davinci_task_fill(whole, 0x5a5a5a5a, &fill));
	CHECK(davinci_task_nop(&nop));
	CHECK(davinci_event_create(ctx, &ev));
	CHECK(davinci_stream_submit(a, fill, NULL));
	CHECK(davinci_event_record(ev, a, &rec));
	CHECK(davinci_stream_wait_record(b, rec));
	for (i = 0; i < 10; i++)
		CHECK(davinci_stream_submit(b, nop, NULL));
	CHECK(davinci_stream_synchronize(a, TIMEOUT_NS));
	CHECK(davinci_stream_synchronize(b, TIMEOUT_NS));
	CHECK(davinci_trace_drain(dev));

	memset(&s, 0xff, sizeof s);
	CHECK(davinci_trace_stop(dev, file, &s));
	printf("trace: %" PRIu64 " tasks, %" PRIu64 " records, %" PRIu64 " host spans, %" PRIu64
	       " lost, %" PRIu64 " dropped, clock bound %" PRIu64 " ns\n",
	       s.tasks, s.records, s.host_spans, s.lost, s.dropped, s.clock_bound_ns);
	/* FILL, EVENT_RECORD, EVENT_WAIT and ten NOPs. */
	EXPECT(s.tasks == 13);
	EXPECT(s.records >= 4 && s.records <= 13);
	EXPECT(s.host_spans >= 13);
	EXPECT(s.lost == 0 && s.dropped == 0);
	EXPECT(s.clock_bound_ns < 1000000);
	json = slurp(file);
	EXPECT(json != NULL);
	if (json) {
		EXPECT(strstr(json, "\"traceEvents\"") != NULL);
		EXPECT(strstr(json, "\"FILL\"") != NULL);
		EXPECT(strstr(json, "\"EVENT_WAIT\"") != NULL);
		EXPECT(strstr(json, "\"clock_bound_ns\"") != NULL);
		free(json);
	}
	unlink(file);

	/* A path that cannot be written: its errno; the trace is stopped all the same. */
	CHECK(davinci_trace_start(dev));
	CHECK(davinci_stream_submit(b, nop, NULL));
	CHECK(davinci_stream_synchronize(b, TIMEOUT_NS));
	EXPECT_ERR(davinci_trace_stop(dev, "/nonexistent-dir/t.json", NULL), -ENOENT,
		   "/nonexistent-dir/t.json");
	EXPECT_ERR(davinci_trace_stop(dev, NULL, NULL), -ENOENT, "no trace is running");
	/* NULL path: stopped, nothing written. */
	CHECK(davinci_trace_start(dev));
	CHECK(davinci_trace_stop(dev, NULL, &s));
	EXPECT(s.tasks == 0);

	davinci_record_destroy(rec);
	davinci_event_destroy(ev);
	davinci_task_destroy(fill);
	davinci_task_destroy(nop);
	davinci_buffer_free(buf);
	davinci_stream_destroy(a);
	davinci_stream_destroy(b);
	davinci_context_destroy(ctx);
	davinci_device_destroy(dev);
	return finish("trace");
}
