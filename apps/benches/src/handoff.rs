//! The hand-off between two clients' streams by device-side event waits (issue 44, ABI 1.5
//! shared events): client A's stream records its exported event, client B's stream (waiting
//! for it on an import) records its own exported event back, and A's stream, waiting for
//! that on its import, completes a NOP the host sees in A's event ring. A round trip is two
//! hand-offs between the streams, with no host call between them; the host only submits
//! and polls its own ring. Through `davinci-mockd`, two clients of one device.
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use davinci_shim::{task, Device, ExportTo};

use crate::measure::{Fail, LatencyRun, Window};

const ROUND_TIMEOUT: Duration = Duration::from_secs(10);

fn shim_err(what: &'static str) -> impl Fn(davinci_shim::Error) -> Fail {
    move |e| Fail::Error(format!("hand-off: {what}: {e}"))
}

/// Round trips A → B → A (two hand-offs each) over `window`, timed from A's submit to A's
/// host seeing the completion that follows B's record.
///
/// # Errors
/// A shim error, a round that does not complete within 10 s, or a failed completion.
pub fn ping_pong(a: &Device, b: &Device, window: Window) -> Result<LatencyRun, Fail> {
    let (actx, bctx) = (
        a.create_context().map_err(shim_err("context"))?,
        b.create_context().map_err(shim_err("context"))?,
    );
    let (ea, eb) = (
        actx.create_event().map_err(shim_err("event"))?,
        bctx.create_event().map_err(shim_err("event"))?,
    );
    let ea_in_b = bctx
        .import_event(ea.export(ExportTo::SameUser).map_err(shim_err("export"))?)
        .map_err(shim_err("import"))?;
    let eb_in_a = actx
        .import_event(eb.export(ExportTo::SameUser).map_err(shim_err("export"))?)
        .map_err(shim_err("import"))?;
    let mut sa = actx.create_stream().map_err(shim_err("stream"))?;
    let mut sb = bctx.create_stream().map_err(shim_err("stream"))?;
    let mut lat = LatencyRun::new(window);
    let mut done = Vec::new();
    for round in 1u64.. {
        // B is ready first: its stream waits for A's record of `round`, then records back.
        sb.wait_imported(&ea_in_b, round)
            .map_err(shim_err("B waits"))?;
        let back = eb.record(&mut sb).map_err(shim_err("B records"))?;
        let t0 = Instant::now();
        let sent = ea.record(&mut sa).map_err(shim_err("A records"))?;
        if (sent.value(), back.value()) != (round, round) {
            return Err(Fail::Error(format!(
                "hand-off: round {round} recorded values {} and {}",
                sent.value(),
                back.value()
            )));
        }
        sa.wait_imported(&eb_in_a, round)
            .map_err(shim_err("A waits"))?;
        sa.submit(&task::nop().with_user_data(round))
            .map_err(shim_err("A's NOP"))?;
        // A's record, its wait and its NOP complete: the NOP is the round's end.
        let mut seen = 0;
        while seen < 3 {
            done.clear();
            seen += sa.poll(&mut done);
            if let Some(c) = done.iter().find(|c| !c.is_ok()) {
                return Err(Fail::Error(format!(
                    "hand-off: A's completion failed: {c:?}"
                )));
            }
            if t0.elapsed() > ROUND_TIMEOUT {
                return Err(Fail::Error(format!(
                    "hand-off: round {round} did not complete within {ROUND_TIMEOUT:?}"
                )));
            }
        }
        let finished = lat.record(t0);
        // B's wait and record completed before A's wait could end: reap them.
        done.clear();
        let mut reaped = 0;
        while reaped < 2 {
            done.clear();
            reaped += sb.poll(&mut done);
            if let Some(c) = done.iter().find(|c| !c.is_ok()) {
                return Err(Fail::Error(format!(
                    "hand-off: B's completion failed: {c:?}"
                )));
            }
            if t0.elapsed() > ROUND_TIMEOUT {
                return Err(Fail::Error("hand-off: B's completions did not come".into()));
            }
        }
        if finished {
            break;
        }
    }
    Ok(lat)
}
