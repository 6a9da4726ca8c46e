//! The part of `cargo metadata --format-version 1` the checks read: workspace packages with
//! their features, dependencies (kind, optional, default features, features asked for) and
//! targets, and, for [`msrv`](super::msrv), every resolved package's `rust-version`.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// A dependency as a package's manifest declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dep {
    /// The package depended on.
    pub name: String,
    /// `normal`, `dev` or `build`.
    pub kind: String,
    /// Only with a feature that names it.
    pub optional: bool,
    /// `default-features` is not turned off.
    pub default_features: bool,
    /// Features asked for.
    pub features: Vec<String>,
}

/// A package of the workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Package {
    /// Its name (`davinci-shim`).
    pub name: String,
    /// Its directory relative to the workspace root (`shim`).
    pub dir: String,
    /// Its `[features]` table.
    pub features: BTreeMap<String, Vec<String>>,
    /// Its dependencies, every kind.
    pub deps: Vec<Dep>,
    /// It has a `[[bin]]` target.
    pub has_bin: bool,
    /// Its library and binary roots, relative to the workspace root (`shim/src/lib.rs`).
    pub roots: Vec<String>,
    /// Its declared `rust-version`.
    pub rust_version: Option<String>,
}

/// The workspace as `cargo metadata` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    /// Its members.
    pub members: Vec<Package>,
    /// Every package the resolve reaches on the host platform (members included): name,
    /// version and declared `rust-version`.
    pub resolved: Vec<(String, String, Option<String>)>,
}

impl Workspace {
    /// The member called `name`.
    pub fn member(&self, name: &str) -> Option<&Package> {
        self.members.iter().find(|p| p.name == name)
    }

    /// Runs `cargo metadata` in `root` for the host platform.
    pub fn load(root: &Path) -> Result<Workspace, String> {
        let host = host_triple()?;
        let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .current_dir(root)
            .args([
                "metadata",
                "--format-version",
                "1",
                "--locked",
                "--filter-platform",
                &host,
            ])
            .output()
            .map_err(|e| format!("cannot run cargo metadata: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "cargo metadata failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let text = String::from_utf8(out.stdout).map_err(|e| format!("cargo metadata: {e}"))?;
        Workspace::parse(&text)
    }

    /// Reads `cargo metadata --format-version 1` output.
    pub fn parse(json: &str) -> Result<Workspace, String> {
        let v: Value = serde_json::from_str(json).map_err(|e| format!("cargo metadata: {e}"))?;
        let root = v["workspace_root"].as_str().unwrap_or("");
        let member_ids: Vec<&str> = v["workspace_members"]
            .as_array()
            .ok_or("cargo metadata: no workspace_members")?
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let packages = v["packages"]
            .as_array()
            .ok_or("cargo metadata: no packages")?;
        let mut members = Vec::new();
        for p in packages {
            let id = p["id"].as_str().unwrap_or("");
            if !member_ids.contains(&id) {
                continue;
            }
            members.push(package(p, root)?);
        }
        let in_resolve: Option<Vec<&str>> = v["resolve"]["nodes"]
            .as_array()
            .map(|n| n.iter().filter_map(|n| n["id"].as_str()).collect());
        let resolved = packages
            .iter()
            .filter(|p| {
                let id = p["id"].as_str().unwrap_or("");
                in_resolve.as_ref().is_none_or(|ids| ids.contains(&id))
            })
            .map(|p| {
                (
                    p["name"].as_str().unwrap_or("").to_string(),
                    p["version"].as_str().unwrap_or("").to_string(),
                    p["rust_version"].as_str().map(str::to_string),
                )
            })
            .collect();
        Ok(Workspace { members, resolved })
    }
}

fn package(p: &Value, root: &str) -> Result<Package, String> {
    let name = p["name"]
        .as_str()
        .ok_or("a package without a name")?
        .to_string();
    let manifest = p["manifest_path"].as_str().unwrap_or("");
    let dir = Path::new(manifest)
        .parent()
        .and_then(|d| d.strip_prefix(root).ok())
        .map(|d| d.display().to_string())
        .unwrap_or_default();
    let features = p["features"]
        .as_object()
        .map(|f| {
            f.iter()
                .map(|(k, v)| (k.clone(), strings(v)))
                .collect::<BTreeMap<_, _>>()
        })
        .unwrap_or_default();
    let deps = p["dependencies"]
        .as_array()
        .map(|ds| {
            ds.iter()
                .map(|d| Dep {
                    name: d["rename"]
                        .as_str()
                        .or(d["name"].as_str())
                        .unwrap_or("")
                        .to_string(),
                    kind: d["kind"].as_str().unwrap_or("normal").to_string(),
                    optional: d["optional"].as_bool().unwrap_or(false),
                    default_features: d["uses_default_features"].as_bool().unwrap_or(true),
                    features: strings(&d["features"]),
                })
                .collect()
        })
        .unwrap_or_default();
    let has_bin = p["targets"].as_array().is_some_and(|ts| {
        ts.iter().any(|t| {
            t["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == "bin"))
        })
    });
    let roots = p["targets"]
        .as_array()
        .map(|ts| {
            ts.iter()
                .filter(|t| {
                    t["kind"].as_array().is_some_and(|k| {
                        k.iter().any(|k| {
                            matches!(
                                k.as_str(),
                                Some("lib" | "rlib" | "cdylib" | "staticlib" | "bin")
                            )
                        })
                    })
                })
                .filter_map(|t| t["src_path"].as_str())
                .map(|p| {
                    Path::new(p)
                        .strip_prefix(root)
                        .map(|r| r.display().to_string())
                        .unwrap_or_else(|_| p.to_string())
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Package {
        name,
        dir,
        features,
        deps,
        has_bin,
        roots,
        rust_version: p["rust_version"].as_str().map(str::to_string),
    })
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The host's target triple (`rustc -vV`).
fn host_triple() -> Result<String, String> {
    let out = Command::new("rustc")
        .arg("-vV")
        .output()
        .map_err(|e| format!("cannot run rustc -vV: {e}"))?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(str::to_string)
        .ok_or_else(|| "rustc -vV printed no host".to_string())
}
