//! `ivshmem-echo`: the smallest device behind QEMU's `ivshmem-doorbell`, for
//! `scripts/ivshmem-smoke.sh`. It serves the ivshmem protocol on a Unix socket and, for every
//! doorbell the guest rings on peer 0's vector `v`, adds the doorbell count to a counter in
//! the shared memory, copies the guest's token back, and raises interrupt `v` back in every
//! peer (doorbells carry no sender; QEMU drops the interrupt unless the guest enabled
//! MSI-X). `scripts/pci-smoke.sh` counts those interrupts in the guest's kernel driver: a
//! guest that waits for each doorbell's interrupt before it rings again gets exactly one
//! interrupt per doorbell (eventfds coalesce what arrives at once).
//!
//! Shared memory layout (little-endian 32-bit words, BAR2 offsets):
//!
//! | offset | written by | what |
//! |---|---|---|
//! | 0 | host, at start | `ECHO_MAGIC` (0x4f484345, "ECHO") |
//! | 4 | host, on each doorbell | a copy of the word at 8 |
//! | 8 | guest | a token of its choosing |
//! | 16 + 4 v | host | doorbells counted on vector `v` (wrapping) |
//!
//! Usage: `ivshmem-echo --socket PATH [--size BYTES] [--vectors N] [--accept-timeout SECS]`.
//! It exits 0 once every peer that connected has gone, 1 on an error, 2 on a bad command line.
//! Every line it prints starts with `ivshmem-echo:`; after each interrupt it raised, a line
//! `ivshmem-echo: raised vector V in N peer(s) (raised on V: TOTAL)`, and at the end the
//! totals per vector (`interrupts raised per vector [..]`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

use davinci_ivshmem::{Server, ShmSpec};

const ECHO_MAGIC: u32 = 0x4f48_4345;
const TOKEN_ECHO: u64 = 4;
const TOKEN: u64 = 8;
const COUNTS: u64 = 16;

struct Args {
    socket: PathBuf,
    size: u64,
    vectors: u16,
    accept_timeout: Duration,
}

fn parse() -> Result<Args, String> {
    let mut socket = None;
    let mut size = 1u64 << 20;
    let mut vectors = 4u16;
    let mut accept_timeout = Duration::from_secs(120);
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--socket" => socket = Some(PathBuf::from(value("--socket")?)),
            "--size" => {
                size = value("--size")?
                    .parse()
                    .map_err(|e| format!("--size: {e}"))?
            }
            "--vectors" => {
                vectors = value("--vectors")?
                    .parse()
                    .map_err(|e| format!("--vectors: {e}"))?
            }
            "--accept-timeout" => {
                let s: u64 = value("--accept-timeout")?
                    .parse()
                    .map_err(|e| format!("--accept-timeout: {e}"))?;
                accept_timeout = Duration::from_secs(s);
            }
            "-h" | "--help" => {
                return Err(
                    "usage: ivshmem-echo --socket PATH [--size BYTES] [--vectors N] \
                            [--accept-timeout SECS]"
                        .into(),
                )
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let socket = socket.ok_or("--socket PATH is required")?;
    Ok(Args {
        socket,
        size,
        vectors,
        accept_timeout,
    })
}

fn run(args: Args) -> Result<(), davinci_ivshmem::Error> {
    let mut server = Server::bind(&args.socket, ShmSpec { size: args.size }, args.vectors)?;
    let shm = server.shared();
    let oob = |_| davinci_ivshmem::Error::Protocol("the layout does not fit the memory".into());
    shm.write(0, &ECHO_MAGIC.to_le_bytes()).map_err(oob)?;
    println!(
        "ivshmem-echo: listening on {} ({} bytes, {} vectors)",
        args.socket.display(),
        args.size,
        args.vectors
    );
    let first = server.accept_peer(args.accept_timeout)?;
    println!("ivshmem-echo: peer {first} connected");
    let mut totals = vec![0u64; usize::from(args.vectors)];
    // Interrupts raised per vector (each raise to each peer counts once).
    let mut raised = vec![0u64; usize::from(args.vectors)];
    loop {
        let act = server.wait(Duration::from_secs(1))?;
        if act.connecting {
            match server.accept_peer(Duration::ZERO) {
                Ok(id) => println!("ivshmem-echo: peer {id} connected"),
                Err(e) => println!("ivshmem-echo: a connection failed: {e}"),
            }
        }
        for (v, &n) in act.doorbells.iter().enumerate() {
            if n == 0 {
                continue;
            }
            let vector = u16::try_from(v).unwrap_or(u16::MAX);
            totals[v] += n;
            let shm = server.shared();
            // The token's copy first, then the count (Release): a guest that sees the count
            // move sees the copy.
            let mut token = [0u8; 4];
            shm.read(TOKEN, &mut token).map_err(oob)?;
            shm.write(TOKEN_ECHO, &token).map_err(oob)?;
            let count = shm.word(COUNTS + 4 * v as u64).map_err(oob)?;
            count.fetch_add(n as u32, Ordering::Release);
            println!(
                "ivshmem-echo: {n} doorbell(s) on vector {v} (total {}), token {:#x}",
                totals[v],
                u32::from_le_bytes(token)
            );
            // Doorbells carry no sender: raise the vector in every peer.
            let peers = server.peers();
            for &peer in &peers {
                server.interrupt(peer, vector)?;
            }
            raised[v] += peers.len() as u64;
            println!(
                "ivshmem-echo: raised vector {v} in {} peer(s) (raised on {v}: {})",
                peers.len(),
                raised[v]
            );
        }
        for (id, why) in &act.gone {
            println!("ivshmem-echo: peer {id} gone ({why:?})");
        }
        if server.peers().is_empty() {
            println!("ivshmem-echo: no peers left; doorbells per vector {totals:?}");
            println!("ivshmem-echo: interrupts raised per vector {raised:?}");
            return Ok(());
        }
    }
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("ivshmem-echo: {e}");
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ivshmem-echo: {e}");
            ExitCode::FAILURE
        }
    }
}
