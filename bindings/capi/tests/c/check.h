/*
 * The C tests' few helpers: CHECK(call) must succeed, EXPECT_ERR(call, -E, "text") must fail
 * with that errno and a davinci_last_error() containing the text. Each failure is printed
 * with its line and counted; a test program exits 1 if any check failed. Every test takes
 * the device as argv[1] (default "embedded").
 */
#ifndef DAVINCI_CAPI_TEST_CHECK_H
#define DAVINCI_CAPI_TEST_CHECK_H

#include <davinci/runtime.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
static int checks;

#define TIMEOUT_NS (10ull * 1000 * 1000 * 1000)

#define FAIL(...)                                                                          \
	do {                                                                               \
		fprintf(stderr, "%s:%d: FAIL: ", __FILE__, __LINE__);                      \
		fprintf(stderr, __VA_ARGS__);                                              \
		fprintf(stderr, "\n");                                                     \
		failures++;                                                                \
	} while (0)

#define EXPECT(cond)                                                                       \
	do {                                                                               \
		checks++;                                                                  \
		if (!(cond))                                                               \
			FAIL("%s", #cond);                                                 \
	} while (0)

#define CHECK(call)                                                                        \
	do {                                                                               \
		checks++;                                                                  \
		int rc_ = (call);                                                          \
		if (rc_ < 0) {                                                             \
			FAIL("%s = %d: %s", #call, rc_, davinci_last_error());             \
			exit(1);                                                           \
		}                                                                          \
	} while (0)

#define EXPECT_ERR(call, want, text)                                                       \
	do {                                                                               \
		checks++;                                                                  \
		int rc_ = (call);                                                          \
		const char *msg_ = davinci_last_error();                                   \
		if (rc_ != (want))                                                         \
			FAIL("%s = %d, want %d (%s)", #call, rc_, (want), msg_);           \
		else if (!strstr(msg_, (text)))                                            \
			FAIL("%s: message \"%s\" lacks \"%s\"", #call, msg_, (text));      \
	} while (0)

static const char *device_arg(int argc, char **argv)
{
	return argc > 1 ? argv[1] : "embedded";
}

static int finish(const char *name)
{
	if (failures) {
		fprintf(stderr, "%s: %d of %d checks failed\n", name, failures, checks);
		return 1;
	}
	printf("%s: %d checks passed\n", name, checks);
	return 0;
}

#endif
