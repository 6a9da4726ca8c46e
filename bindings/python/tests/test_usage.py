"""Device.usage() (GET_USAGE, ABI 1.5): this open's own usage against each of its limits,
tracking creates and frees; a quota refusal's text carries the numbers it reports. On the
embedded device and on davinci-mockd (a shared daemon with small quotas of its own)."""

from __future__ import annotations

import pytest

import davinci

from conftest import Mockd

KINDS = ("memory", "allocations", "contexts", "streams", "events", "exports")


def test_usage_tracks_creates_and_frees(spec: str) -> None:
    with davinci.Device(spec) as dev:
        u = dev.usage()
        assert set(KINDS) <= set(u)
        info = dev.query_info()
        assert u["memory"][1] == info["client_memory_limit"]
        assert 1 <= u["contexts"][1] <= info["max_contexts"]
        assert 1 <= u["allocations"][1] <= info["max_allocations"]
        assert u["client_id"] == dev.client_id
        assert u["share_mode"] in ("exclusive", "shared")
        ctx = dev.create_context()
        buf = dev.alloc(3 * 4096)
        v = dev.usage()
        assert v["contexts"][0] == u["contexts"][0] + 1
        assert v["allocations"][0] == u["allocations"][0] + 1
        assert v["memory"][0] == u["memory"][0] + 3 * 4096
        buf.close()
        ctx.close()
        w = dev.usage()
        assert (w["contexts"][0], w["allocations"][0], w["memory"][0]) == (
            u["contexts"][0],
            u["allocations"][0],
            u["memory"][0],
        )


def test_a_quota_refusal_says_the_numbers_usage_reports() -> None:
    d = Mockd("--share-mode", "shared", "--tenant-quota", "streams=3,exports=2")
    try:
        with davinci.Device(d.path(0)) as dev:
            u = dev.usage()
            assert (u["streams"], u["exports"], u["share_mode"]) == ((0, 3), (0, 2), "shared")
            ctx = dev.create_context()
            streams = [ctx.create_stream() for _ in range(3)]
            assert dev.usage()["streams"] == (3, 3)
            with pytest.raises(davinci.DeviceMemoryError) as e:
                ctx.create_stream()
            text = str(e.value)
            for part in ("asked 1", "holds 3, quota 3", "--tenant-quota streams=N"):
                assert part in text, text
            # Past the memory limit: ENOMEM with the bytes.
            held, limit = dev.usage()["memory"]
            with pytest.raises(davinci.DeviceMemoryError) as e:
                dev.alloc(limit - held + 4096)
            assert f"holds {held}, limit {limit}" in str(e.value), str(e.value)
            for s in streams:
                s.close()
            assert dev.usage()["streams"] == (0, 3)
    finally:
        d.stop()
