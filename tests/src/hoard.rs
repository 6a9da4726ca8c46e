//! Taking everything a tenant may hold: what `davinci-attacker hoard` does as another
//! process and what the hoarders conformance test does in process (docs/security.md,
//! "Tenants"), written once.
#![forbid(unsafe_code)]

use davinci_shim::{
    Context, Device, DeviceBuffer, Errno, Event, ExportTo, ExportToken, Stream, StreamOptions,
};

/// Everything one hoarder took, kept while it lives.
pub struct Hoard {
    /// The opens it took objects through (the first one's usage is the tenant's).
    pub devs: Vec<Device>,
    /// Allocations, each `chunk` bytes.
    pub bufs: Vec<DeviceBuffer>,
    /// The allocations' exports.
    pub exports: Vec<ExportToken>,
    /// Contexts, round robin over the opens.
    pub contexts: Vec<Context>,
    /// Streams, round robin over the contexts.
    pub streams: Vec<Stream>,
    /// Events, round robin over the contexts.
    pub events: Vec<Event>,
    /// Bytes of each allocation.
    pub chunk: u64,
}

/// Whether `e` is a bound's refusal (a quota, a full table, the memory limit).
pub fn refused(e: &davinci_shim::Error) -> bool {
    matches!(e.errno(), Some(Errno::ENOSPC | Errno::ENOMEM))
}

/// Takes objects (`take(i)`, `None`: nothing left to take one from) until a bound refuses
/// one. `Err` names any other failure, or 65,536 taken and none refused.
pub fn until_refused<T>(
    what: &str,
    mut take: impl FnMut(usize) -> Option<davinci_shim::Result<T>>,
) -> Result<Vec<T>, String> {
    let mut got = Vec::new();
    loop {
        match take(got.len()) {
            None => return Ok(got),
            Some(Ok(t)) => got.push(t),
            Some(Err(e)) if refused(&e) => return Ok(got),
            Some(Err(e)) => return Err(format!("{what} {}: {e}", got.len())),
        }
        if got.len() > 1 << 16 {
            return Err(format!("65536 {what} and none refused"));
        }
    }
}

/// Takes, through `devs` (one tenant's opens, at least one), memory and allocations until
/// refused (chunks sized so both run out together), an export of each allocation, then
/// contexts, streams and events until refused.
pub fn take_everything(devs: Vec<Device>) -> Result<Hoard, String> {
    let first = devs.first().ok_or("no open to hoard through")?;
    let u = first.usage().map_err(|e| format!("GET_USAGE: {e}"))?;
    let align = u64::from(first.info().mem_align.max(4096));
    // The tenant's memory and allocations run out together.
    let chunk = (u.memory.limit / u64::from(u.allocations.limit.max(1)) / align * align).max(align);
    let n = devs.len();
    let bufs = until_refused("allocations", |i| Some(devs[i % n].alloc(chunk as usize)))?;
    let exports = until_refused("exports", |i| {
        bufs.get(i).map(|b| b.export(ExportTo::SameUser))
    })?;
    let contexts = until_refused("contexts", |i| Some(devs[i % n].create_context()))?;
    let c = contexts.len().max(1);
    let streams = until_refused("streams", |i| {
        contexts
            .get(i % c)
            .map(|x| x.create_stream_with(StreamOptions::depths(8, 8)))
    })?;
    let events = until_refused("events", |i| contexts.get(i % c).map(|x| x.create_event()))?;
    Ok(Hoard {
        devs,
        bufs,
        exports,
        contexts,
        streams,
        events,
        chunk,
    })
}
