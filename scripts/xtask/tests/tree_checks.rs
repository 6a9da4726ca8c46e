//! The checks on the workspace's shape (`cargo xtask check`), each fed a tree that breaks its
//! rule: they must fail on it, name what broke, and pass the same tree without the break.

use std::path::PathBuf;

use serde_json::{json, Value};
use xtask::tree::metadata::Workspace;
use xtask::tree::{doc_paths, layering, msrv, sizes};

/// A dependency entry as `cargo metadata` prints it.
fn dep(name: &str, kind: Option<&str>, optional: bool, default: bool, features: &[&str]) -> Value {
    json!({
        "name": name, "kind": kind, "optional": optional, "rename": null,
        "uses_default_features": default, "features": features,
    })
}

fn normal(name: &str) -> Value {
    dep(name, None, false, true, &[])
}

/// Where the real tree keeps a package (its folder is a floor of `layering::FOLDERS`).
fn dir_of(name: &str) -> String {
    let short = name.trim_start_matches("davinci-");
    match short {
        "uapi" | "shim" | "mock-device" | "tests" => short.to_string(),
        "driver-core" | "ring" => format!("core/{short}"),
        "mockd" => format!("hosts/{short}"),
        "ops" | "smi" => format!("operators/{short}"),
        _ => format!("elsewhere/{short}"),
    }
}

/// A package entry; `bin` adds a binary target.
fn pkg(name: &str, deps: Vec<Value>, features: Value, bin: bool) -> Value {
    pkg_in(&dir_of(name), name, deps, features, bin)
}

/// A package entry in directory `dir` of the workspace.
fn pkg_in(dir: &str, name: &str, deps: Vec<Value>, features: Value, bin: bool) -> Value {
    let mut targets = vec![json!({"kind": ["lib"], "name": name})];
    if bin {
        targets.push(json!({"kind": ["bin"], "name": name}));
    }
    json!({
        "id": format!("path+file:///ws/{name}#0.1.0"), "name": name, "version": "0.1.0",
        "manifest_path": format!("/ws/{dir}/Cargo.toml"), "features": features,
        "dependencies": deps, "targets": targets, "rust_version": "1.88",
    })
}

fn workspace(packages: Vec<Value>, externals: Vec<Value>) -> Workspace {
    let members: Vec<Value> = packages.iter().map(|p| p["id"].clone()).collect();
    let mut all = packages;
    all.extend(externals);
    let text = json!({
        "packages": all, "workspace_members": members, "workspace_root": "/ws",
        "resolve": null,
    })
    .to_string();
    Workspace::parse(&text).expect("synthetic metadata parses")
}

/// The real layering in miniature: uapi, driver-core, mock-device, mockd (a binary with
/// tracing-subscriber), the shim (mock-device behind `embedded`, on by default), ops and smi.
fn miniature(shim_deps: Vec<Value>, smi_deps: Vec<Value>) -> Workspace {
    workspace(
        vec![
            pkg("davinci-uapi", vec![], json!({}), false),
            pkg(
                "davinci-driver-core",
                vec![normal("davinci-uapi")],
                json!({}),
                false,
            ),
            pkg(
                "davinci-mock-device",
                vec![normal("davinci-driver-core")],
                json!({}),
                false,
            ),
            pkg(
                "davinci-mockd",
                vec![normal("davinci-mock-device"), normal("tracing-subscriber")],
                json!({}),
                true,
            ),
            pkg(
                "davinci-shim",
                shim_deps,
                json!({"default": ["embedded"], "embedded": ["dep:davinci-mock-device"]}),
                false,
            ),
            pkg(
                "davinci-ops",
                vec![dep("davinci-shim", None, false, false, &[])],
                json!({}),
                false,
            ),
            pkg("davinci-smi", smi_deps, json!({}), true),
        ],
        vec![],
    )
}

fn good_shim() -> Vec<Value> {
    vec![
        normal("davinci-uapi"),
        dep("davinci-mock-device", None, true, true, &[]),
    ]
}

fn good_smi() -> Vec<Value> {
    vec![normal("davinci-ops")]
}

fn findings(ws: &Workspace) -> Vec<String> {
    layering::check(ws).into_iter().map(|f| f.0).collect()
}

#[test]
fn layering_accepts_the_intended_shape() {
    assert_eq!(
        findings(&miniature(good_shim(), good_smi())),
        Vec::<String>::new()
    );
}

