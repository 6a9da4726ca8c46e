//! `cargo xtask check-paths`: every repository path a tracked text file names exists. Each
//! test plants files in a scratch tree and feeds the check the list `git ls-files` would give.

use std::path::PathBuf;

use xtask::tree::paths;

/// A scratch tree holding `files` (path, text), and the list of them.
fn tree(name: &str, files: &[(&str, &str)]) -> (PathBuf, Vec<String>) {
    let dir = std::env::temp_dir().join(format!("xtask-paths-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (path, text) in files {
        let p = dir.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    (dir, files.iter().map(|(p, _)| p.to_string()).collect())
}

/// The real tree's shape in small: a crate under a layer folder, scripts, the module.
fn base() -> Vec<(&'static str, &'static str)> {
    vec![
        ("Cargo.toml", "[workspace]\nmembers = [\"core/ring\"]\n"),
        ("core/ring/Cargo.toml", "[package]\nname = \"ring\"\n"),
        ("core/ring/src/lib.rs", "//! The ring.\n"),
        ("core/ring/tests/loom.rs", "//! Loom.\n"),
        ("scripts/lib/qemu-guest.sh", "# helpers\n"),
        ("kmod-rust/Makefile", "all:\n"),
        ("kmod-rust/src/mmap_common.h", "/* shared */\n"),
        ("docs/abi.md", "# ABI\n"),
        ("tests/Cargo.toml", "[package]\nname = \"tests\"\n"),
        ("apps/workload/src/main.rs", "fn main() {}\n"),
        ("fuzz/Cargo.toml", "[workspace]\n"),
        ("vendor/x/README.md", "vendored: core/gone.rs\n"),
    ]
}

fn findings(name: &str, extra: &[(&str, &str)]) -> Vec<String> {
    let mut files = base();
    files.extend_from_slice(extra);
    let (dir, list) = tree(name, &files);
    let mut f: Vec<String> = paths::check(&dir, &list).into_iter().map(|f| f.0).collect();
    let _ = std::fs::remove_dir_all(&dir);
    f.sort();
    f
}

#[test]
fn a_stale_path_in_a_rust_comment_fails() {
    let f = findings(
        "rust",
        &[(
            "core/ring/src/slot.rs",
            "//! See core/ring/src/lib.rs:12 and `core/ring/tests/loom.rs`.\n\
             // The handshake is in core/ring/src/doorbell.rs.\n\
             const DOC: &str = \"docs/gone.md#anchor\";\n",
        )],
    );
    assert_eq!(
        f,
        [
            "core/ring/src/slot.rs:2: core/ring/src/doorbell.rs does not exist",
            "core/ring/src/slot.rs:3: docs/gone.md does not exist",
        ]
    );
}

#[test]
fn a_stale_path_in_a_shell_script_fails() {
    let f = findings(
        "shell",
        &[(
            "scripts/kmod/build.sh",
            "#!/bin/sh\n\
             ROOT=$(cd \"$(dirname \"${BASH_SOURCE[0]}\")/../..\" && pwd)\n\
             . \"$ROOT/scripts/lib/qemu-guest.sh\"\n\
             . \"$ROOT\"/scripts/lib/gone.sh\n\
             cd \"$(dirname \"${BASH_SOURCE[0]}\")/../../kmod-rust\"\n\
             cd \"$(dirname \"$0\")/../kmod-rust\"\n\
             # scripts/kmod/toolchain.sh builds the kernel.\n\
             cp ${ROOT}/core/ring/src/*.rs \"$OUT\"/src/ core/shm/src/*.rs /tmp/x/y\n",
        )],
    );
    assert_eq!(
        f,
        [
            "scripts/kmod/build.sh:4: scripts/lib/gone.sh does not exist",
            "scripts/kmod/build.sh:6: ../kmod-rust does not exist",
            "scripts/kmod/build.sh:7: scripts/kmod/toolchain.sh does not exist",
            "scripts/kmod/build.sh:8: core/shm/src does not exist",
        ]
    );
}

#[test]
fn a_variable_named_root_that_is_not_the_root_is_not_followed() {
    let f = findings(
        "rootfs",
        &[(
            "scripts/images.sh",
            "root=$out/rootfs\nmkdir -p \"$root/etc\" \"$root/usr/local/bin\"\n",
        )],
    );
    assert!(f.is_empty(), "{f:?}");
}

#[test]
fn a_stale_path_in_a_makefile_kbuild_or_manifest_fails() {
    let f = findings(
        "make",
        &[
            (
                "kmod-rust/Kbuild",
                "# the helpers (src/helpers.c) and kmod-rust/src/pci_helpers.c\nobj-m := davinci.o\n",
            ),
            (
                "kmod-rust/src/helpers.c",
                "#include \"mmap_common.h\"\n#include \"../mmap_common.h\"\n#include <linux/mm.h>\n",
            ),
            (
                "apps/workload/Cargo.toml",
                "[dependencies]\nring = { path = \"../../core/ring\" }\nshm = { path = \"../shm\" }\n",
            ),
        ],
    );
    assert_eq!(
        f,
        [
            "apps/workload/Cargo.toml:3: ../shm does not exist",
            "kmod-rust/Kbuild:1: kmod-rust/src/pci_helpers.c does not exist",
            "kmod-rust/src/helpers.c:2: ../mmap_common.h does not exist",
        ]
    );
}

#[test]
fn a_path_that_did_not_follow_its_crate_down_a_folder_fails() {
    let f = findings(
        "moved",
        &[(
            "core/ring/src/sync.rs",
            "// ring/tests/loom.rs checks it; 10 ops/s; see ring/README.md.\n",
        )],
    );
    assert_eq!(
        f,
        [
            "core/ring/src/sync.rs:1: ring/README.md does not exist",
            "core/ring/src/sync.rs:1: ring/tests/loom.rs does not exist",
        ]
    );
}

#[test]
fn a_crate_relative_path_passes_and_only_inside_its_crate() {
    let f = findings(
        "crate",
        &[
            // `tests/loom.rs` is the crate's own (core/ring/tests/loom.rs).
            ("core/ring/README.md", "`tests/loom.rs`, `src/lib.rs`.\n"),
            ("core/ring/src/raw.rs", "// tests/loom.rs models it.\n"),
            // From outside the crate the same words name nothing.
            ("core/README.md", "tests/loom.rs\n"),
        ],
    );
    assert_eq!(f, ["core/README.md:1: tests/loom.rs does not exist"]);
}

#[test]
fn markdown_links_follow_the_document_and_fences_are_read() {
    let f = findings(
        "markdown",
        &[
            (
                "core/ring/README.md",
                "[the ABI](../../docs/abi.md#rings), [gone](../docs/abi.md), [x](src/lib.rs)\n\
                 ```sh\nscripts/gone.sh --quick\n```\n[web](https://example.com/docs/x.md)\n",
            ),
            ("README.md", "[abi](docs/abi.md), [there](docs/there.md)\n"),
        ],
    );
    assert_eq!(
        f,
        [
            "README.md:1: docs/there.md does not exist",
            "core/ring/README.md:1: ../docs/abi.md does not exist",
            "core/ring/README.md:3: scripts/gone.sh does not exist",
        ]
    );
}

#[test]
fn what_is_not_ours_is_not_checked() {
    let f = findings(
        "not-ours",
        &[(
            "kmod-rust/src/main.rs",
            "// drivers/accel/, include/linux/mm.h, rust/kernel/lib.rs (Linux); davinci.ai/npu\n\
             // /dev/davinci0, /tmp/x, /sys/kernel/debug, ~/.cargo, $OUT/core/ring, $KDIR/scripts/x\n\
             // https://github.com/o/r/blob/main/core/gone.rs, target/debug/x, fuzz/target/x\n\
             // docs/specs/ivshmem-spec.rst (QEMU's), apiVersion: apps/v1, vendor/class\n\
             // core/ring/src/*.rs, core/ring/{src,tests}, core/ring/..., core/ring/tests/<n>.rs\n\
             // ../../../../outside/the/repository, ./quickstart, ops/s, src/gone.rs\n",
        )],
    );
    assert!(f.is_empty(), "{f:?}");
}

#[test]
fn an_allowlisted_path_passes_and_every_allowance_says_why() {
    let extra = [("deploy/pod.yaml", "apiVersion: apps/v1\n# fuzz/corpus/x\n")];
    assert!(findings("allowed", &extra).is_empty());
    for (p, why) in paths::ALLOWED {
        assert!(!p.is_empty() && why.len() > 10, "{p}: {why}");
    }
}

#[test]
fn skipped_files_are_not_read() {
    for f in [
        "vendor/x/src/lib.rs",
        "fuzz/seeds/t/1",
        "fuzz/regressions/t/x",
        "Cargo.lock",
        "scripts/xtask/tests/paths.rs",
    ] {
        assert!(paths::skipped(f), "{f}");
    }
    assert!(!paths::skipped("scripts/xtask/src/main.rs"));
    // Binary files are not read either.
    let f = findings("binary", &[("docs/logo.bin", "core/\0gone/x\n")]);
    assert!(f.is_empty(), "{f:?}");
}

/// The real tree: every path any tracked file names exists.
#[test]
fn the_real_tree_passes() {
    let root = xtask::workspace_root();
    let files = paths::tracked_files(&root).expect("git ls-files in the repository");
    assert!(
        files.iter().any(|f| f == "scripts/xtask/Cargo.toml"),
        "{} files",
        files.len()
    );
    let f: Vec<String> = paths::check(&root, &files)
        .into_iter()
        .map(|f| f.0)
        .collect();
    assert!(f.is_empty(), "stale paths:\n{}", f.join("\n"));
}
