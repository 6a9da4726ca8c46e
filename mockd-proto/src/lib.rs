//! What `davinci-mockd` and its clients share: the wire protocol ([`wire`], re-exported
//! here), `SOCK_SEQPACKET` socket I/O with descriptor passing ([`sockio`]), and where the
//! sockets live ([`default_socket_dir`], [`socket_name`]).
//!
//! The daemon (`davinci-mock-device`) and the runtime library (`davinci-shim`, whose
//! `mock:SOCKET` backend is a client of the daemon) both depend on this crate and on nothing
//! of each other: a runtime that talks to a daemon does not link the device.
//!
//! `unsafe` is in [`sockio`] only (adopting descriptors the kernel just installed).
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod sockio;
pub mod wire;

pub use wire::*;

use std::path::PathBuf;

/// File name of device `n`'s socket.
pub fn socket_name(n: u32) -> String {
    format!("davinci{n}.sock")
}

/// The socket directory used when none is given: `$DAVINCI_SOCKET_DIR`, else
/// `/run/davinci` for root, else `$XDG_RUNTIME_DIR/davinci`, else `/tmp/davinci-$UID`.
pub fn default_socket_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("DAVINCI_SOCKET_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    let uid = nix::unistd::getuid().as_raw();
    if uid == 0 {
        return PathBuf::from("/run/davinci");
    }
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("davinci");
    }
    PathBuf::from(format!("/tmp/davinci-{uid}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_dir_honours_the_override() {
        // Only the override is deterministic here; the rest depends on uid and environment.
        let d = default_socket_dir();
        assert!(d.is_absolute() || std::env::var_os("DAVINCI_SOCKET_DIR").is_some());
        assert_eq!(socket_name(3), "davinci3.sock");
    }
}
