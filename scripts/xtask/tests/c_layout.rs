//! The C side of the ABI contract: a C program generated from the Rust metadata (expected
//! sizes, offsets, signedness, request numbers and constants written in as literals) is
//! compiled with the system C compiler against the checked-in `uapi/include/davinci/uapi.h`
//! and run. Any difference between the header and the Rust definitions fails the test, and
//! the negative tests below prove that it does.

use std::path::{Path, PathBuf};
use std::process::Command;

use davinci_uapi::layout::{FieldInfo, StructInfo};
use xtask::{
    c_compiler, render_layout_check_program, workspace_root, Abi, CHECK_SUMMARY_PREFIX, HEADER_PATH,
};

fn cc() -> &'static str {
    c_compiler().unwrap_or_else(|| {
        panic!("no C compiler: neither `cc` nor `gcc` runs. Install one (Debian: apt-get install gcc); scripts/test.sh needs it")
    })
}

/// A fresh scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("c_layout-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

fn include_dir() -> PathBuf {
    workspace_root().join("uapi/include")
}

/// What compiling (and, if that worked, running) a C program gave.
#[derive(Debug)]
struct CRun {
    compile_log: String,
    /// `None` if it did not compile.
    run: Option<(Option<i32>, String)>,
}

const CFLAGS: &[&str] = &["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic"];

fn compile_and_run(source: &str, include: &Path, extra: &[&str], dir: &Path) -> CRun {
    let src = dir.join("layout_check.c");
    let exe = dir.join("layout_check");
    std::fs::write(&src, source).unwrap_or_else(|e| panic!("cannot write {}: {e}", src.display()));
    let out = Command::new(cc())
        .args(CFLAGS)
        .args(extra)
        .arg("-I")
        .arg(include)
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", cc()));
    let compile_log = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return CRun {
            compile_log,
            run: None,
        };
    }
    let run = Command::new(&exe)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", exe.display()));
    CRun {
        compile_log,
        run: Some((
            run.status.code(),
            String::from_utf8_lossy(&run.stdout).into_owned(),
        )),
    }
}

/// Asserts the program compiled, ran, made exactly `checks` checks and found no difference.
fn assert_all_equal(r: &CRun, checks: usize, what: &str) {
    let Some((code, stdout)) = &r.run else {
        panic!(
            "{what}: the layout check program does not compile against {HEADER_PATH} (stale header? run \
             `cargo xtask gen-header`):\n{}",
            r.compile_log
        );
    };
    let summary = format!("{CHECK_SUMMARY_PREFIX}{checks} checks, 0 failures");
    assert!(
        *code == Some(0) && stdout.lines().any(|l| l == summary),
        "{what}: the C header disagrees with the Rust ABI (exit {code:?}); run `cargo xtask gen-header`:\n{stdout}"
    );
}

/// How many checks the program must make at least: one per struct size, per field offset and
/// field size, per command; counted here independently of the generator.
fn minimum_checks() -> usize {
    let fields: usize = davinci_uapi::STRUCTS.iter().map(|s| s.fields.len()).sum();
    davinci_uapi::STRUCTS.len() + 2 * fields + davinci_uapi::COMMANDS.len()
}

#[test]
fn checked_in_header_matches_every_rust_size_offset_and_request_number() {
    let prog = render_layout_check_program(&Abi::current()).expect("metadata renders");
    assert!(
        prog.checks >= minimum_checks(),
        "{} checks < {}",
        prog.checks,
        minimum_checks()
    );
    // Every struct, every field and every command is named in the program.
    for s in davinci_uapi::STRUCTS {
        assert!(
            prog.source
                .contains(&format!("\"sizeof(struct {})\"", s.c_name)),
            "{}",
            s.c_name
        );
        for f in s.fields {
            assert!(prog
                .source
                .contains(&format!("\"offsetof(struct {}, {})\"", s.c_name, f.name)));
        }
    }
    for c in davinci_uapi::COMMANDS {
        assert!(
            prog.source
                .contains(&format!("(DAVINCI_IOCTL_{}), {:#x}ULL", c.name, c.request)),
            "{}",
            c.name
        );
    }
    let r = compile_and_run(&prog.source, &include_dir(), &[], &scratch("native"));
    assert_all_equal(&r, prog.checks, "native");
}

