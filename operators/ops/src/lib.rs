//! What the operators' tools share: `davinci-smi` (the CLI), `davinci-exporter` (metrics for
//! Prometheus) and `davinci-device-plugin` (Kubernetes) find devices the same way, name them
//! the same way and describe them to container runtimes with the same CDI model. Each tool is
//! a binary over this library; none is a library for another.
//!
//! * [`discover`]: which devices a tool talks to (`--device`, `--socket-dir`,
//!   `DAVINCI_DEVICE`, `/dev/davinci<N>`, the socket directories), and every place searched
//!   when nothing is found;
//! * [`cdi`]: the Container Device Interface spec of a set of devices (`davinci-smi cdi
//!   generate` writes it; the device plugin names its devices in it), checked as upstream's
//!   library checks a spec it loads, rendered as JSON or YAML and written atomically; with
//!   the feature `cdi-schema`, upstream's JSON schema as a validator for tests;
//! * [`events`]: the device's event log (READ_EVENTS) as the tools show it: names, a
//!   sentence per event, codes named on a command line, a reader's place across restarts;
//! * [`text`]: a tenant's strings (process names, container ids) and paths made safe to
//!   show: control, bidi and format characters escaped, bytes that are not UTF-8 as `\xNN`;
//! * the words the tools share: [`device_name`] here; durations and sizes are
//!   `davinci-units`', share-mode names `davinci_uapi::ShareMode`'s, device paths and
//!   `DAVINCI_DEVICE` the shim's.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod cdi;
pub mod discover;
pub mod events;
pub mod files;
pub mod text;

/// `davinci<N>`: the name of device N wherever a tool names it (discovery's messages, CDI
/// device names, the device plugin's IDs and logs).
pub fn device_name(id: u32) -> String {
    format!("davinci{id}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn devices_are_named_davinci_n() {
        assert_eq!(super::device_name(0), "davinci0");
        assert_eq!(super::device_name(12), "davinci12");
    }
}
