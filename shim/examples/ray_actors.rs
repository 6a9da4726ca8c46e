//! Two actors, each its own process and its own client of one device, hand a device buffer
//! to each other the way Ray's compiled graphs (aDAG) or HCCL do: the producer computes into
//! a buffer and exports it; a small token travels through their own channel (a Unix
//! socket); the consumer imports the buffer by that token, reads it on the device (no copy
//! through the host), and tells the producer when it is done, so the producer can free it.
//!
//! ```sh
//! # a davinci-mockd device (or /dev/davinci0): two processes
//! cargo run -p davinci-shim --example ray_actors -- mock:/run/davinci/davinci0.sock
//! # the embedded device lives in one process: the consumer is a thread there
//! cargo run -p davinci-shim --example ray_actors
//! ```
//!
//! The device must be shared (several clients): the producer makes it so if it may (an
//! admin), else it says what the operator has to run.
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::{Command, ExitCode};
use std::time::Duration;

use davinci_shim::{task, Device, DeviceMem, Errno, Error, ExportTo, Result, ShareMode};

const N: usize = 1 << 16;

/// An I/O failure of the actors' own channel, as the shim's error type.
fn io(op: &'static str, what: &str, e: &std::io::Error) -> Error {
    let errno = e
        .raw_os_error()
        .and_then(Errno::from_code)
        .unwrap_or(Errno::EIO);
    Error::new(errno, op, format!("{what}: {e}"))
}
const T: Duration = Duration::from_secs(30);

/// The producer actor: computes `x[i] = i` into a buffer, exports it, sends the token, and
/// waits for the consumer's answer before it frees the buffer.
fn producer(dev: &Device, channel: &mut UnixStream) -> Result<()> {
    let x = dev.alloc(N * 4)?;
    x.write_slice(0, &(0..N as u32).collect::<Vec<_>>())?;
    let token = x.export(ExportTo::SameUser)?;
    println!(
        "producer: {N} values at {:#x}, export token {token}",
        x.dev_addr()
    );
    writeln!(channel, "{token}").map_err(|e| io("send", "the token", &e))?;
    let mut answer = String::new();
    BufReader::new(channel)
        .read_line(&mut answer)
        .map_err(|e| io("receive", "the answer", &e))?;
    let want: u64 = (0..N as u64).map(|i| 2 * i).sum();
    let got: u64 = answer.trim().parse().unwrap_or(u64::MAX);
    println!("producer: the consumer's sum is {got} (expected {want})");
    if got != want {
        return Err(Error::new(
            Errno::EIO,
            "producer",
            "the consumer saw other bytes",
        ));
    }
    // The consumer is done: freeing revokes its import.
    drop(x);
    Ok(())
}

/// The consumer actor: imports the producer's buffer by the token, computes `y = x + x` on
/// the device into a buffer of its own, and answers with the sum.
fn consumer(dev: &Device, channel: &mut UnixStream) -> Result<()> {
    let mut line = String::new();
    BufReader::new(&mut *channel)
        .read_line(&mut line)
        .map_err(|e| io("receive", "the token", &e))?;
    let x = dev.import(line.parse()?)?;
    let y = dev.alloc(x.len())?;
    let mut s = dev.create_context()?.create_stream()?;
    s.submit(&task::add::<u32>(&y, &x, &x)?)?;
    s.synchronize(T)?;
    let sum: u64 = y.read_vec::<u32>(0, N)?.iter().map(|&v| u64::from(v)).sum();
    println!(
        "consumer (pid {}): imported {:#x}, sum of x + x = {sum}",
        std::process::id(),
        x.dev_addr()
    );
    writeln!(channel, "{sum}").map_err(|e| io("send", "the answer", &e))?;
    Ok(())
}

fn share(dev: &Device) -> Result<()> {
    match dev.set_share_mode(ShareMode::Shared) {
        Err(e) if e.is(Errno::EPERM) => Err(Error::new(
            Errno::EPERM,
            "ray_actors",
            format!(
                "{dev} is not shared and this user may not share it: ask the operator for \
                 `davinci-smi set -t device-share -i <N> -d 1` ({e})"
            ),
        )),
        r => r,
    }
}

fn run(args: &[String]) -> Result<()> {
    match args {
        // The consumer process, started by the producer below.
        [role, path, socket] if role == "consumer" => {
            let dev = Device::open(path)?;
            let mut channel =
                UnixStream::connect(socket).map_err(|e| io("connect", "the socket", &e))?;
            consumer(&dev, &mut channel)
        }
        [] => {
            // One process: two clients of one embedded device, the consumer on a thread.
            let dev = Device::embedded()?;
            share(&dev)?;
            let other = Device::attach(dev.mock_device().expect("an embedded device"))?;
            let (mut a, mut b) =
                UnixStream::pair().map_err(|e| io("socketpair", "a channel", &e))?;
            let actor = std::thread::spawn(move || consumer(&other, &mut b));
            producer(&dev, &mut a)?;
            actor.join().expect("the consumer thread")
        }
        [path] => {
            let dev = Device::open(path)?;
            share(&dev)?;
            let dir = std::env::temp_dir().join(format!("ray-actors-{}", std::process::id()));
            std::fs::create_dir_all(&dir).map_err(|e| io("mkdir", "a socket dir", &e))?;
            let socket = dir.join("channel.sock");
            let listener = UnixListener::bind(&socket).map_err(|e| io("bind", "the socket", &e))?;
            let exe = std::env::current_exe().map_err(|e| io("exe", "this program", &e))?;
            let mut child = Command::new(exe)
                .arg("consumer")
                .arg(path)
                .arg(&socket)
                .spawn()
                .map_err(|e| io("spawn", "the consumer", &e))?;
            let (mut channel, _) = listener
                .accept()
                .map_err(|e| io("accept", "the consumer", &e))?;
            let r = producer(&dev, &mut channel);
            let status = child.wait().map_err(|e| io("wait", "the consumer", &e))?;
            let _ = std::fs::remove_dir_all(&dir);
            r?;
            if !status.success() {
                return Err(Error::new(Errno::EIO, "ray_actors", "the consumer failed"));
            }
            Ok(())
        }
        _ => Err(Error::new(
            Errno::EINVAL,
            "ray_actors",
            "usage: ray_actors [DEVICE] (mock:SOCKET or /dev/davinciN; none: embedded)",
        )),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ray_actors: {e}");
            ExitCode::FAILURE
        }
    }
}
