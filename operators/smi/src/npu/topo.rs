//! `npu-smi info -t topo`: how every NPU reaches every other, and the CPUs near each, in
//! npu-smi's matrix (`"\t   "`, then `NPU%-8d` per column and `CPU Affinity`; each row
//! `NPU%-8d`, a `%-11s` cell per NPU and the CPU list; then the legend). The shape and the
//! legend are the real output's (tests/npu-smi-reference/topo.txt).
//!
//! The relation of two NPUs: `X` itself; two PCI devices (GET_IDENTITY's bus address) on the
//! same NUMA node `PHB` (through the CPU's host bridge), on different nodes `SYS`; anything
//! else `NA` (npu-smi's "Unknown relationship"): a davinci device on no bus reaches others
//! through host memory, which no npu-smi word names. davinci devices have no HCCS links.
//! A device's NUMA node is GET_IDENTITY's `numa_node`, node 0 when it has none (as npu-smi
//! reads a node of -1); the CPU affinity is that node's CPU list, read where npu-smi reads
//! it.
#![forbid(unsafe_code)]

use super::*;

/// The legend npu-smi prints under the matrix (910B's, as sampled).
pub(super) const LEGEND: &str = "\
Legend:

  X    = Self
  SYS  = Path traversing PCIe and NUMA nodes. Nodes are connected through SMP, such as QPI, UPI.
  PHB  = Path traversing PCIe and the PCIe host bridge of a CPU.
  PIX  = Path traversing a single PCIe switch
  PXB  = Path traversing multiple PCIe switches
  HCCS = Connection traversing HCCS.
  NA   = Unknown relationship.
";

/// Where an NPU sits: its id, its NUMA node (`None`: unknown) and whether it is on a bus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Place {
    pub(super) id: u32,
    pub(super) numa: Option<i32>,
    pub(super) on_bus: bool,
}

/// The CPU list of NUMA node `node` (`/sys/devices/system/node/nodeN/cpulist`, where
/// npu-smi reads it); without NUMA in sysfs, every online CPU is near.
pub(super) fn node_cpus(node: i32) -> Option<String> {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    };
    read(&format!("/sys/devices/system/node/node{node}/cpulist"))
        .or_else(|| read("/sys/devices/system/cpu/online"))
}

/// `info -t topo`: the matrix of every answering NPU.
pub(super) fn topo(targets: &[Target], cpus: &dyn Fn(i32) -> Option<String>) -> Out {
    let (asked, err, code) = ask_all(targets, false);
    let places: Vec<Place> = targets
        .iter()
        .zip(&asked)
        .filter_map(|(t, r)| {
            let n = r.as_ref().ok()?;
            let id = t
                .dev
                .as_ref()
                .ok()
                .filter(|_| n.info.features.contains(davinci_uapi::Features::IDENTITY))
                .and_then(|d| d.identity().ok().flatten());
            Some(Place {
                id: n.id,
                numa: id.map(|i| i.numa_node).filter(|&n| n >= 0),
                on_bus: n.extras.bus_id.as_deref().is_some_and(|b| !b.is_empty()),
            })
        })
        .collect();
    Out {
        out: matrix(&places, cpus),
        err,
        code,
    }
}

/// How `a` reaches `b` (see the module's doc).
pub(super) fn relation(a: &Place, b: &Place) -> &'static str {
    if a.id == b.id {
        return "X";
    }
    match (
        a.on_bus && b.on_bus,
        a.numa.unwrap_or(0) == b.numa.unwrap_or(0),
    ) {
        (true, true) => "PHB",
        (true, false) => "SYS",
        (false, _) => NA,
    }
}

/// The matrix and legend for `places`, with `cpus` giving a node's CPU list.
pub(super) fn matrix(places: &[Place], cpus: &dyn Fn(i32) -> Option<String>) -> String {
    let mut out = String::from("\t   ");
    for p in places {
        out += &format!("NPU{:<8}", p.id);
    }
    out += "CPU Affinity\n";
    for a in places {
        out += &format!("NPU{:<8}", a.id);
        for b in places {
            out += &format!("{:<11}", relation(a, b));
        }
        let affinity = cpus(a.numa.unwrap_or(0)).unwrap_or_else(|| NA.into());
        out += &crate::output::printable(&affinity);
        out.push('\n');
    }
    out.push('\n');
    out += LEGEND;
    out
}
