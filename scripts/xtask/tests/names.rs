//! One name per idea (`cargo xtask check-names`): a retired name for an open's handle in the
//! client table (`client`) or for the id the device reports for a client (`client_id`) fails
//! with where it is and what to call it; the ABI's own field names, comments and strings
//! pass; and the tree as it is passes.

use std::path::PathBuf;

use xtask::tree::metadata::Workspace;
use xtask::tree::names::{self, findings_in};

fn messages(path: &str, text: &str) -> Vec<String> {
    findings_in(path, text).into_iter().map(|f| f.0).collect()
}

#[test]
fn a_retired_name_for_the_open_fails_naming_file_line_and_the_word() {
    let text = "fn f(dev: &Dev) {\n    let (holder_handle, h) = dev.first();\n}\n";
    let m = messages("core/driver-core/src/device/clients.rs", text);
    assert_eq!(m.len(), 1, "{m:?}");
    assert!(
        m[0].starts_with("core/driver-core/src/device/clients.rs:2: `holder_handle`"),
        "{m:?}"
    );
    assert!(m[0].contains("call it `client`"), "{m:?}");
    // `open` as a u32 is the open's handle; the function and the method are not.
    let m = messages(
        "shim/src/backend/embedded.rs",
        "struct E {\n    open: u32,\n}\nfn g(open: &u32) {}\nfn open() {}\nfn h(d: &D) { d.open(p); }\n",
    );
    assert_eq!(m.len(), 2, "{m:?}");
    assert!(m[0].contains("embedded.rs:2: `open`") && m[1].contains("embedded.rs:4: `open`"));
    assert!(m.iter().all(|m| m.contains("call it `client`")), "{m:?}");
}

#[test]
fn caller_id_is_an_abi_field_only() {
    // Bindings and functions named after the field fail ...
    let text = "fn f(i: &DeviceInfo) -> u32 {\n    let caller_id = i.caller_id;\n    \
                DeviceInfo { caller_id, ..*i };\n    caller_id\n}\nfn caller_id() {}\n\
                fn g(caller_id: u32) {}\n";
    let m = messages("shim/src/device.rs", text);
    let lines: Vec<&str> = m.iter().map(|m| m.split(": `").next().unwrap()).collect();
    assert_eq!(
        lines,
        [
            "shim/src/device.rs:2",
            "shim/src/device.rs:3",
            "shim/src/device.rs:4",
            "shim/src/device.rs:6",
            "shim/src/device.rs:7"
        ],
        "{m:?}"
    );
    assert!(m.iter().all(|m| m.contains("call it `client_id`")), "{m:?}");
    // ... the field itself passes: read, given a value, declared in the ABI's files.
    let fields = "fn f(i: &DeviceInfo, p: *const Info) -> u32 {\n    \
                  let x = DeviceInfo { caller_id: i.caller_id, ..*i };\n    \
                  unsafe { (*p).caller_id }\n}\n";
    assert_eq!(
        messages("core/driver-core/src/device/mod.rs", fields),
        [] as [String; 0]
    );
    let decl = "pub struct DeviceInfo {\n    pub caller_id: u32,\n}\n";
    assert_eq!(
        messages("uapi/src/args/device_info.rs", decl),
        [] as [String; 0]
    );
    assert_eq!(messages("uapi/src/args/usage.rs", decl).len(), 1);
    // C: the field through a pointer or a struct.
    let c =
        "static u32 f(struct davinci_device_info *i) { return i->caller_id + i[0].caller_id; }\n";
    assert_eq!(messages("kmod-rust/src/helpers.c", c), [] as [String; 0]);
}

#[test]
fn comments_and_strings_may_say_anything() {
    let text = r####"
/// GET_INFO's `caller_id`; once `holder_handle` (/* nested */ still a comment).
/* block: caller_id, open: u32 /* nested caller_id */ holder_handle */
fn f() -> (&'static str, char, &'static str) {
    let a = "caller_id \" holder_handle";
    let b = r#"open: u32 "caller_id""#;
    let c = '"'; // a quote in a char literal does not open a string: caller_id
    (a, c, b)
}
"####;
    assert_eq!(messages("shim/src/x.rs", text), [] as [String; 0]);
    // Code after a string, a char literal and a lifetime is still read.
    let after = "fn f<'a>(s: &'a str) { let c = '\\''; let x = \"s\"; let caller_id = 1; }\n";
    assert_eq!(messages("shim/src/x.rs", after).len(), 1);
}

#[test]
fn the_checked_files_are_the_members_code_and_the_modules_and_a_planted_name_fails() {
    let root = std::env::temp_dir().join(format!("xtask-names-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    for (p, text) in [
        ("core/driver-core/src/lib.rs", "pub fn ok(client: u32) {}\n"),
        (
            "core/driver-core/tests/t.rs",
            "fn t(holder_handle: u32) {}\n",
        ),
        (
            "core/driver-core/target/debug/x.rs",
            "fn t(holder_handle: u32) {}\n",
        ),
        (
            "kmod-rust/src/helpers.c",
            "int f(int holder_id) { return 0; }\n",
        ),
        ("kmod-rust/src/wake.rs", "fn w(client: u32) {}\n"),
        ("elsewhere/x.rs", "fn t(holder_handle: u32) {}\n"),
    ] {
        let path = root.join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let files = names::files(&root, &[PathBuf::from("core/driver-core")]);
    let shown: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
    assert_eq!(
        shown,
        [
            "core/driver-core/src/lib.rs",
            "core/driver-core/tests/t.rs",
            "kmod-rust/src/helpers.c",
            "kmod-rust/src/wake.rs"
        ]
    );
    let bad: Vec<String> = names::check(&root, &files)
        .into_iter()
        .map(|f| f.0)
        .collect();
    assert_eq!(bad.len(), 2, "{bad:?}");
    assert!(bad[0].starts_with("core/driver-core/tests/t.rs:1: `holder_handle`"));
    assert!(bad[1].starts_with("kmod-rust/src/helpers.c:1: `holder_id`"));
    assert!(bad[1].contains("call it `client_id`"));
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn the_tree_uses_one_name_per_idea() {
    let root = xtask::workspace_root();
    let ws = Workspace::load(&root).expect("cargo metadata");
    let dirs: Vec<PathBuf> = ws.members.iter().map(|p| PathBuf::from(&p.dir)).collect();
    let files = names::files(&root, &dirs);
    assert!(
        files.len() > 300
            && files
                .iter()
                .any(|f| f.ends_with("core/driver-core/src/device/clients.rs"))
            && files
                .iter()
                .any(|f| f.ends_with("kmod-rust/src/pci/helpers.c")),
        "{} files",
        files.len()
    );
    let bad = names::check(&root, &files);
    assert!(bad.is_empty(), "{bad:#?}");
}
