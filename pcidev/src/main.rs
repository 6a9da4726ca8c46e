//! `davinci-pcidev`: the davinci PCI device outside the guest (see `--help`).
#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::sync::atomic::AtomicBool;

use davinci_pcidev::cli::{parse, Command, HELP};
use davinci_pcidev::PciDevice;

fn main() -> ExitCode {
    let (socket, config) = match parse(std::env::args().skip(1)) {
        Ok(Command::Help) => {
            print!("{HELP}");
            return ExitCode::SUCCESS;
        }
        Ok(Command::Run { socket, config }) => (socket, config),
        Err(e) => {
            eprintln!("davinci-pcidev: {e}");
            return ExitCode::from(2);
        }
    };
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
    // Runs until killed (no signal handling yet: the socket stays behind after SIGTERM).
    let stop = AtomicBool::new(false);
    match dev.serve(&stop) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("davinci-pcidev: {e}");
            ExitCode::FAILURE
        }
    }
}
