/* Events shared between clients from C (ABI 1.5, DAVINCI_FEAT_SHARED_EVENTS): an event's
 * export token, the same again for the same grant, another grant refused; its own client's
 * import refused (-EINVAL), a token that names nothing refused (-ENOENT) with the reason.
 * (The hand-off between two clients' streams runs in the conformance suite, which opens two
 * clients of one shared device.) */
#include "check.h"

int main(int argc, char **argv)
{
	const char *path = device_arg(argc, argv);
	davinci_device *dev = NULL;
	davinci_context *ctx = NULL;
	davinci_event *ev = NULL;
	davinci_imported_event *imp = NULL;
	davinci_device_props p;
	uint64_t token = 0, again = 0, value = 0;

	CHECK(davinci_device_open(path, &dev));
	CHECK(davinci_device_query_info(dev, &p));
	EXPECT(p.features & DAVINCI_FEAT_SHARED_EVENTS);
	CHECK(davinci_context_create(dev, &ctx));
	CHECK(davinci_event_create(ctx, &ev));
	CHECK(davinci_event_export(ev, DAVINCI_EXPORT_OWN_UID, 0, &token));
	EXPECT(token != 0);
	CHECK(davinci_event_export(ev, DAVINCI_EXPORT_OWN_UID, 0, &again));
	EXPECT(again == token);
	EXPECT_ERR(davinci_event_export(ev, 4242, 0, &again), -EBUSY, "exported already");
	EXPECT_ERR(davinci_event_import(ctx, token, &imp), -EINVAL, "this client");
	EXPECT_ERR(davinci_event_import(ctx, token ^ (1ull << 40), &imp), -ENOENT,
		   "no event export");
	EXPECT(imp == NULL);
	EXPECT_ERR(davinci_event_export(ev, DAVINCI_EXPORT_OWN_UID, 0, NULL), -EINVAL, "token");
	EXPECT_ERR(davinci_imported_event_value(NULL, &value), -EINVAL, "imp");
	davinci_imported_event_destroy(NULL);

	davinci_event_destroy(ev);
	davinci_context_destroy(ctx);
	davinci_device_destroy(dev);
	return finish("shared_events");
}
