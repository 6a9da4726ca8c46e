/* Visible devices from C (issue 44): DAVINCI_VISIBLE_DEVICES, else ASCEND_VISIBLE_DEVICES,
 * restrict and renumber the devices a process sees (cudaGetDeviceCount / cudaSetDevice):
 * davinci_device_count, davinci_device_open_index, and davinci_device_open(NULL) opening the
 * list's first. The test sets the variables itself (one thread) around the device it is
 * given: as a path entry (the device plugin's form) and as index 0 beside it through
 * DAVINCI_DEVICE (Ray's form); an empty list sees nothing, a malformed one is refused by
 * entry. */
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv */
#include "check.h"

static void visible(const char *davinci, const char *ascend)
{
	if (davinci)
		setenv("DAVINCI_VISIBLE_DEVICES", davinci, 1);
	else
		unsetenv("DAVINCI_VISIBLE_DEVICES");
	if (ascend)
		setenv("ASCEND_VISIBLE_DEVICES", ascend, 1);
	else
		unsetenv("ASCEND_VISIBLE_DEVICES");
}

int main(int argc, char **argv)
{
	const char *path = device_arg(argc, argv);
	davinci_device *dev = NULL;
	davinci_device_props p;
	uint32_t n = 99, source = 0;
	char buf[512];

	/* The device plugin's form: the device's own path. */
	unsetenv("DAVINCI_DEVICE");
	visible(path, "7,8");
	CHECK(davinci_device_count(&n));
	EXPECT(n == 1);
	CHECK(davinci_device_open_index(0, &dev));
	CHECK(davinci_device_query_info(dev, &p));
	davinci_device_destroy(dev);
	dev = NULL;
	EXPECT_ERR(davinci_device_open_index(1, &dev), -ENODEV, "1 visible");
	EXPECT(davinci_default_device(buf, sizeof buf, &source) == (int)strlen(path));
	EXPECT(strcmp(buf, path) == 0 && source == DAVINCI_DEVICE_FROM_VISIBLE);
	CHECK(davinci_device_open(NULL, &dev));
	davinci_device_destroy(dev);
	dev = NULL;

	/* Ray's form: an index, found beside DAVINCI_DEVICE (the embedded place has device 0
	 * only; a mock socket or a kernel node davinci0 has it as index 0). */
	setenv("DAVINCI_DEVICE", path, 1);
	visible(NULL, "0");
	CHECK(davinci_device_count(&n));
	EXPECT(n == 1);
	if (strcmp(path, "embedded") == 0 || strstr(path, "davinci0")) {
		CHECK(davinci_device_open_index(0, &dev));
		davinci_device_destroy(dev);
		dev = NULL;
	}

	/* Empty: nothing visible, and the default open says why. */
	visible("", "0");
	CHECK(davinci_device_count(&n));
	EXPECT(n == 0);
	EXPECT_ERR(davinci_device_open(NULL, &dev), -ENODEV, "DAVINCI_VISIBLE_DEVICES is empty");
	EXPECT_ERR(davinci_device_open_index(0, &dev), -ENODEV, "0 visible");

	/* Malformed: refused, naming the entry. */
	visible("0,npu1", NULL);
	EXPECT_ERR(davinci_device_count(&n), -EINVAL, "\"npu1\"");
	EXPECT_ERR(davinci_device_open(NULL, &dev), -EINVAL, "\"npu1\"");
	visible(NULL, "0,0");
	EXPECT_ERR(davinci_device_count(&n), -EINVAL, "twice");
	EXPECT_ERR(davinci_device_count(NULL), -EINVAL, "count");

	visible(NULL, NULL);
	return finish("visible");
}
