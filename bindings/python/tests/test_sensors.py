"""Device.sensors() (GET_SENSORS, ABI 1.5): the software device's sensor model (docs/abi.md,
"Sensors"), on the embedded device and on davinci-mockd; davinci-mockd --sensors sets its
parameters, and a hot enough device reports a thermal throttle."""

from __future__ import annotations

import time

import davinci

from conftest import Mockd

KEYS = {
    "temperature_c",
    "memory_temperature_c",
    "power_w",
    "power_limit_w",
    "voltage_v",
    "energy_j",
    "slowdown_c",
    "shutdown_c",
    "throttle",
}


def test_sensors_report_the_default_model(spec: str) -> None:
    with davinci.Device(spec) as dev:
        s = dev.sensors()
        assert set(s) == KEYS
        assert 39.0 <= s["temperature_c"] <= 75.0
        assert 60.0 <= s["power_w"] <= 300.0
        assert (s["power_limit_w"], s["slowdown_c"], s["shutdown_c"]) == (310.0, 95.0, 105.0)
        assert s["throttle"] == []
        time.sleep(0.25)
        t = dev.sensors()
        # At least idle power (60 W) over the 0.25 s, less the 100 ms step.
        assert t["energy_j"] >= s["energy_j"] + 60 * 0.15 - 0.01


def test_mockd_sensor_options_and_a_thermal_throttle() -> None:
    d = Mockd("--sensors", "ambient=90,idle-power=50,thermal-resistance=0.2")
    try:
        with davinci.Device(d.path(0)) as dev:
            s = dev.sensors()
            # 90 °C + 0.2 °C/W × 50 W = 100 °C, above the 95 °C slowdown.
            assert (s["temperature_c"], s["power_w"]) == (100.0, 50.0)
            assert s["memory_temperature_c"] == 98.0
            assert s["throttle"] == ["thermal"]
    finally:
        d.stop()
