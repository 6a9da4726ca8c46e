//! `davinci-pcidev`: the davinci PCI device outside the guest (see `--help`).
#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

use davinci_pcidev::cli::{parse, Command, HELP};
use davinci_pcidev::PciDevice;

/// Set by SIGTERM or SIGINT: the device stops, and its socket file goes with it.
static STOP: AtomicBool = AtomicBool::new(false);

/// Blocks SIGTERM and SIGINT in this thread (before any other starts: threads inherit the
/// mask) and takes them, synchronously, from a `signalfd` on a thread of their own, which sets
/// [`STOP`]. The device loop looks at it at least every idle timeout.
fn stop_on_signals() -> nix::Result<()> {
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    set.thread_block()?;
    let fd = SignalFd::with_flags(&set, SfdFlags::SFD_CLOEXEC)?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || loop {
            match fd.read_signal() {
                Ok(Some(info)) => {
                    eprintln!(
                        "davinci-pcidev: signal {} from pid {}: stopping",
                        info.ssi_signo, info.ssi_pid
                    );
                    STOP.store(true, Ordering::Release);
                    return;
                }
                Ok(None) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => {
                    eprintln!("davinci-pcidev: reading signals: {e}; stopping");
                    STOP.store(true, Ordering::Release);
                    return;
                }
            }
        })
        .map(drop)
        .map_err(|_| nix::errno::Errno::EAGAIN)
}

fn main() -> ExitCode {
    if let Err(e) = stop_on_signals() {
        eprintln!("davinci-pcidev: cannot take SIGTERM/SIGINT ({e})");
        return ExitCode::FAILURE;
    }
    let (socket, config) = match parse(std::env::args().skip(1)) {
        Ok(Command::Help) => {
            print!("{HELP}");
            return ExitCode::SUCCESS;
        }
        Ok(Command::Run { socket, config }) => (socket, *config),
        Err(e) => {
            eprintln!("davinci-pcidev: {e}");
            return ExitCode::from(2);
        }
    };
    // The socket is made no more open than 0600 (whatever the umask the operator had),
    // before bind gives it its own mode and group (`--socket-mode`, `--socket-group`): no
    // moment in between when another user could connect. This process makes no other file.
    let umask = nix::sys::stat::Mode::from_bits_truncate(0o177);
    nix::sys::stat::umask(umask);
    let mut dev = match PciDevice::bind(&socket, config.clone()) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("davinci-pcidev: {e}");
            return ExitCode::FAILURE;
        }
    };
    let l = dev.layout();
    eprintln!(
        "davinci-pcidev: serving {} (BAR2 {} bytes, heap {} pages, {} vectors); attach QEMU with \
         -chardev socket,path={},id=dv -device ivshmem-doorbell,chardev=dv,vectors={}",
        socket.display(),
        l.region_size,
        l.heap_pages,
        config.vectors,
        socket.display(),
        config.vectors
    );
    eprintln!(
        "davinci-pcidev: socket {} mode {:04o}{}",
        socket.display(),
        config.socket_mode,
        config
            .socket_group
            .map_or(String::new(), |g| format!(", group {g}"))
    );
    if let Some(c) = config.chaos {
        eprintln!(
            "davinci-pcidev: CHAOS device: seed {} rate {}: replies are wrong on purpose",
            c.seed, c.rate
        );
    }
    if config.inject.is_some() {
        eprintln!("davinci-pcidev: streams armed with the --inject fault from the start");
    }
    // Runs until SIGTERM or SIGINT; the socket file goes when `dev` does.
    match dev.serve(&STOP) {
        Ok(()) => {
            if let Some(line) = dev.chaos_summary() {
                eprintln!("{line}");
            }
            let s = dev.stats();
            eprintln!(
                "davinci-pcidev: guests gone {}; admin requests {} ({} malformed); data doorbells {}; interrupts raised: admin {}, data {}; peers refused {}",
                s.guests_gone,
                s.admin_requests,
                s.admin_malformed,
                s.data_doorbells,
                s.admin_interrupts,
                s.data_interrupts,
                s.peers_refused
            );
            drop(dev);
            eprintln!("davinci-pcidev: stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("davinci-pcidev: {e}");
            ExitCode::FAILURE
        }
    }
}