#[test]
fn checked_in_header_matches_on_32_bit_if_the_machine_can_build_it() {
    // Probe: can this machine build and run a -m32 program that uses the kernel uapi headers?
    let dir = scratch("m32-probe");
    let probe = "#include <linux/types.h>\n#include <linux/ioctl.h>\n#include <stdio.h>\n\
                 int main(void) { printf(\"%u\\n\", (unsigned)sizeof(__u64)); return 0; }\n";
    let p = compile_and_run(probe, &include_dir(), &["-m32"], &dir);
    if !matches!(&p.run, Some((Some(0), _))) {
        println!(
            "note: skipping the -m32 layout check: this machine cannot build 32-bit programs \
             (install gcc-multilib to enable it):\n{}",
            p.compile_log.lines().take(3).collect::<Vec<_>>().join("\n")
        );
        return;
    }
    let prog = render_layout_check_program(&Abi::current()).expect("metadata renders");
    // The layouts alone are for 32-bit builds too...
    let r = compile_and_run(
        &prog.source,
        &include_dir(),
        &["-m32", "-DDAVINCI_UAPI_LAYOUT_ONLY"],
        &scratch("m32"),
    );
    assert_all_equal(&r, prog.checks, "-m32");
    // ...but a 32-bit client that wants the data plane is told at compile time.
    let r = compile_and_run(
        &prog.source,
        &include_dir(),
        &["-m32"],
        &scratch("m32-client"),
    );
    assert!(
        r.run.is_none(),
        "a 32-bit build without DAVINCI_UAPI_LAYOUT_ONLY must not compile"
    );
    assert!(
        r.compile_log.contains("64-bit process"),
        "{}",
        r.compile_log
    );
}

/// The header's C helpers: wrapping comparisons across `u32::MAX` and every sign convention
/// of the record errno, compiled with the project's strictest flags plus -Wconversion.
#[test]
fn header_helpers_compare_wrapping_and_undo_the_record_sign() {
    let src = r#"#include <stdio.h>
#include <davinci/uapi.h>
int main(void)
{
	struct davinci_event_record r;
	int bad = 0;
	bad += !davinci_reached(5u, 5u);
	bad += !davinci_reached(6u, 5u);
	bad += davinci_reached(4u, 5u);
	bad += !davinci_reached(2u, 0xfffffffeu);   /* across the wrap */
	bad += davinci_reached(0xfffffffeu, 2u);
	bad += davinci_ring_used(3u, 0xfffffffeu) != 5u;
	r.status = 0;
	bad += davinci_record_errno(&r) != 0;
	r.status = -13;
	bad += davinci_record_errno(&r) != 13;
	r.status = -2147483647 - 1;
	bad += davinci_record_errno(&r) != 71;
	printf("%d\n", bad);
	return bad;
}
"#;
    let r = compile_and_run(src, &include_dir(), &["-Wconversion"], &scratch("helpers"));
    match &r.run {
        Some((Some(0), out)) => assert_eq!(out.trim(), "0"),
        other => panic!(
            "helpers: {other:?}
{}",
            r.compile_log
        ),
    }
}

