"""Visible devices from Python (issue 44): a Ray worker gets ASCEND_VISIBLE_DEVICES, a
Kubernetes container DAVINCI_VISIBLE_DEVICES; davinci.device_count(), visible_devices(),
Device(index) and Device() follow them. Each case runs in a fresh interpreter with its own
environment, against a davinci-mockd with three devices."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Dict, Iterator

import pytest

from conftest import Mockd

PROBE = r"""
import json, davinci
out = {}
try:
    out["count"] = davinci.device_count()
    out["paths"] = davinci.visible_devices()
    out["ids"] = [davinci.Device(i).info["device_id"] for i in range(out["count"])]
except davinci.DavinciError as e:
    out["error"] = [davinci.errno_name(e.errno), e.message]
try:
    d = davinci.Device()
    out["default"] = [d.info["device_id"], d.source]
except davinci.DavinciError as e:
    out["default_error"] = [davinci.errno_name(e.errno), e.message]
try:
    davinci.Device(out.get("count", 0))
except davinci.DavinciError as e:
    out["past"] = davinci.errno_name(e.errno)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def three() -> Iterator[Mockd]:
    d = Mockd("--devices", "3", "--share-mode", "shared")
    yield d
    d.stop()


def see(env: Dict[str, str]) -> dict:
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DAVINCI_DEVICE", "DAVINCI_VISIBLE_DEVICES", "ASCEND_VISIBLE_DEVICES")
    }
    r = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_rays_list_restricts_and_renumbers(three: Mockd) -> None:
    v = see({"DAVINCI_DEVICE": three.path(0), "ASCEND_VISIBLE_DEVICES": "2,1"})
    assert v["count"] == 2 and v["ids"] == [2, 1], v
    assert v["paths"] == [three.path(2), three.path(1)], v
    assert v["default"] == [2, "visible"], v
    assert v["past"] == "ENODEV", v


def test_the_plugins_paths_need_no_davinci_device(three: Mockd) -> None:
    v = see({"DAVINCI_VISIBLE_DEVICES": three.path(1), "ASCEND_VISIBLE_DEVICES": "0"})
    assert v["ids"] == [1] and v["default"] == [1, "visible"], v


def test_without_a_list_every_device_beside_the_named_one(three: Mockd) -> None:
    v = see({"DAVINCI_DEVICE": three.path(1)})
    assert v["ids"] == [0, 1, 2], v
    assert v["default"] == [1, "DAVINCI_DEVICE"], v


def test_an_empty_list_sees_nothing_and_a_bad_one_says_which_entry(three: Mockd) -> None:
    v = see({"DAVINCI_DEVICE": three.path(0), "ASCEND_VISIBLE_DEVICES": ""})
    assert v["count"] == 0 and v["default_error"][0] == "ENODEV", v
    assert "is empty" in v["default_error"][1], v
    v = see({"DAVINCI_DEVICE": three.path(0), "DAVINCI_VISIBLE_DEVICES": "1,x"})
    assert v["error"][0] == "EINVAL" and '"x"' in v["error"][1], v


def test_an_index_must_be_an_int_of_zero_or_more() -> None:
    import davinci

    with pytest.raises(TypeError):
        davinci.Device(1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        davinci.Device(-1)
