//! The command line of `davinci-pcidev`: parsing (a pure function, tested) and the help.
#![forbid(unsafe_code)]

use std::path::PathBuf;

use davinci_hwif::layout::{Bar2Layout, MAX_REGION, MIN_REGION};
use davinci_hwif::VECTORS;
use davinci_ivshmem::MAX_VECTORS;

use davinci_driver_core::InjectRule;

use crate::device::DeviceConfig;

/// A name GET_IDENTITY presents (`--model`, `--chip-name`): 1 to `max` bytes of printable
/// ASCII without spaces.
fn name_arg(option: &str, v: &str, max: usize) -> Result<String, String> {
    if v.is_empty() || v.len() > max || !v.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "{option} {v:?}: expected 1 to {max} printable ASCII characters without spaces"
        ));
    }
    Ok(v.to_string())
}

/// The help text.
pub const HELP: &str = "\
davinci-pcidev: the davinci PCI device outside the guest (QEMU's ivshmem-doorbell)

Usage: davinci-pcidev --socket PATH [--socket-mode OCTAL] [--socket-group GROUP]
                      [--size BYTES] [--vectors N] [--device-id N] [--inject FAULT[@SEL]]
                      [--chaos SEED[,RATE[,CLASS+CLASS...]]] [--model NAME] [--chip-name NAME]

Serves the ivshmem server protocol on the Unix socket PATH and is the device behind it:
BAR2 (the shared memory) holds the admin queue, the stream rings and device memory;
doorbells arrive on vector 1 (streams) and vector 0 (admin queue), interrupts go back on
the same vectors. Attach QEMU with
  -chardev socket,path=PATH,id=dv -device ivshmem-doorbell,chardev=dv,vectors=2

