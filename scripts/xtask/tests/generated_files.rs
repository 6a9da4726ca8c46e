//! The checked-in header and the generated blocks of docs/abi.md must be exactly what
//! `cargo xtask gen-header` would write from the Rust definitions today.

use std::path::{Path, PathBuf};
use std::process::Command;

use davinci_uapi::layout::{FieldInfo, StructInfo};
use xtask::{
    c_compiler, c_header, generated_files, render_header, render_runtime_header, workspace_root,
    Abi, ABI_DOC_PATH, BANNER, HEADER_PATH, RUNTIME_BANNER, RUNTIME_HEADER_PATH, RUNTIME_SOURCES,
};

fn stale_message(g: &xtask::Generated) -> String {
    let diff = match g.first_difference() {
        Some((line, have, want)) => {
            format!("first difference at line {line}:\n  checked in: {have}\n  generated:  {want}")
        }
        None => "missing or unreadable".to_string(),
    };
    format!(
        "{} is stale: it is not what the Rust definitions in uapi/src generate ({diff}).\n\
         Run `cargo xtask gen-header` and commit the result together with the ABI change.",
        g.path
    )
}

#[test]
fn checked_in_header_is_up_to_date() {
    let files = generated_files(&workspace_root()).expect("metadata renders");
    let header = files
        .iter()
        .find(|g| g.path == HEADER_PATH)
        .expect("header is always generated");
    assert!(
        header.actual.is_some(),
        "{HEADER_PATH} is missing: run `cargo xtask gen-header`"
    );
    assert!(header.is_fresh(), "{}", stale_message(header));
    assert_eq!(header.expected, c_header());
    assert_eq!(c_header().lines().next(), Some(BANNER));
}

/// The header is for C clients: its comments name C things (`davinci_device_info.features`,
/// `__atomic_thread_fence`), never the Rust types and paths they are generated from
/// (`DeviceInfo::features`, `fence(SeqCst)`, a `Fault`).
#[test]
fn header_comments_name_no_rust_types() {
    let header = c_header();
    let mut names: Vec<&str> = davinci_uapi::STRUCTS.iter().map(|s| s.rust_name).collect();
    names.extend(davinci_uapi::FLAGS.iter().map(|f| f.rust_name));
    names.extend([
        "Fault",
        "FaultKind",
        "FaultOperand",
        "Errno",
        "Opcode",
        "Dtype",
        "DevAddr",
        "ShareMode",
        "WaitKind",
    ]);
    let mut found = Vec::new();
    for n in &names {
        let camel = n.chars().filter(char::is_ascii_uppercase).count() > 1;
        let word = |w: &str| w.trim_matches(|c: char| !c.is_ascii_alphanumeric()) == *n;
        if header.contains(&format!("`{n}`"))
            || header.contains(&format!("{n}::"))
            || (camel && header.split_whitespace().any(word))
        {
            found.push(*n);
        }
    }
    for rustism in ["::", "SeqCst", "Option<", "&self"] {
        if header.contains(rustism) {
            found.push(rustism);
        }
    }
    assert!(
        found.is_empty(),
        "{HEADER_PATH} names Rust things a C client cannot use: {found:?}"
    );
}

