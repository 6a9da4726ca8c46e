//! `cargo xtask kmod-src`: the device-side crates as one source file compile as a `no_std`
//! crate with warnings denied, with no cargo features, as the kernel module will compile them.

use std::process::Command;

use xtask::{kmod_src, workspace_root};

#[test]
fn generated_kernel_source_compiles_as_one_no_std_crate() {
    let text = kmod_src::render(&workspace_root()).expect("render");
    for (name, _) in kmod_src::CRATES {
        assert!(text.contains(&format!("pub mod {name} {{")), "{name}");
    }
    // Test- and loom-only modules are left out, not just cfg'd out.
    assert!(!text.contains("fn loom_"), "loom code leaked in");
    assert!(
        !text.contains("pub mod test_util"),
        "test support leaked in"
    );
    assert!(
        !text.contains("pub mod std_lock"),
        "user-space support (feature std) leaked in"
    );
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("kmod-src");
    std::fs::create_dir_all(&dir).expect("dir");
    let src = dir.join("davinci_core.rs");
    std::fs::write(&src, &text).expect("write");
    let root = dir.join("root.rs");
    std::fs::write(
        &root,
        format!(
            "#![no_std]\n#![deny(warnings)]\ninclude!({:?});\n\
             // The items the module uses resolve through the rewritten paths.\n\
             pub use davinci_driver_core::{{DeviceCore, Platform}};\n\
             pub use davinci_ring::{{DeviceConsumer, RingRegion}};\n\
             pub const MAJOR: u16 = davinci_uapi::ABI_VERSION_MAJOR;\n",
            src
        ),
    )
    .expect("write root");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = Command::new(rustc)
        .args([
            "--edition",
            "2021",
            "--crate-type",
            "lib",
            "--emit",
            "metadata",
            "-o",
        ])
        .arg(dir.join("libroot.rmeta"))
        .arg(&root)
        .output()
        .expect("run rustc");
    assert!(
        out.status.success(),
        "the generated kernel source does not compile:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
