//! Workspace tasks.
//!
//! * `cargo xtask gen-header`: write `uapi/include/davinci/uapi.h` from `davinci_uapi`'s layout
//!   metadata, `bindings/capi/include/davinci/runtime.h` from `bindings/capi/src` (cbindgen), and refresh the
//!   generated blocks of `docs/abi.md`.
//! * `cargo xtask gen-header --check`: change nothing; exit 1 if any of them is stale.
//! * `cargo xtask kmod-src OUT.rs`: `uapi`, `ring` and `driver-core` as one source file for the
//!   kernel module (see `kmod_src`).
//! * `cargo xtask check`: the checks on the workspace's shape (`xtask::tree`): layering, file
//!   sizes, the paths every tracked file names, the packages the docs name, the unsafe table,
//!   the MSRV against the dependencies; each also on its own (`check-layering`, `check-sizes`,
//!   `check-paths`, `check-docs`, `check-unsafe`, `msrv`). `msrv --build` also builds the
//!   workspace with the declared toolchain (installing it with rustup when missing).
#![forbid(unsafe_code)]

use std::process::ExitCode;

const USAGE: &str = "usage: cargo xtask COMMAND

  gen-header          write uapi/include/davinci/uapi.h (and the generated blocks of docs/abi.md)
                      from davinci-uapi's layout metadata, and bindings/capi/include/davinci/runtime.h
                      (libdavinci's header) from bindings/capi/src with cbindgen
  gen-header --check  write nothing; exit 1 if a checked-in file differs from what would be written
  kmod-src OUT.rs     write uapi, ring and driver-core as one source file for the kernel module
  check               every check below but the MSRV build; exit 1 if any rule is broken
  check-layering      crates depend only on lower layers; the shim without `embedded` and the
                      operators' tools link no device code (read from cargo metadata)
  check-sizes         no source file over 600 non-test lines, no test file over 800 lines
  check-paths         every repository path a tracked text file names exists (Markdown, comments,
                      strings, scripts, Makefile and Kbuild, manifests, YAML, units)
  check-docs          every `-p` the Markdown files pass to cargo is a workspace package
  check-unsafe        every crate root forbids or denies unsafe code; the files that allow it are
                      exactly the table \"Where `unsafe` is\" of docs/architecture.md
  check-names         one name per idea: an open's handle in the client table is `client`, the
                      id the device reports for a client is `client_id` (no retired spelling)
  msrv [--build]      the workspace's rust-version is at least every dependency's; with --build,
                      also `cargo +VERSION check --workspace --all-targets` (rustup installs it)";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["gen-header"] => gen_header(false),
        ["gen-header", "--check"] | ["--check", "gen-header"] => gen_header(true),
        ["kmod-src", out] => kmod_src(out),
        ["check"] => checks(
            &[
                "layering", "sizes", "paths", "docs", "unsafe", "names", "msrv",
            ],
            false,
        ),
        ["check-unsafe"] => checks(&["unsafe"], false),
        ["check-names"] => checks(&["names"], false),
        ["check-layering"] => checks(&["layering"], false),
        ["check-sizes"] => checks(&["sizes"], false),
        ["check-paths"] => checks(&["paths"], false),
        ["check-docs"] => checks(&["docs"], false),
        ["msrv"] => checks(&["msrv"], false),
        ["msrv", "--build"] => checks(&["msrv"], true),
        ["help" | "-h" | "--help"] => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("xtask: unknown arguments {args:?}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn gen_header(check: bool) -> ExitCode {
    // Tests point the tool at a scratch copy of the tree; everyone else uses the workspace.
    let root = std::env::var_os("XTASK_WORKSPACE_ROOT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(xtask::workspace_root);
    let files = match xtask::generated_files(&root) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("xtask gen-header: {e}");
            return ExitCode::from(2);
        }
    };
    let mut stale = 0;
    for f in &files {
        if f.is_fresh() {
            println!("{}: up to date", f.path);
            continue;
        }
        if check {
            stale += 1;
            match f.first_difference() {
                Some((line, have, want)) => eprintln!(
                    "{}: stale (first difference at line {line}):\n  checked in: {have}\n  generated:  {want}",
                    f.path
                ),
                None => eprintln!("{}: stale", f.path),
            }
            continue;
        }
        let path = root.join(f.path);
        if let Some(dir) = path.parent() {
            if let Err(e) = std::fs::create_dir_all(dir) {
                eprintln!("xtask gen-header: cannot create {}: {e}", dir.display());
                return ExitCode::from(2);
            }
        }
        if let Err(e) = std::fs::write(&path, &f.expected) {
            eprintln!("xtask gen-header: cannot write {}: {e}", path.display());
            return ExitCode::from(2);
        }
        println!("{}: written", f.path);
    }
    if stale > 0 {
        eprintln!("{stale} generated file(s) are stale: run `cargo xtask gen-header` and commit the result");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

fn kmod_src(out: &str) -> ExitCode {
    let text = match xtask::kmod_src::render(&xtask::workspace_root()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("xtask kmod-src: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = std::fs::write(out, text) {
        eprintln!("xtask kmod-src: cannot write {out}: {e}");
        return ExitCode::from(2);
    }
    ExitCode::SUCCESS
}

fn checks(which: &[&str], build: bool) -> ExitCode {
    use xtask::tree::{
        doc_paths, layering, metadata::Workspace, msrv, names, paths, sizes, unsafe_code,
    };
    // As for gen-header: a scratch copy of the tree when XTASK_WORKSPACE_ROOT names one.
    let root = std::env::var_os("XTASK_WORKSPACE_ROOT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(xtask::workspace_root);
    let ws = match Workspace::load(&root) {
        Ok(ws) => ws,
        Err(e) => {
            eprintln!("xtask: {e}");
            return ExitCode::from(2);
        }
    };
    let mut failed = false;
    for &name in which {
        let findings = match name {
            "layering" => layering::check(&ws),
            "sizes" => {
                let dirs: Vec<std::path::PathBuf> =
                    ws.members.iter().map(|p| (&p.dir).into()).collect();
                let mut f = sizes::check(&root, &sources(&root, &ws));
                f.extend(sizes::check_tests(&root, &sizes::test_files(&root, &dirs)));
                f
            }
            "unsafe" => {
                let roots: Vec<std::path::PathBuf> = ws
                    .members
                    .iter()
                    .flat_map(|p| p.roots.iter().map(Into::into))
                    .collect();
                let rel: Vec<std::path::PathBuf> = sources(&root, &ws)
                    .iter()
                    .filter_map(|p| p.strip_prefix(&root).ok().map(|p| p.to_path_buf()))
                    .collect();
                let doc =
                    std::fs::read_to_string(root.join("docs/architecture.md")).unwrap_or_default();
                unsafe_code::check(&root, &roots, &rel, &doc)
            }
            "paths" => match paths::tracked_files(&root) {
                Ok(files) => paths::check(&root, &files),
                Err(e) => vec![xtask::tree::Finding(e)],
            },
            "docs" => match paths::tracked_files(&root) {
                Ok(files) => {
                    let members: Vec<String> = ws.members.iter().map(|p| p.name.clone()).collect();
                    doc_paths::check(&root, &files, &members)
                }
                Err(e) => vec![xtask::tree::Finding(e)],
            },
            "names" => {
                let dirs: Vec<std::path::PathBuf> =
                    ws.members.iter().map(|p| p.dir.clone().into()).collect();
                names::check(&root, &names::files(&root, &dirs))
            }
            "msrv" => msrv::check(&ws),
            other => vec![xtask::tree::Finding(format!("no check named {other}"))],
        };
        if findings.is_empty() {
            println!("xtask check-{name}: ok");
        } else {
            failed = true;
            for f in &findings {
                eprintln!("xtask check-{name}: {f}");
            }
        }
    }
    if build && !failed {
        match msrv::declared(&ws) {
            Ok((a, b, _)) => {
                if let Err(e) = msrv_build(&root, &format!("{a}.{b}")) {
                    eprintln!("xtask msrv --build: {e}");
                    failed = true;
                }
            }
            Err(f) => {
                eprintln!("xtask msrv: {f}");
                failed = true;
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Every non-test source file of the members and of the kernel module.
fn sources(
    root: &std::path::Path,
    ws: &xtask::tree::metadata::Workspace,
) -> Vec<std::path::PathBuf> {
    let mut dirs: Vec<std::path::PathBuf> = ws
        .members
        .iter()
        .map(|p| std::path::Path::new(&p.dir).join("src"))
        .collect();
    dirs.push("kmod-rust/src".into());
    xtask::tree::sizes::source_files(root, &dirs)
}

/// `cargo +VERSION check --workspace --all-targets --locked` in its own target directory,
/// installing the toolchain (minimal profile) with rustup when it is missing.
fn msrv_build(root: &std::path::Path, version: &str) -> Result<(), String> {
    use std::process::Command;
    let listed = Command::new("rustup")
        .args(["toolchain", "list"])
        .output()
        .map_err(|e| format!("cannot run rustup (needed to build with Rust {version}): {e}"))?;
    let have = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .any(|l| l.starts_with(&format!("{version}-")) || l.starts_with(&format!("{version}.0-")));
    if !have {
        println!("xtask msrv: installing Rust {version} (rustup, minimal profile)");
        let ok = Command::new("rustup")
            .args([
                "toolchain",
                "install",
                version,
                "--profile",
                "minimal",
                "--no-self-update",
            ])
            .status()
            .map_err(|e| format!("rustup: {e}"))?
            .success();
        if !ok {
            return Err(format!("rustup could not install Rust {version}"));
        }
    }
    println!("xtask msrv: cargo +{version} check --workspace --all-targets --locked");
    let target = root.join("target").join("msrv");
    let ok = Command::new("cargo")
        .arg(format!("+{version}"))
        .args([
            "check",
            "--workspace",
            "--all-targets",
            "--locked",
            "--quiet",
        ])
        .current_dir(root)
        .env("CARGO_TARGET_DIR", target)
        // rustup's proxy picks the toolchain from `+VERSION`; drop what the outer cargo set.
        .env_remove("RUSTC")
        .env_remove("CARGO")
        .env_remove("RUSTUP_TOOLCHAIN")
        .status()
        .map_err(|e| format!("cargo +{version}: {e}"))?
        .success();
    if ok {
        println!("xtask msrv: the workspace builds with Rust {version}");
        Ok(())
    } else {
        Err(format!(
            "the workspace does not build with Rust {version}, its declared rust-version"
        ))
    }
}
