//! The device's sensors (issue 45, ABI 1.5 `DAVINCI_FEAT_SENSORS`), on every backend: every
//! software device reports the model docs/abi.md ("Sensors") describes, with its default
//! parameters: readings within the idle and busy steady states, the memory temperature and
//! voltage derived as documented, energy that grows at least at the idle power, and power and
//! temperature above idle once the engines worked.

use std::time::{Duration, Instant};

use davinci_shim::{task, DeviceSensors, Features};
use davinci_tests::{control_of, open_default};

const T: Duration = Duration::from_secs(60);

/// The documented defaults (docs/abi.md, "Sensors").
const AMBIENT_MC: i64 = 30_000;
const IDLE_MW: u32 = 60_000;
const FULL_MW: u32 = 300_000;
const IDLE_TEMP_MC: i32 = 39_000;
const FULL_TEMP_MC: i32 = 75_000;

/// What holds for every reading of the default model.
fn check_reading(s: &DeviceSensors) {
    assert!((IDLE_MW..=FULL_MW).contains(&s.power_mw), "{s:?}");
    assert!(
        (IDLE_TEMP_MC..=FULL_TEMP_MC).contains(&s.temperature_mc),
        "{s:?}"
    );
    let rise = i64::from(s.temperature_mc) - AMBIENT_MC;
    assert_eq!(
        i64::from(s.memory_temperature_mc),
        AMBIENT_MC + rise * 4 / 5,
        "{s:?}"
    );
    assert!((800..=900).contains(&s.voltage_mv), "{s:?}");
    // Power and voltage come from the same load: (P − idle) / 240 W = (V − 0.8) / 0.1 V.
    let from_power = i64::from(s.power_mw - IDLE_MW) * 100 / 240_000;
    assert!(
        (from_power - i64::from(s.voltage_mv - 800)).abs() <= 1,
        "{s:?}"
    );
    assert_eq!((s.power_limit_mw, s.throttle), (310_000, 0), "{s:?}");
    assert_eq!(
        (s.slowdown_temperature_mc, s.shutdown_temperature_mc),
        (95_000, 105_000)
    );
}

#[test]
fn the_sensors_follow_the_documented_model() {
    let dev = open_default().expect("open the test device");
    let ctl = control_of(&dev).expect("control open");
    let info = ctl.info().unwrap();
    assert!(info.features.contains(Features::SENSORS), "{info:?}");
    let id = ctl.identity().unwrap();
    assert!(!id.chip_name().is_empty(), "{id:?}");
    for name in [id.model(), id.chip_name()] {
        assert!(
            name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
            "default names are one word: {name:?}"
        );
    }

    let first = ctl.sensors().expect("GET_SENSORS");
    check_reading(&first);
    std::thread::sleep(Duration::from_millis(250));
    let idle = ctl.sensors().unwrap();
    check_reading(&idle);
    assert!(idle.now_ns > first.now_ns);
    // At least the idle power over the time between (less one step of 100 ms, which a
    // reading closer than that to the last step does not take).
    let dt = (idle.now_ns - first.now_ns).saturating_sub(100_000_000);
    let at_least = u64::from(IDLE_MW) * dt / 1_000_000_000;
    assert!(
        idle.energy_mj >= first.energy_mj + at_least,
        "{first:?} -> {idle:?}"
    );

    // Keep the engines busy for a while: the step over it draws more than idle power and
    // warms the die above the idle steady state.
    let ctx = dev.create_context().unwrap();
    let mut s = ctx.create_stream().unwrap();
    let b = dev.alloc(4 << 20).unwrap();
    let before = ctl.sensors().unwrap();
    let start = Instant::now();
    let mut n = 0u32;
    while start.elapsed() < Duration::from_millis(400) {
        for _ in 0..16 {
            s.submit(&task::fill(&b, n).unwrap()).unwrap();
            n = n.wrapping_add(1);
        }
        s.synchronize(T).unwrap();
    }
    let busy = ctl.sensors().unwrap();
    check_reading(&busy);
    assert!(busy.power_mw > IDLE_MW, "{before:?} -> {busy:?}");
    assert!(busy.voltage_mv > 800, "{busy:?}");
    assert!(busy.temperature_mc > IDLE_TEMP_MC, "{before:?} -> {busy:?}");
    assert!(busy.energy_mj > before.energy_mj, "{before:?} -> {busy:?}");
}
