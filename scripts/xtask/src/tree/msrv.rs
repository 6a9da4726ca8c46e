//! The declared `rust-version` is true: at least what every dependency resolved for the host
//! declares (a dependency that needs a newer Rust would break a build on the declared one), and
//! the workspace builds with exactly that toolchain when it is installed (`rustup toolchain
//! list`). Our own code's use of newer standard-library APIs is caught by clippy's
//! `incompatible_msrv` lint, which reads the same `rust-version`, in the clippy step.

use super::metadata::Workspace;
use super::Finding;

/// `1.88` or `1.88.0` as (1, 88, 0).
pub fn parse_version(v: &str) -> Option<(u32, u32, u32)> {
    let mut it = v.trim().split('.');
    let major = it.next()?.parse().ok()?;
    let minor = it.next().map_or(Some(0), |m| m.parse().ok())?;
    let patch = it.next().map_or(Some(0), |p| p.parse().ok())?;
    Some((major, minor, patch))
}

/// What the resolved dependencies need: the highest `rust-version` among them, with the
/// packages that declare it.
pub fn needed(ws: &Workspace) -> Option<((u32, u32, u32), Vec<String>)> {
    let mut best: Option<((u32, u32, u32), Vec<String>)> = None;
    for (name, version, rv) in &ws.resolved {
        if ws.member(name).is_some() {
            continue;
        }
        let Some(v) = rv.as_deref().and_then(parse_version) else {
            continue;
        };
        let who = format!("{name} {version}");
        match &mut best {
            Some((b, names)) if *b == v => names.push(who),
            Some((b, _)) if *b > v => {}
            _ => best = Some((v, vec![who])),
        }
    }
    best
}

/// The workspace's declared `rust-version` (every member must declare the same one).
pub fn declared(ws: &Workspace) -> Result<(u32, u32, u32), Finding> {
    let mut found: Option<String> = None;
    for p in &ws.members {
        let Some(rv) = &p.rust_version else {
            return Err(Finding(format!(
                "{} declares no rust-version: use `rust-version.workspace = true`",
                p.name
            )));
        };
        match &found {
            Some(f) if f != rv => {
                return Err(Finding(format!(
                    "{} declares rust-version {rv}, others {f}: declare it once, in the workspace",
                    p.name
                )))
            }
            _ => found = Some(rv.clone()),
        }
    }
    let rv = found.ok_or_else(|| Finding("no workspace members".into()))?;
    parse_version(&rv).ok_or_else(|| Finding(format!("rust-version {rv:?} is not a version")))
}

/// The declared version against what the dependencies need.
pub fn check(ws: &Workspace) -> Vec<Finding> {
    let ours = match declared(ws) {
        Ok(v) => v,
        Err(f) => return vec![f],
    };
    match needed(ws) {
        Some((need, who)) if need > ours => vec![Finding(format!(
            "rust-version is {}.{}, but {} need{} Rust {}.{}: raise the workspace's \
             rust-version, or hold the dependency back",
            ours.0,
            ours.1,
            who.join(", "),
            if who.len() == 1 { "s" } else { "" },
            need.0,
            need.1
        ))],
        _ => Vec::new(),
    }
}
