//! Rows of a `--device` run (the kernel module's `/dev/davinciN` in the QEMU guest) that the
//! embedded rows do not have: round trips to a **sleeping** device, the path a client that
//! submits now and then takes (its publish finds NEED_WAKEUP armed and wakes the device:
//! NOTIFY on the kernel module).
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use davinci_shim::{task, Device};

use crate::measure::{Fail, LatencyRun, Window};
use crate::shim_rows::{latency_options, OrderCheck};

/// Longest a single round trip, or the wait for the device to fall asleep, may take.
const LIMIT: Duration = Duration::from_secs(10);

/// Round trips with one task in flight, each to a sleeping device: wait (spinning, with
/// `yield`) until the device has armed NEED_WAKEUP on the stream, then time submitting one
/// NOP and polling until its completion (checked: in order, status 0). Returns the samples,
/// the round trips made (warm-up included) and how many of them woke the device (doorbells
/// or NOTIFYs the shim issued).
///
/// # Errors
/// A shim error, a wrong completion, none within 10 s, or a device that never sleeps.
pub fn round_trip_asleep(dev: &Device, window: Window) -> Result<(LatencyRun, u64, u64), Fail> {
    let ctx = dev.create_context()?;
    let mut s = ctx.create_stream_with(latency_options(dev))?;
    let mut check = OrderCheck::default();
    let mut lat = LatencyRun::new(window);
    let mut submitted = 0u64;
    let mut woke = 0u64;
    loop {
        let until = Instant::now() + LIMIT;
        while !s.device_asleep() {
            if Instant::now() > until {
                return Err(Fail::Unavailable(format!(
                    "the device did not sleep within {LIMIT:?} (it never arms NEED_WAKEUP)"
                )));
            }
            std::thread::yield_now();
        }
        let before = s.stats().doorbells;
        let t0 = Instant::now();
        s.submit(&task::nop().with_user_data(submitted))?;
        submitted += 1;
        let mut spins = 0u32;
        while s.poll_each(|c| check.see(c)) == 0 {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(4096) && t0.elapsed() > LIMIT {
                return Err(Fail::Error(format!(
                    "round trip (asleep): no completion within {LIMIT:?}"
                )));
            }
            std::hint::spin_loop();
        }
        let done = lat.record_slow(t0);
        woke += s.stats().doorbells - before;
        check.result("round trip (asleep)")?;
        if done {
            break;
        }
    }
    s.synchronize(LIMIT)?;
    s.poll_each(|c| check.see(c));
    check.result("round trip (asleep)")?;
    if check.next != submitted {
        return Err(Fail::Error(format!(
            "round trip (asleep): {submitted} tasks submitted, {} completions seen",
            check.next
        )));
    }
    Ok((lat, submitted, woke))
}