#[test]
fn reach_follows_cargo_feature_rules() {
    let ws = miniature(good_shim(), good_smi());
    let bare = layering::reach(&ws, "davinci-shim", &[], false);
    assert!(!bare.contains("davinci-mock-device"), "{bare:?}");
    let with_default = layering::reach(&ws, "davinci-shim", &[], true);
    assert!(
        with_default.contains("davinci-driver-core"),
        "{with_default:?}"
    );
    // ops asks for the shim without default features: no device code.
    assert!(!layering::reach(&ws, "davinci-ops", &[], true).contains("davinci-mock-device"));
}

#[test]
fn a_crate_feature_entry_turns_an_optional_dependency_on_and_a_weak_one_does_not() {
    let shim = |feature: &str| {
        workspace(
            vec![
                pkg("davinci-uapi", vec![], json!({}), false),
                pkg(
                    "davinci-shim",
                    vec![dep("davinci-uapi", None, true, true, &[])],
                    json!({"default": ["x"], "x": [feature]}),
                    false,
                ),
            ],
            vec![],
        )
    };
    let strong = shim("davinci-uapi/zerocopy");
    assert!(layering::reach(&strong, "davinci-shim", &[], true).contains("davinci-uapi"));
    let weak = shim("davinci-uapi?/zerocopy");
    assert!(!layering::reach(&weak, "davinci-shim", &[], true).contains("davinci-uapi"));
}

#[test]
fn layering_catches_a_folder_reaching_up() {
    // core/ring (floor 1) depending on the daemon in hosts/ (floor 3): the layer list alone
    // would let it through if ring's layer were raised; the folders do not.
    let ws = workspace(
        vec![
            pkg("davinci-uapi", vec![], json!({}), false),
            pkg(
                "davinci-mockd",
                vec![normal("davinci-uapi")],
                json!({}),
                false,
            ),
            pkg(
                "davinci-ring",
                vec![normal("davinci-mockd")],
                json!({}),
                false,
            ),
        ],
        vec![],
    );
    let f = findings(&ws);
    assert!(
        f.iter()
            .any(|m| m.contains("davinci-ring (core/, floor 1) depends on davinci-mockd (hosts/")),
        "{f:?}"
    );
    // The same dependency inside one folder is no finding of rule 6.
    let same = workspace(
        vec![
            pkg("davinci-uapi", vec![], json!({}), false),
            pkg_in(
                "core/mockd",
                "davinci-mockd",
                vec![normal("davinci-uapi")],
                json!({}),
                false,
            ),
            pkg(
                "davinci-ring",
                vec![normal("davinci-mockd")],
                json!({}),
                false,
            ),
        ],
        vec![],
    );
    assert!(
        !findings(&same)
            .iter()
            .any(|m| m.contains("a folder depends")),
        "{:?}",
        findings(&same)
    );
}

#[test]
fn layering_catches_a_package_outside_the_floors() {
    let ws = workspace(
        vec![pkg_in(
            "misc/uapi",
            "davinci-uapi",
            vec![],
            json!({}),
            false,
        )],
        vec![],
    );
    let f = findings(&ws);
    assert!(
        f.iter()
            .any(|m| m.contains("davinci-uapi stands in misc/, which is no floor")),
        "{f:?}"
    );
}

#[test]
fn layering_catches_device_code_in_the_bare_shim() {
    let mut shim = good_shim();
    shim.push(normal("davinci-driver-core"));
    let f = findings(&miniature(shim, good_smi()));
    assert!(
        f.iter()
            .any(|f| f.contains("without default features reaches davinci-driver-core")),
        "{f:?}"
    );
}

#[test]
fn layering_catches_the_daemon_behind_the_embedded_feature() {
    let shim = vec![
        normal("davinci-uapi"),
        dep("davinci-mockd", None, true, true, &[]),
    ];
    let mut ws = miniature(shim, good_smi());
    // The feature now brings the daemon (and its logging).
    ws.members
        .iter_mut()
        .find(|p| p.name == "davinci-shim")
        .unwrap()
        .features
        .insert("embedded".into(), vec!["dep:davinci-mockd".into()]);
    let f = findings(&ws);
    assert!(
        f.iter()
            .any(|f| f.contains("every feature reaches davinci-mockd")),
        "{f:?}"
    );
    assert!(
        f.iter()
            .any(|f| f.contains("every feature reaches tracing-subscriber")),
        "{f:?}"
    );
}

#[test]
fn layering_catches_an_operator_tool_linking_the_device() {
    let f = findings(&miniature(
        good_shim(),
        vec![normal("davinci-ops"), normal("davinci-mock-device")],
    ));
    assert!(
        f.iter().any(|f| f == "davinci-smi reaches davinci-mock-device: the operators' tools speak the ABI like any client"),
        "{f:?}"
    );
}

