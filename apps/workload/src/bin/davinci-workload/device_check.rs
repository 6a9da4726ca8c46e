//! The device check of `davinci-workload`: what a run needs (streams, events, memory,
//! allocations) against what the opened device has, refused before the run with what to
//! change.
#![forbid(unsafe_code)]

use davinci_shim::Device;
use davinci_units::mib_text as mib;
use davinci_workload::run::WorkloadConfig;

use crate::cli::MIB;
use crate::failure::Failure;

/// What the run needs against what the opened device has: streams, events, memory and
/// allocations.
pub(crate) fn check_device(
    cfg: &WorkloadConfig,
    dev: &Device,
    embedded_mib: Option<u64>,
) -> Result<(), Failure> {
    let info = dev.info();
    let streams_needed = cfg.streams_needed();
    if streams_needed > u64::from(info.max_streams) {
        let room = u64::from(info.max_streams).saturating_sub(streams_needed - cfg.streams as u64);
        return Err(Failure::usage(format!(
            "--streams {} is more than the device allows: it has at most {} streams{}; use \
             --streams {room} or fewer",
            cfg.streams,
            info.max_streams,
            if cfg.latency_samples > 0 {
                " and the latency phase uses one more"
            } else {
                ""
            }
        )));
    }
    if cfg.streams as u64 > u64::from(info.max_events) {
        return Err(Failure::usage(format!(
            "--streams {} is more than the device allows: each stream needs an event and it has \
             at most {} events; use --streams {} or fewer",
            cfg.streams, info.max_events, info.max_events
        )));
    }
    let Some(need) = cfg.memory_needed(u64::from(info.mem_align)) else {
        return Err(Failure::usage(format!(
            "--streams {} x --slots {} x --elements {}: the buffers' total size overflows; use \
             smaller values",
            cfg.streams, cfg.slots, cfg.elements
        )));
    };
    let what = format!(
        "this workload needs {} of device memory: {} buffers of {} bytes ({} streams x (5 x {} \
         slots + 1), {} elements each) in {} allocation{} of {}",
        mib(need.device_bytes),
        need.buffers,
        need.buffer_bytes,
        cfg.streams,
        cfg.slots,
        cfg.elements,
        need.allocations,
        if need.allocations == 1 { "" } else { "s" },
        mib(need.allocation_bytes)
    );
    if need.allocations > u64::from(info.max_allocations) {
        return Err(Failure::usage(format!(
            "{what}, but the device allows at most {} allocations; use fewer --streams or \
             --slots, or fewer --elements (buffers of up to 4 MiB share allocations)",
            info.max_allocations
        )));
    }
    match embedded_mib {
        Some(m) => {
            if need.device_bytes > info.memory_size {
                return Err(Failure::usage(format!(
                    "--memory-mib {m} is too small: {what}; use --memory-mib {} or more, or \
                     fewer --streams, --slots or --elements",
                    need.device_bytes.div_ceil(MIB)
                )));
            }
        }
        None => {
            let now = dev.query_info().unwrap_or(*info);
            let free = now.memory_size.saturating_sub(now.memory_used);
            let available = free.min(now.client_memory_limit);
            if need.device_bytes > available {
                return Err(Failure::usage(format!(
                    "{what}, but the device has {} free ({} in all, {} in use, at most {} per \
                     client); use fewer --streams, --slots or --elements",
                    mib(free),
                    mib(now.memory_size),
                    mib(now.memory_used),
                    mib(now.client_memory_limit)
                )));
            }
        }
    }
    Ok(())
}
