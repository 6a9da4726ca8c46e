//! Workspace tasks.
//!
//! * `cargo xtask gen-header`: write `uapi/include/davinci/uapi.h` from `davinci_uapi`'s layout
//!   metadata and refresh the generated blocks of `docs/abi.md`.
//! * `cargo xtask gen-header --check`: change nothing; exit 1 if either file is stale.
//! * `cargo xtask kmod-src OUT.rs`: `uapi`, `ring` and `driver-core` as one source file for the
//!   kernel module (see `kmod_src`).

use std::process::ExitCode;

const USAGE: &str = "usage: cargo xtask gen-header [--check] | kmod-src OUT.rs

  gen-header          write uapi/include/davinci/uapi.h (and the generated blocks of docs/abi.md)
                      from davinci-uapi's layout metadata
  gen-header --check  write nothing; exit 1 if a checked-in file differs from what would be written
  kmod-src OUT.rs     write uapi, ring and driver-core as one source file for the kernel module";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["gen-header"] => gen_header(false),
        ["gen-header", "--check"] | ["--check", "gen-header"] => gen_header(true),
        ["kmod-src", out] => kmod_src(out),
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