#[test]
fn layering_catches_an_upward_dependency_and_a_binary_used_as_a_library() {
    let ws = workspace(
        vec![
            pkg(
                "davinci-uapi",
                vec![normal("davinci-shim")],
                json!({}),
                false,
            ),
            pkg("davinci-shim", vec![], json!({}), false),
            pkg(
                "davinci-exporter",
                vec![normal("davinci-smi")],
                json!({}),
                true,
            ),
            pkg("davinci-smi", vec![], json!({}), true),
        ],
        vec![],
    );
    let f = findings(&ws);
    assert!(
        f.iter()
            .any(|f| f.starts_with("davinci-uapi (layer 0) depends on davinci-shim")),
        "{f:?}"
    );
    assert!(
        f.iter()
            .any(|f| f.contains("the device side never knows the user library")),
        "{f:?}"
    );
    assert!(
        f.iter()
            .any(|f| f.contains("davinci-exporter depends on davinci-smi, a binary package")),
        "{f:?}"
    );
}

#[test]
fn layering_wants_every_member_placed() {
    let ws = workspace(
        vec![pkg("davinci-newcomer", vec![], json!({}), false)],
        vec![],
    );
    let f = findings(&ws);
    assert!(f[0].starts_with("davinci-newcomer has no layer"), "{f:?}");
}

#[test]
fn non_test_lines_leave_test_items_out() {
    let text = "\
//! A file.
fn a() {}
fn b() -> &'static str { \"}\" }

#[cfg(test)]
mod tests {
    #[test]
    fn t() {
        let s = \"{ not a block\";
        let c = '{';
        assert!(s.len() > 1 && c != '}');
    }
}
";
    assert_eq!(sizes::non_test_lines(text), 4);
    assert_eq!(
        sizes::non_test_lines("fn a() {}\n#[cfg(test)]\nmod tests;\n"),
        1
    );
    assert_eq!(
        sizes::non_test_lines("#[cfg(test)]\n#[path = \"x.rs\"]\nmod x;\nfn a() {}\n"),
        1
    );
}

#[test]
fn sizes_name_a_file_over_the_limit_and_leave_tests_out() {
    let dir = scratch("sizes");
    std::fs::create_dir_all(dir.join("c/src/tests")).unwrap();
    let long: String = (0..=sizes::MAX_NON_TEST_LINES)
        .map(|i| format!("const C{i}: u8 = 0;\n"))
        .collect();
    std::fs::write(dir.join("c/src/big.rs"), &long).unwrap();
    std::fs::write(dir.join("c/src/tests.rs"), &long).unwrap();
    std::fs::write(dir.join("c/src/tests/more.rs"), &long).unwrap();
    std::fs::write(dir.join("c/src/small.rs"), "fn a() {}\n").unwrap();
    let files = sizes::source_files(&dir, &[PathBuf::from("c/src")]);
    assert_eq!(files.len(), 2, "{files:?}");
    let f = sizes::check(&dir, &files);
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(
        f[0].0.starts_with("c/src/big.rs: 601 non-test lines"),
        "{f:?}"
    );
}

