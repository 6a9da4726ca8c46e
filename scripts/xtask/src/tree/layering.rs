//! Which crate may depend on which: the layers of docs/architecture.md as data, checked
//! against `cargo metadata` with cargo's own feature rules (optional dependencies, `dep:`
//! and `crate/feature` entries, default features), so "the shim without `embedded`" means
//! what cargo builds, not what a grep of `cargo tree` happens to print.
//!
//! The rules:
//! 1. every member has a layer, and every normal or build dependency between members points
//!    to a lower layer (test-only packages at the top may use anything below them);
//! 2. the device side (the ABI, rings, the device core, the mock device, the daemon) never
//!    reaches the runtime library or anything above it;
//! 3. the shim without default features links no device code and no daemon; with every
//!    feature it still links neither the daemon nor its logging;
//! 4. the operators' tools link no device code;
//! 5. no binary package is a library for another, except for the test-only packages;
//! 6. the folders are floors too (README's "The tree"): every member stands in a folder of
//!    [`FOLDERS`], and a normal or build dependency between members of two folders points to a
//!    lower floor, so a folder never reaches up to one above it.

use std::collections::{BTreeMap, BTreeSet};

use super::metadata::{Package, Workspace};
use super::Finding;

/// The layers, lowest first. A crate may depend only on crates of lower layers.
pub const LAYERS: &[&[&str]] = &[
    &["davinci-uapi", "davinci-units", "davinci-kernels"],
    &[
        "davinci-ring",
        "davinci-shm",
        "davinci-mockd-proto",
        "davinci-hwif",
    ],
    &["davinci-driver-core"],
    &["davinci-mock-device", "davinci-ivshmem"],
    &[
        "davinci-mockd",
        "davinci-shim",
        "davinci-preload",
        "davinci-pcidev",
    ],
    &["davinci-ccl"],
    &[
        "davinci-ops",
        "davinci-workload",
        "davinci-benches",
        "davinci-capi",
        "davinci-python",
    ],
    &["davinci-smi", "davinci-exporter", "davinci-device-plugin"],
    &["davinci-tests", "davinci-fuzz-harness", "xtask"],
];

/// The folders at the root, lowest floor first: a member's folder is the first part of its
/// directory (`core` for `core/ring`, `shim` for `shim`).
pub const FOLDERS: &[&[&str]] = &[
    &["uapi"],
    &["core"],
    &["mock-device"],
    &["hosts"],
    &["shim"],
    &["ccl"],
    &["bindings", "operators", "apps"],
    &["tests", "fuzz", "scripts"],
];

fn folder_of(dir: &str) -> &str {
    dir.split('/').next().unwrap_or(dir)
}

fn floor_of(folder: &str) -> Option<usize> {
    FOLDERS.iter().position(|f| f.contains(&folder))
}

/// Packages only tests and developers use (the top layer): they may depend on binary packages,
/// to run their code.
pub const TEST_ONLY: &[&str] = &["davinci-tests", "davinci-fuzz-harness", "xtask"];

/// The device side: never reaches the runtime library.
pub const DEVICE_SIDE: &[&str] = &[
    "davinci-uapi",
    "davinci-ring",
    "davinci-shm",
    "davinci-mockd-proto",
    "davinci-driver-core",
    "davinci-mock-device",
    "davinci-ivshmem",
    "davinci-mockd",
    "davinci-hwif",
    "davinci-pcidev",
];

/// What the runtime library without default features must not link.
pub const SHIM_BARE_FORBIDS: &[&str] = &[
    "davinci-mock-device",
    "davinci-driver-core",
    "davinci-mockd",
    "tracing-subscriber",
];

/// What the runtime library must not link whatever its features.
pub const SHIM_FULL_FORBIDS: &[&str] = &["davinci-mockd", "tracing-subscriber"];

/// The operators' tools and their library.
pub const OPERATOR_TOOLS: &[&str] = &[
    "davinci-ops",
    "davinci-smi",
    "davinci-exporter",
    "davinci-device-plugin",
];

/// What an operators' tool must not link.
pub const OPERATOR_FORBIDS: &[&str] = &[
    "davinci-mock-device",
    "davinci-driver-core",
    "davinci-mockd",
];

fn layer_of(name: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&name))
}

/// Every package (members and external crates by name) that building `root` with `features`
/// (and its default features when `default`) links through normal and build dependencies.
pub fn reach(ws: &Workspace, root: &str, features: &[&str], default: bool) -> BTreeSet<String> {
    // Per member: the features enabled so far, and whether its defaults are on.
    let mut enabled: BTreeMap<String, (BTreeSet<String>, bool)> = BTreeMap::new();
    let mut out = BTreeSet::new();
    let mut work = vec![(
        root.to_string(),
        features
            .iter()
            .map(|f| f.to_string())
            .collect::<BTreeSet<_>>(),
        default,
    )];
    while let Some((name, feats, def)) = work.pop() {
        out.insert(name.clone());
        let Some(pkg) = ws.member(&name) else {
            continue;
        };
        let first = !enabled.contains_key(&name);
        let entry = enabled.entry(name.clone()).or_default();
        let before = entry.clone();
        entry.0.extend(feats);
        entry.1 |= def;
        if !first && *entry == before {
            continue;
        }
        let (active, dep_feats) = activate(pkg, &entry.0, entry.1);
        for d in pkg.deps.iter().filter(|d| d.kind != "dev") {
            if d.optional && !active.contains(&d.name) {
                continue;
            }
            let mut f: BTreeSet<String> = d.features.iter().cloned().collect();
            if let Some(extra) = dep_feats.get(&d.name) {
                f.extend(extra.iter().cloned());
            }
            work.push((d.name.clone(), f, d.default_features));
        }
    }
    out.remove(root);
    out
}