/// A reserved field the driver writes is one a client ignores (docs/abi.md 1.4): its comment
/// says so and never promises "zero", which a later minor may break (issue 22: a 1.0 client
/// checked GET_INFO's reserved[0], which 1.1 gave a meaning).
#[test]
fn reserved_output_fields_say_to_ignore_them() {
    let mut wrong = Vec::new();
    for s in davinci_uapi::STRUCTS {
        for f in s.fields {
            if !(f.name.starts_with("pad") || f.name.starts_with("reserved")) {
                continue;
            }
            let doc = f.doc.join(" ");
            let written = doc.contains("from driver") || doc.contains("from device");
            let read = doc.contains("to driver") || doc.contains("to device");
            let untagged = !written && !read;
            if (written || untagged)
                && (!doc.contains("ignore") || doc.to_lowercase().contains("zero"))
            {
                wrong.push(format!("{}.{}: {doc}", s.c_name, f.name));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "say \"ignore it\", not \"zero\": {wrong:#?}"
    );
}

#[test]
fn abi_doc_generated_blocks_are_up_to_date() {
    let files = generated_files(&workspace_root()).expect("metadata renders");
    let doc = files
        .iter()
        .find(|g| g.path == ABI_DOC_PATH)
        .unwrap_or_else(|| panic!("{ABI_DOC_PATH} is missing"));
    assert!(doc.is_fresh(), "{}", stale_message(doc));
}

/// `uapi/src` after someone changed a field's type but did not regenerate: the header that
/// metadata renders differs from the checked-in one, so the freshness test above fails.
#[test]
fn changing_a_field_type_changes_the_header() {
    let checked_in = c_header();
    let mut structs: Vec<StructInfo> = davinci_uapi::STRUCTS.to_vec();
    let args = structs
        .iter_mut()
        .find(|s| s.c_name == "davinci_create_event_args")
        .expect("struct exists");
    let fields: Vec<FieldInfo> = args
        .fields
        .iter()
        .map(|f| {
            if f.name == "flags" {
                FieldInfo { ty: "i32", ..*f }
            } else {
                *f
            }
        })
        .collect();
    args.fields = Box::leak(fields.into_boxed_slice());
    let changed = render_header(&Abi {
        structs: &structs,
        ..Abi::current()
    })
    .expect("renders");
    assert_ne!(changed, checked_in);
    let diff: Vec<_> = changed
        .lines()
        .zip(checked_in.lines())
        .filter(|(a, b)| a != b)
        .collect();
    assert_eq!(
        diff,
        vec![("\t__s32 flags;", "\t__u32 flags;")],
        "exactly the changed field differs"
    );
}

fn xtask_cmd(root: &Path, check: bool) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xtask"));
    cmd.arg("gen-header");
    if check {
        cmd.arg("--check");
    }
    cmd.env("XTASK_WORKSPACE_ROOT", root)
        .output()
        .expect("run xtask")
}

#[test]
fn cli_check_fails_on_a_stale_copy_and_gen_header_fixes_it() {
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("xtask-cli");
    let _ = std::fs::remove_dir_all(&root);
    let header = root.join(HEADER_PATH);
    std::fs::create_dir_all(header.parent().expect("has parent")).expect("mkdir");
    std::fs::create_dir_all(root.join("docs")).expect("mkdir");
    std::fs::create_dir_all(root.join(RUNTIME_HEADER_PATH).parent().expect("has parent"))
        .expect("mkdir");
    let real = workspace_root();
    let h = std::fs::read_to_string(real.join(HEADER_PATH)).expect("read header");
    std::fs::write(
        &header,
        h.replacen("__u32 slot_size;", "__u16 slot_size;", 1),
    )
    .expect("write");
    std::fs::copy(real.join(ABI_DOC_PATH), root.join(ABI_DOC_PATH)).expect("copy doc");
    copy_runtime_sources(&real, &root);
    std::fs::copy(
        real.join(RUNTIME_HEADER_PATH),
        root.join(RUNTIME_HEADER_PATH),
    )
    .expect("copy runtime header");

    let out = xtask_cmd(&root, true);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "--check must fail on a stale header: {stderr}"
    );
    assert!(
        stderr.contains(HEADER_PATH) && stderr.contains("__u16 slot_size;"),
        "{stderr}"
    );
    assert!(stderr.contains("run `cargo xtask gen-header`"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(&header).expect("read"),
        h.replacen("__u32 slot_size;", "__u16 slot_size;", 1)
    );

    let out = xtask_cmd(&root, false);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(&header).expect("read"), c_header());
    let out = xtask_cmd(&root, true);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn cli_check_passes_on_the_workspace_and_rejects_unknown_arguments() {
    let out = xtask_cmd(&workspace_root(), true);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .arg("gen-headers")
        .output()
        .expect("run xtask");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("unknown arguments [\"gen-headers\"]")
            && stderr.contains("usage: cargo xtask"),
        "{stderr}"
    );
}