Options:
  --socket PATH    the socket to listen on (must not exist; removed on exit)
  --socket-mode OCTAL
                   the socket's permissions, whatever the umask (default 0600): whoever
                   may connect to it gets BAR2 mapped read-write, so it is for QEMU's user
  --socket-group GROUP
                   the socket's group (name or gid), set before its mode; with
                   --socket-mode 0660, that group's members (QEMU's user) may connect
  --size BYTES     BAR2's size: a power of two from 128K to 1G (default 64M; 256M, 1G...)
  --vectors N      MSI-X vectors per peer, at least 2 (default 2; at most 64)
  --device-id N    N of davinciN, as GET_INFO reports it (default 0)
  --inject FAULT[@SEL]
                   arm every stream with a fault from the start, to test a runtime's error
                   handling (the text of davinci-mockd --inject and of the kernel module's
                   inject parameter, which the guest's module can still change):
                   error-at=N[:ERRNO], hang-at=N or stop-at=N, counted per stream in tasks
                   taken (the first is 1), then optionally @pid=N,uid=N,comm=NAME,streams=N
  --chaos SEED[,RATE[,CLASS+CLASS...]]
                   the chaos device, for testing the guest's module (issue 42): a fraction
                   RATE (default 0.05) of admin replies are wrong on purpose (lengths, kinds,
                   offsets, counts, tags, duplicates, interrupt floods, notification words,
                   a stalled or rewound heartbeat, BAR2 header garbage, bit flips), drawn
                   from a PRNG seeded with SEED; each mutation is logged on stderr (the
                   first 300, then one in 50) with counts every 2000 requests and at exit.
                   CLASSES limits the draw to those classes (their log names, like
                   map-len-short+wrong-tag). An INJECT `reset` from the guest then also
                   closes every client (the guest re-probed a device it lost)
  --model NAME     the model GET_IDENTITY presents, e.g. Ascend910B3 (default
                   davinci_pcidev); printable ASCII without spaces, at most 31 bytes
  --chip-name NAME the chip name GET_IDENTITY presents, e.g. 910B3 (default pcidev0); at
                   most 11 bytes. The bus id is the guest's: its module reports where the
                   guest put the device
  -h, --help       this text

One guest at a time: while a peer is connected, another is refused (closed before it is
sent anything, BAR2 included; said on stderr).

SIGTERM or SIGINT stops it (within the idle timeout, 100 ms) and removes the socket.

Exit status: 0 stopped, 1 the device failed (the message says why), 2 bad command line.
";

/// A group by name or number.
fn parse_group(s: &str) -> Result<u32, String> {
    if let Ok(g) = s.parse::<u32>() {
        return Ok(g);
    }
    match nix::unistd::Group::from_name(s) {
        Ok(Some(g)) => Ok(g.gid.as_raw()),
        _ => Err(format!("--socket-group '{s}': no such group")),
    }
}

/// What the command line asks.
#[derive(Debug, Clone)]
pub enum Command {
    /// Print [`HELP`].
    Help,
    /// Serve on `socket`.
    Run {
        /// The socket's path.
        socket: PathBuf,
        /// The device's configuration.
        config: Box<DeviceConfig>,
    },
}

/// Parses the arguments (without the program name).
///
/// # Errors
/// What is wrong and what to write instead.
pub fn parse<I: IntoIterator<Item = String>>(args: I) -> Result<Command, String> {
    let mut socket = None;
    let mut config = DeviceConfig::default();
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let (name, inline) = match a.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ => (a.clone(), None),
        };
        let mut value = |what: &str| {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| format!("{name} needs a value ({what})"))
        };
        match name.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "--socket" => socket = Some(PathBuf::from(value("a path")?)),
            "--socket-mode" => {
                let v = value("octal permissions, like 0600")?;
                config.socket_mode = u32::from_str_radix(v.trim_start_matches("0o"), 8)
                    .ok()
                    .filter(|m| *m <= 0o777)
                    .ok_or_else(|| format!("--socket-mode '{v}': expected octal like 0600"))?;
            }
            "--socket-group" => config.socket_group = Some(parse_group(&value("a group")?)?),
            "--size" => {
                let v = value("bytes, like 64M")?;
                let size = davinci_units::parse_size(&v).map_err(|e| format!("--size: {e}"))?;
                if Bar2Layout::for_region(size).is_err() {
                    return Err(format!(
                        "--size {v}: BAR2 must be a power of two from {} to {} bytes (128K..1G), like 64M",
                        MIN_REGION, MAX_REGION
                    ));
                }
                config.size = size;
            }
            "--vectors" => {
                let v = value("a number")?;
                let n: u16 = v.parse().map_err(|_| {
                    format!("--vectors {v}: not a number from {VECTORS} to {MAX_VECTORS}")
                })?;
                if !(VECTORS..=MAX_VECTORS).contains(&n) {
                    return Err(format!(
                        "--vectors {n}: the device needs {VECTORS} (admin and data) and serves at most {MAX_VECTORS}"
                    ));
                }
                config.vectors = n;
            }
            "--inject" => {
                let v = value("a fault, like error-at=3:EIO")?;
                if config.inject.is_some() {
                    return Err("--inject given twice: a stream is armed with one fault".into());
                }
                config.inject = Some(InjectRule::parse(&v).map_err(|why| {
                    format!(
                        "--inject '{v}': {why}; expected error-at=N[:ERRNO], hang-at=N or \
                         stop-at=N (N >= 1), then optionally @pid=N,uid=N,comm=NAME,streams=N"
                    )
                })?);
            }
            "--chaos" => {
                let v = value("SEED[,RATE], like 7,0.05")?;
                config.chaos = Some(crate::chaos::ChaosConfig::parse(&v)?);
            }
            "--device-id" => {
                let v = value("a number")?;
                config.device_id = v
                    .parse()
                    .map_err(|_| format!("--device-id {v}: not a number"))?;
            }
            "--model" => config.model = name_arg("--model", &value("a name")?, 31)?,
            "--chip-name" => config.chip_name = name_arg("--chip-name", &value("a name")?, 11)?,
            other => return Err(format!("unknown argument {other:?} (see --help)")),
        }
    }
    let socket = socket.ok_or("--socket PATH is required (see --help)")?;
    Ok(Command::Run {
        socket,
        config: Box::new(config),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Command, String> {
        parse(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn options_are_parsed_and_checked() {
        match p(&["--socket", "/tmp/x", "--size=1M", "--vectors", "4"]).unwrap() {
            Command::Run { socket, config } => {
                assert_eq!(socket, PathBuf::from("/tmp/x"));
                assert_eq!((config.size, config.vectors), (1 << 20, 4));
            }
            Command::Help => panic!("not help"),
        }
        assert!(matches!(p(&["--socket", "s", "-h"]), Ok(Command::Help)));
        let err = |a: &[&str]| p(a).unwrap_err();
        assert!(err(&[]).contains("--socket PATH is required"));
        assert!(err(&["--socket"]).contains("needs a value"));
        assert!(err(&["--socket", "s", "--size", "3M"]).contains("power of two"));
        assert!(err(&["--socket", "s", "--size", "64K"]).contains("128K..1G"));
        assert!(err(&["--socket", "s", "--model", "Ascend 910"]).contains("without spaces"));
        assert!(err(&["--socket", "s", "--chip-name", "123456789012"]).contains("1 to 11"));
        match p(&[
            "--socket",
            "s",
            "--model",
            "Ascend910B3",
            "--chip-name=910B3",
        ])
        .unwrap()
        {
            Command::Run { config, .. } => assert_eq!(
                (config.model.as_str(), config.chip_name.as_str()),
                ("Ascend910B3", "910B3")
            ),
            Command::Help => panic!("not help"),
        }
        assert!(err(&["--socket", "s", "--size", "lots"]).contains("invalid size"));
        assert!(err(&["--socket", "s", "--vectors", "1"]).contains("needs 2"));
        assert!(err(&["--socket", "s", "--vectors", "65"]).contains("at most 64"));
        assert!(err(&["--socket", "s", "--vectors", "x"]).contains("not a number"));
        assert!(err(&["--bogus"]).contains("unknown argument"));
        match p(&["--socket", "s"]).unwrap() {
            Command::Run { config, .. } => {
                assert_eq!((config.socket_mode, config.socket_group), (0o600, None));
            }
            Command::Help => panic!("not help"),
        }
        match p(&[
            "--socket",
            "s",
            "--socket-mode",
            "0660",
            "--socket-group=12",
        ])
        .unwrap()
        {
            Command::Run { config, .. } => {
                assert_eq!((config.socket_mode, config.socket_group), (0o660, Some(12)));
            }
            Command::Help => panic!("not help"),
        }
        assert!(err(&["--socket", "s", "--socket-mode", "0800"]).contains("expected octal"));
        assert!(err(&["--socket", "s", "--socket-mode", "1777"]).contains("expected octal"));
        assert!(
            err(&["--socket", "s", "--socket-group", "no-such-group-x"]).contains("no such group")
        );
        match p(&["--socket", "s", "--inject", "hang-at=2@pid=7"]).unwrap() {
            Command::Run { config, .. } => {
                assert_eq!(
                    config.inject,
                    Some(InjectRule::parse("hang-at=2@pid=7").unwrap())
                );
            }
            Command::Help => panic!("not help"),
        }
        assert!(err(&["--socket", "s", "--inject", "explode-at=1"]).contains("unknown fault"));
        assert!(
            err(&["--socket", "s", "--inject=hang-at=1", "--inject=hang-at=2"])
                .contains("given twice")
        );
        match p(&["--socket", "s", "--chaos", "9,0.25"]).unwrap() {
            Command::Run { config, .. } => {
                let c = config.chaos.unwrap();
                assert_eq!((c.seed, c.rate), (9, 0.25));
            }
            Command::Help => panic!("not help"),
        }
        assert!(err(&["--socket", "s", "--chaos", "x"]).contains("SEED"));
    }
}