/// The closure of a package's enabled features: which optional dependencies they turn on, and
/// which features of dependencies they ask for.
fn activate(
    pkg: &Package,
    requested: &BTreeSet<String>,
    default: bool,
) -> (BTreeSet<String>, BTreeMap<String, BTreeSet<String>>) {
    let mut todo: Vec<String> = requested.iter().cloned().collect();
    if default && pkg.features.contains_key("default") {
        todo.push("default".into());
    }
    let mut seen = BTreeSet::new();
    let mut active = BTreeSet::new();
    let mut dep_feats: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    while let Some(f) = todo.pop() {
        if !seen.insert(f.clone()) {
            continue;
        }
        if let Some(dep) = f.strip_prefix("dep:") {
            active.insert(dep.to_string());
        } else if let Some((dep, feat)) = f.split_once('/') {
            let weak = dep.ends_with('?');
            let dep = dep.trim_end_matches('?');
            if !weak {
                active.insert(dep.to_string());
            }
            dep_feats.entry(dep.into()).or_default().insert(feat.into());
        } else if let Some(list) = pkg.features.get(&f) {
            todo.extend(list.iter().cloned());
        } else if pkg.deps.iter().any(|d| d.optional && d.name == f) {
            // An optional dependency used as a feature of its own name.
            active.insert(f);
        }
    }
    (active, dep_feats)
}

/// Every rule above, over `ws`; an empty list when the tree keeps them.
pub fn check(ws: &Workspace) -> Vec<Finding> {
    let mut bad = Vec::new();
    let members: BTreeSet<&str> = ws.members.iter().map(|p| p.name.as_str()).collect();
    for p in &ws.members {
        let Some(mine) = layer_of(&p.name) else {
            bad.push(Finding(format!(
                "{} has no layer: add it to LAYERS in scripts/xtask/src/tree/layering.rs and to the \
                 dependency table of docs/architecture.md",
                p.name
            )));
            continue;
        };
        for d in p
            .deps
            .iter()
            .filter(|d| d.kind != "dev" && members.contains(d.name.as_str()))
        {
            let theirs = layer_of(&d.name).unwrap_or(usize::MAX);
            if theirs >= mine {
                bad.push(Finding(format!(
                    "{} (layer {mine}) depends on {} (layer {theirs}): dependencies point down",
                    p.name, d.name
                )));
            }
            let dep_is_bin = ws.member(&d.name).is_some_and(|q| q.has_bin);
            if dep_is_bin && !TEST_ONLY.contains(&p.name.as_str()) {
                bad.push(Finding(format!(
                    "{} depends on {}, a binary package: move what it uses into a library crate",
                    p.name, d.name
                )));
            }
        }
    }
    bad.extend(check_folders(ws));
    for side in DEVICE_SIDE.iter().filter(|n| members.contains(*n)) {
        let r = reach(ws, side, &[], true);
        for forbidden in ["davinci-shim", "davinci-ops"] {
            if r.contains(forbidden) {
                bad.push(Finding(format!(
                    "{side} reaches {forbidden}: the device side never knows the user library"
                )));
            }
        }
    }
    if members.contains("davinci-shim") {
        let bare = reach(ws, "davinci-shim", &[], false);
        for f in SHIM_BARE_FORBIDS.iter().filter(|f| bare.contains(**f)) {
            bad.push(Finding(format!(
                "davinci-shim without default features reaches {f}: a runtime that opens \
                 /dev/davinciN must link no device code"
            )));
        }
        let all: Vec<&str> = ws
            .member("davinci-shim")
            .map(|p| p.features.keys().map(String::as_str).collect())
            .unwrap_or_default();
        let full = reach(ws, "davinci-shim", &all, true);
        for f in SHIM_FULL_FORBIDS.iter().filter(|f| full.contains(**f)) {
            bad.push(Finding(format!(
                "davinci-shim with every feature reaches {f}: the embedded device must not \
                 bring the daemon"
            )));
        }
    }
    for tool in OPERATOR_TOOLS.iter().filter(|n| members.contains(*n)) {
        let r = reach(ws, tool, &[], true);
        for f in OPERATOR_FORBIDS.iter().filter(|f| r.contains(**f)) {
            bad.push(Finding(format!(
                "{tool} reaches {f}: the operators' tools speak the ABI like any client"
            )));
        }
    }
    bad
}

/// Rule 6: the folders as floors.
fn check_folders(ws: &Workspace) -> Vec<Finding> {
    let mut bad = Vec::new();
    for p in &ws.members {
        let folder = folder_of(&p.dir);
        let Some(mine) = floor_of(folder) else {
            bad.push(Finding(format!(
                "{} stands in {}/, which is no floor: put it in a folder of FOLDERS \
                 (scripts/xtask/src/tree/layering.rs), or add that folder there and to README's tree",
                p.name, folder
            )));
            continue;
        };
        for d in p.deps.iter().filter(|d| d.kind != "dev") {
            let Some(q) = ws.member(&d.name) else {
                continue;
            };
            let theirs_folder = folder_of(&q.dir);
            if theirs_folder == folder {
                continue;
            }
            let theirs = floor_of(theirs_folder).unwrap_or(usize::MAX);
            if theirs >= mine {
                bad.push(Finding(format!(
                    "{} ({}/, floor {mine}) depends on {} ({}/, floor {theirs}): a folder \
                     depends only on folders below it",
                    p.name, folder, d.name, theirs_folder
                )));
            }
        }
    }
    bad
}