/// `bindings/capi/src` of the workspace, copied under `root` (what the runtime header is made from).
fn copy_runtime_sources(real: &Path, root: &Path) {
    let dst = root.join(RUNTIME_SOURCES);
    std::fs::create_dir_all(&dst).expect("mkdir");
    for e in std::fs::read_dir(real.join(RUNTIME_SOURCES)).expect("read bindings/capi/src") {
        let e = e.expect("entry");
        std::fs::copy(e.path(), dst.join(e.file_name())).expect("copy source");
    }
}

#[test]
fn checked_in_runtime_header_is_up_to_date() {
    let files = generated_files(&workspace_root()).expect("renders");
    let h = files
        .iter()
        .find(|g| g.path == RUNTIME_HEADER_PATH)
        .expect("the runtime header is always generated");
    assert!(
        h.is_fresh(),
        "{RUNTIME_HEADER_PATH} is stale: it is not what bindings/capi/src generates ({:?}). Run `cargo \
         xtask gen-header` and commit the result with the change to bindings/capi/src.",
        h.first_difference()
    );
    assert_eq!(h.expected.lines().next(), Some(RUNTIME_BANNER));
    // Every entry point of the crate is declared.
    for f in [
        "davinci_last_error",
        "davinci_device_open",
        "davinci_stream_submit",
        "davinci_record_elapsed_ns",
        "davinci_buffer_map",
        "davinci_host_view_release",
    ] {
        assert!(
            h.expected.contains(&format!(" {f}(")),
            "{f} is not declared"
        );
    }
}

/// A change to an entry point's doc comment in bindings/capi/src changes the header: `--check` fails
/// on the checked-in copy, naming it, until `gen-header` rewrites it.
#[test]
fn cli_check_fails_when_capi_src_changed() {
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("xtask-cli-runtime");
    let _ = std::fs::remove_dir_all(&root);
    let real = workspace_root();
    for p in [HEADER_PATH, RUNTIME_HEADER_PATH] {
        let dst = root.join(p);
        std::fs::create_dir_all(dst.parent().expect("has parent")).expect("mkdir");
        std::fs::copy(real.join(p), &dst).expect("copy header");
    }
    copy_runtime_sources(&real, &root);
    let out = xtask_cmd(&root, true);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let lib = root.join(RUNTIME_SOURCES).join("device.rs");
    let text = std::fs::read_to_string(&lib).expect("read");
    let changed = text.replacen(
        "/// Threads: any (each thread has its own message).",
        "/// Threads: any thread.",
        1,
    );
    assert_ne!(
        text, changed,
        "the doc line to change is gone from bindings/capi/src/device.rs"
    );
    std::fs::write(&lib, changed).expect("write");
    let out = xtask_cmd(&root, true);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(RUNTIME_HEADER_PATH) && stderr.contains("Threads: any thread."),
        "{stderr}"
    );
    let out = xtask_cmd(&root, false);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(root.join(RUNTIME_HEADER_PATH)).expect("read"),
        render_runtime_header(&root).expect("renders")
    );
}

/// runtime.h compiles as C11 with every warning an error, on its own (it includes uapi.h)
/// and after uapi.h.
#[test]
fn runtime_header_compiles_as_strict_c11() {
    let Some(cc) = c_compiler() else {
        panic!("no C compiler (cc or gcc): install one (Debian: apt-get install gcc)");
    };
    let root = workspace_root();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("runtime-h");
    std::fs::create_dir_all(&dir).expect("mkdir");
    for (name, text) in [
        ("alone.c", "#include <davinci/runtime.h>\nint main(void) { return davinci_runtime_version() == DAVINCI_RUNTIME_VERSION ? 0 : 1; }\n"),
        ("both.c", "#include <davinci/uapi.h>\n#include <davinci/runtime.h>\n#include <davinci/runtime.h>\nint main(void) { davinci_region r = davinci_whole(0); return (int)r.offset; }\n"),
    ] {
        let src = dir.join(name);
        std::fs::write(&src, text).expect("write");
        let out = Command::new(cc)
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-fsyntax-only"])
            .arg("-I")
            .arg(root.join("bindings/capi/include"))
            .arg("-I")
            .arg(root.join("uapi/include"))
            .arg(&src)
            .output()
            .expect("run the C compiler");
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