#[test]
fn test_files_have_a_cap_of_their_own() {
    let dir = scratch("test-sizes");
    for d in ["c/src/a", "c/tests/area", "c/tests/c", "c/target/tests"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    let lines = |n: usize| -> String { (0..n).map(|i| format!("// {i}\n")).collect() };
    let over = lines(sizes::MAX_TEST_LINES + 1);
    std::fs::write(dir.join("c/tests/big.rs"), &over).unwrap();
    std::fs::write(dir.join("c/tests/area/part.rs"), &over).unwrap();
    std::fs::write(dir.join("c/tests/c/probe.c"), &over).unwrap();
    std::fs::write(dir.join("c/src/a/tests.rs"), &over).unwrap();
    std::fs::write(dir.join("c/tests/fits.rs"), lines(sizes::MAX_TEST_LINES)).unwrap();
    // Not test files: a source file (the source cap's), data, a build directory.
    std::fs::write(dir.join("c/src/a/mod.rs"), &over).unwrap();
    std::fs::write(dir.join("c/tests/c/data.txt"), &over).unwrap();
    std::fs::write(dir.join("c/target/tests/x.rs"), &over).unwrap();
    let files = sizes::test_files(&dir, &[PathBuf::from("c")]);
    assert_eq!(files.len(), 5, "{files:?}");
    let f: Vec<String> = sizes::check_tests(&dir, &files)
        .into_iter()
        .map(|f| f.0)
        .collect();
    assert_eq!(f.len(), 4, "{f:?}");
    assert!(
        f.iter()
            .any(|f| f.starts_with("c/tests/big.rs: 801 lines, more than 800")),
        "{f:?}"
    );
    assert!(!f.iter().any(|f| f.contains("fits.rs")), "{f:?}");
}

#[test]
fn doc_packages_must_be_members() {
    let dir = scratch("docs");
    std::fs::create_dir_all(dir.join("docs")).unwrap();
    std::fs::create_dir_all(dir.join("core/ring")).unwrap();
    std::fs::write(
        dir.join("README.md"),
        "Run `cargo test -p davinci-shim` and `cargo run -p davinci-gone`; `-p PACKAGE`.\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("docs/abi.md"),
        "cargo test --package davinci-shim\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("core/ring/README.md"),
        "cargo test -p davinci-old.\n",
    )
    .unwrap();
    std::fs::write(dir.join("core/ring/notes.txt"), "cargo test -p not-read\n").unwrap();
    let files: Vec<String> = [
        "README.md",
        "docs/abi.md",
        "core/ring/README.md",
        "core/ring/notes.txt",
    ]
    .map(String::from)
    .to_vec();
    let members = vec!["davinci-shim".to_string()];
    let f: Vec<String> = doc_paths::check(&dir, &files, &members)
        .into_iter()
        .map(|f| f.0)
        .collect();
    assert_eq!(
        f,
        vec![
            "README.md runs `-p davinci-gone`, which is not a workspace package".to_string(),
            "core/ring/README.md runs `-p davinci-old`, which is not a workspace package"
                .to_string(),
        ]
    );
}

#[test]
fn msrv_must_cover_every_dependency() {
    let mut ws = miniature(good_shim(), good_smi());
    ws.resolved = vec![
        ("proptest".into(), "1.12.0".into(), Some("1.88".into())),
        ("old".into(), "1.0.0".into(), Some("1.60".into())),
        ("none".into(), "1.0.0".into(), None),
    ];
    assert!(msrv::check(&ws).is_empty());
    ws.resolved
        .push(("newer".into(), "2.0.0".into(), Some("1.90.1".into())));
    let f = msrv::check(&ws);
    assert_eq!(f.len(), 1);
    assert!(f[0].0.contains("newer 2.0.0 needs Rust 1.90"), "{f:?}");
    ws.members.last_mut().unwrap().rust_version = Some("1.85".into());
    let f = msrv::check(&ws);
    assert!(
        f[0].0
            .starts_with("davinci-smi declares rust-version 1.85, others 1.88"),
        "{f:?}"
    );
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("xtask-tree-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_unsafe_table_must_match_the_code() {
    use xtask::tree::unsafe_code;
    let dir = scratch("unsafe");
    std::fs::create_dir_all(dir.join("c/src")).unwrap();
    std::fs::create_dir_all(dir.join("kmod-rust/src")).unwrap();
    std::fs::write(
        dir.join("c/src/lib.rs"),
        "//! c\n#![deny(unsafe_code)]\nmod raw;\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("c/src/raw.rs"),
        "//! raw\n#![allow(unsafe_code)]\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("c/src/main.rs"),
        "//! no attribute\nfn main() {}\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("kmod-rust/src/fops.rs"),
        "// SAFETY: ...\nlet x = unsafe { f() };\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("kmod-rust/src/safe.rs"),
        "// unsafe { in a comment }\n",
    )
    .unwrap();
    let sources: Vec<PathBuf> = [
        "c/src/lib.rs",
        "c/src/raw.rs",
        "kmod-rust/src/fops.rs",
        "kmod-rust/src/safe.rs",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    let roots = vec![
        PathBuf::from("c/src/lib.rs"),
        PathBuf::from("c/src/main.rs"),
    ];
    let doc = "# A\n## Where `unsafe` is\n\n| module | why |\n|---|---|\n| `c/src/raw.rs` | MMIO |\n| `c/src/gone.rs` | was |\n\n## Next\n| `not/in/the/table.rs` | x |\n";
    let f: Vec<String> = unsafe_code::check(&dir, &roots, &sources, doc)
        .into_iter()
        .map(|f| f.0)
        .collect();
    assert_eq!(f.len(), 3, "{f:?}");
    assert!(
        f[0].starts_with("c/src/main.rs: a crate root without"),
        "{f:?}"
    );
    assert!(
        f[1].starts_with("kmod-rust/src/fops.rs allows or uses unsafe code"),
        "{f:?}"
    );
    assert!(f[2].contains("lists c/src/gone.rs"), "{f:?}");
    let fixed = doc.replace(
        "| `c/src/gone.rs` | was |",
        "| `kmod-rust/src/fops.rs` | FFI |",
    );
    std::fs::write(
        dir.join("c/src/main.rs"),
        "//! bin\n#![forbid(unsafe_code)]\nfn main() {}\n",
    )
    .unwrap();
    assert!(unsafe_code::check(&dir, &roots, &sources, &fixed).is_empty());
}