#[test]
fn header_compiles_warning_free_as_c99_c11_and_cpp() {
    let dir = scratch("dialects");
    let src = dir.join("include_only.c");
    std::fs::write(
        &src,
        "#include <davinci/uapi.h>\nint davinci_header_included;\n",
    )
    .expect("write");
    let mut compilers: Vec<(String, Vec<&str>)> = vec![
        (cc().to_string(), vec!["-std=c99"]),
        (cc().to_string(), vec!["-std=c11"]),
        (cc().to_string(), vec!["-std=gnu89"]),
    ];
    let cxx = ["c++", "g++"].into_iter().find(|c| {
        Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    match cxx {
        Some(cxx) => compilers.push((cxx.to_string(), vec!["-x", "c++", "-std=c++11"])),
        None => println!("note: no C++ compiler; skipping the C++ include check"),
    }
    for (compiler, flags) in compilers {
        let out = Command::new(&compiler)
            .args(&flags)
            .args([
                "-Wall",
                "-Wextra",
                "-Werror",
                "-pedantic",
                "-fsyntax-only",
                "-I",
            ])
            .arg(include_dir())
            .arg(&src)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {compiler}: {e}"));
        assert!(
            out.status.success(),
            "{compiler} {flags:?} rejects {HEADER_PATH}:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn leak<T>(v: Vec<T>) -> &'static [T] {
    Box::leak(v.into_boxed_slice())
}

/// Rust metadata as it would be after an unregenerated change: `HandleArgs::handle` became a
/// `u64` (size 16, `pad` at 8, so DESTROY_CONTEXT's request number changes), `EventRecord::status`
/// became unsigned, and `DAVINCI_OP_FILL` changed value.
fn changed_abi() -> Abi<'static> {
    let mut structs: Vec<StructInfo> = davinci_uapi::STRUCTS.to_vec();
    for s in &mut structs {
        if s.c_name == "davinci_handle_args" {
            s.size = 16;
            s.fields = leak(vec![
                FieldInfo {
                    name: "handle",
                    ty: "u64",
                    offset: 0,
                    size: 8,
                    doc: &[],
                },
                FieldInfo {
                    name: "pad",
                    ty: "u32",
                    offset: 8,
                    size: 4,
                    doc: &[],
                },
            ]);
        }
        if s.c_name == "davinci_event_record" {
            let fields: Vec<FieldInfo> = s
                .fields
                .iter()
                .map(|f| {
                    if f.name == "status" {
                        FieldInfo { ty: "u32", ..*f }
                    } else {
                        *f
                    }
                })
                .collect();
            s.fields = leak(fields);
        }
    }
    let mut commands = davinci_uapi::COMMANDS.to_vec();
    for c in &mut commands {
        if c.name == "DESTROY_CONTEXT" {
            c.size = 16;
            c.request = davinci_uapi::ioctl::ioc(davinci_uapi::ioctl::IOC_WRITE, b'd', c.nr, 16);
        }
    }
    let mut groups: Vec<&'static [davinci_uapi::layout::ConstGroup]> = Vec::new();
    for g in davinci_uapi::CONST_GROUPS {
        let changed: Vec<_> = g
            .iter()
            .map(|g| {
                let items: Vec<_> = g
                    .items
                    .iter()
                    .map(|&(n, v, d)| {
                        if n == "FILL" && g.c_prefix == "DAVINCI_OP_" {
                            (n, 9, d)
                        } else {
                            (n, v, d)
                        }
                    })
                    .collect();
                davinci_uapi::layout::ConstGroup {
                    items: leak(items),
                    ..*g
                }
            })
            .collect();
        groups.push(leak(changed));
    }
    Abi {
        structs: leak(structs),
        commands: leak(commands),
        const_groups: leak(groups),
        ..Abi::current()
    }
}

#[test]
fn a_rust_side_change_without_regeneration_fails_the_c_check() {
    let prog = render_layout_check_program(&changed_abi()).expect("changed metadata renders");
    let r = compile_and_run(&prog.source, &include_dir(), &[], &scratch("changed-rust"));
    let Some((code, stdout)) = &r.run else {
        panic!("must compile, the header is fine:\n{}", r.compile_log)
    };
    assert_eq!(*code, Some(1), "the check program must fail:\n{stdout}");
    for expected in [
        "MISMATCH sizeof(struct davinci_handle_args): C header 8",
        "MISMATCH offsetof(struct davinci_handle_args, pad): C header 4",
        "MISMATCH sizeof(struct davinci_handle_args.handle): C header 4",
        "MISMATCH struct davinci_event_record.status is signed: C header 1",
        "MISMATCH DAVINCI_IOCTL_DESTROY_CONTEXT: C header 1074291714",
        "MISMATCH DAVINCI_OP_FILL: C header 1",
    ] {
        assert!(
            stdout.contains(expected),
            "missing `{expected}` in:\n{stdout}"
        );
    }
    // Nothing but these differences (the header itself is fine).
    assert!(
        stdout.contains(&format!("{} checks, 6 failures", prog.checks)),
        "{stdout}"
    );
}

/// A copy of the header with `edit` applied, in its own include directory.
fn tampered_header(name: &str, edit: impl Fn(String) -> String) -> PathBuf {
    let dir = scratch(name);
    let inc = dir.join("include/davinci");
    std::fs::create_dir_all(&inc).expect("mkdir");
    let orig = std::fs::read_to_string(workspace_root().join(HEADER_PATH)).expect("read header");
    let changed = edit(orig.clone());
    assert_ne!(changed, orig, "{name}: the edit did not change the header");
    std::fs::write(inc.join("uapi.h"), changed).expect("write tampered header");
    dir.join("include")
}

fn replace_once(s: &str, from: &str, to: &str) -> String {
    assert_eq!(
        s.matches(from).count(),
        1,
        "`{from}` must occur exactly once"
    );
    s.replacen(from, to, 1)
}

/// `header` with `edit` applied to the body of `struct name { ... };` only.
fn edit_struct(header: &str, name: &str, edit: impl Fn(&str) -> String) -> String {
    let open = format!("struct {name} {{\n");
    let start = header.find(&open).unwrap_or_else(|| panic!("no {open}")) + open.len();
    let end = start + header[start..].find("\n};\n").expect("struct is closed");
    format!(
        "{}{}{}",
        &header[..start],
        edit(&header[start..end]),
        &header[end..]
    )
}

fn strip_layout_asserts(s: String) -> String {
    s.lines()
        .filter(|l| !l.starts_with("_Static_assert("))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn an_edited_header_copy_fails_the_c_check() {
    let prog = render_layout_check_program(&Abi::current()).expect("metadata renders");
    type Edit = fn(&str) -> String;
    let edits: [(&str, Edit, &str); 4] = [
        // The struct keeps its size (tail padding) and every offset: only the field size check
        // sees this one.
        (
            "field-type",
            |h| {
                edit_struct(h, "davinci_event_record", |b| {
                    replace_once(b, "\t__u64 timestamp_ns;", "\t__u32 timestamp_ns;")
                })
            },
            "MISMATCH sizeof(struct davinci_event_record.timestamp_ns)",
        ),
        (
            "field-order",
            |h| {
                edit_struct(h, "davinci_device_info", |b| {
                    let b = replace_once(b, "\t__u32 max_streams;", "\t__u32 SWAP;");
                    let b = replace_once(&b, "\t__u32 max_events;", "\t__u32 max_streams;");
                    replace_once(&b, "\t__u32 SWAP;", "\t__u32 max_events;")
                })
            },
            "MISMATCH offsetof(struct davinci_device_info, max_streams)",
        ),
        (
            "signedness",
            |h| {
                edit_struct(h, "davinci_event_record", |b| {
                    replace_once(b, "\t__s32 status;", "\t__u32 status;")
                })
            },
            "MISMATCH struct davinci_event_record.status is signed",
        ),
        (
            "request",
            |h| replace_once(h, "_IOW('d', 0x0f,", "_IOR('d', 0x0f,"),
            "MISMATCH DAVINCI_IOCTL_NOTIFY",
        ),
    ];
    for (name, edit, expect) in edits {
        // With its own layout asserts stripped, the copy compiles and the program must object.
        let inc = tampered_header(name, |h| strip_layout_asserts(edit(&h)));
        let r = compile_and_run(&prog.source, &inc, &[], &inc.join(".."));
        let Some((code, stdout)) = &r.run else {
            panic!("{name}: should compile:\n{}", r.compile_log)
        };
        assert_eq!(
            *code,
            Some(1),
            "{name}: the check program must fail:\n{stdout}"
        );
        assert!(
            stdout.contains(expect),
            "{name}: missing `{expect}` in:\n{stdout}"
        );
    }
    // With the asserts kept, a layout edit already fails to compile.
    let inc = tampered_header("asserts", |h| {
        edit_struct(&h, "davinci_event_record", |b| {
            replace_once(b, "\t__s32 status;", "\t__s64 status;")
        })
    });
    let r = compile_and_run(&prog.source, &inc, &[], &inc.join(".."));
    assert!(
        r.run.is_none(),
        "the header's own _Static_assert must reject the edited layout"
    );
    assert!(
        r.compile_log
            .contains("offsetof(struct davinci_event_record, opcode)"),
        "{}",
        r.compile_log
    );
}

/// The C example client (`uapi/examples/client.c`, docs/abi.md's worked example) builds
/// against the checked-in header with every warning an error, at -O0 and -O2 (where more
/// diagnostics run), and with clang too when the machine has it. Run without a device it
/// fails cleanly, naming the path.
#[test]
fn c_example_client_builds_warning_free_and_fails_cleanly_without_a_device() {
    let src = workspace_root().join("uapi/examples/client.c");
    let dir = scratch("example");
    let exe = dir.join("client");
    let mut compilers = vec![cc().to_string()];
    if Command::new("clang")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        compilers.push("clang".to_string());
    }
    for compiler in &compilers {
        for opt in ["-O0", "-O2"] {
            let out = Command::new(compiler)
                .args(CFLAGS)
                .args(["-Wconversion", "-Wshadow", opt, "-I"])
                .arg(include_dir())
                .arg(&src)
                .arg("-o")
                .arg(&exe)
                .output()
                .unwrap_or_else(|e| panic!("cannot run {compiler}: {e}"));
            assert!(
                out.status.success(),
                "{compiler} {opt} rejects uapi/examples/client.c:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    let run = Command::new(&exe)
        .arg("/dev/davinci-example-no-such-node")
        .output()
        .expect("run the example");
    assert_eq!(run.status.code(), Some(1));
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        err.contains("/dev/davinci-example-no-such-node") && err.contains("No such file"),
        "{err}"
    );
}
