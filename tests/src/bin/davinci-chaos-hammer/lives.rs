//! Requests mode (`--requests N --bus BUS`): the workers stay across losses of the device and
//! this process brings the device back, until the kernel counts N admin requests answered
//! over all its lives.
//!
//! A worker that finds the device lost (an open refused) says `lost` with the generation of
//! the device it knew and waits for an order on its stdin: `go G` (the device is back as
//! generation G: reopen) or `stop`. The parent, for a loss of the current generation, reads
//! the lost device's count of answered requests (debugfs `info`, `admin N`), re-probes it
//! (sysfs unbind and bind) and writes `reset` to the module's `inject` parameter (the chaos
//! device then closes every client the module forgot), and sends `go` to every worker; a
//! loss reported for an older generation only gets `go` with the current one. Workers that
//! had not noticed the loss yet meet it in their next call (`ENODEV`) and reopen.
//!
//! Why here and not in the guest's shell: a shell loop starting the hammer again after each
//! loss paid a new hammer and 4 new workers (over TCG, most of a second) per loss, and a
//! protocol violation comes every few dozen requests at 5%.
#![forbid(unsafe_code)]

use std::io::{BufRead, Write};
use std::path::Path;
use std::process::ChildStdin;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::say;

/// An order from the parent to a worker.
pub(crate) enum Order {
    /// The device is back as this generation.
    Go(u64),
    /// Finish: report and exit.
    Stop,
}

/// A worker's orders, read from its stdin on a thread of their own.
pub(crate) struct Orders(mpsc::Receiver<Order>);

impl Orders {
    /// Starts the reader (SIGALRM blocked in it, so the alarm that bounds a worker's calls
    /// interrupts the worker's thread, never this one). The end of stdin is `Stop`.
    pub(crate) fn start() -> Orders {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut set = nix::sys::signal::SigSet::empty();
            set.add(nix::sys::signal::Signal::SIGALRM);
            let _ = set.thread_block();
            for line in std::io::stdin().lock().lines().map_while(Result::ok) {
                let order = match line.split_whitespace().collect::<Vec<_>>()[..] {
                    ["go", g] => Order::Go(g.parse().unwrap_or(0)),
                    _ => Order::Stop,
                };
                if tx.send(order).is_err() {
                    return;
                }
            }
            let _ = tx.send(Order::Stop);
        });
        Orders(rx)
    }

    /// The orders that came (the newest generation, and whether to stop), without waiting.
    pub(crate) fn poll(&self, gen: &mut u64) -> bool {
        while let Ok(o) = self.0.try_recv() {
            match o {
                Order::Go(g) => *gen = (*gen).max(g),
                Order::Stop => return true,
            }
        }
        false
    }

    /// Waits for the next order: `Some(generation)` to go on, `None` to stop.
    pub(crate) fn wait(&self) -> Option<u64> {
        match self.0.recv() {
            Ok(Order::Go(g)) => Some(g),
            _ => None,
        }
    }
}

/// The admin requests the kernel counts answered by the device bound at `bus` (debugfs
/// `info`'s `admin N`; 0 if unreadable: no device bound).
pub(crate) fn answered(bus: &str) -> u64 {
    std::fs::read_to_string(format!("/sys/kernel/debug/davinci/{bus}/info"))
        .map_or(0, |s| admin_count(&s))
}

/// `admin N` of an `info` file's text (0 without one).
fn admin_count(info: &str) -> u64 {
    info.lines()
        .find_map(|l| l.strip_prefix("admin ").and_then(|n| n.trim().parse().ok()))
        .unwrap_or(0)
}

/// Writes `text` to a sysfs file; whether it took it.
fn sysfs(path: &str, text: &str) -> bool {
    std::fs::write(path, text).is_ok()
}

/// The parent's side: the device's lives and the requests counted over them.
pub(crate) struct Lives {
    bus: String,
    device: String,
    target: u64,
    most: u64,
    /// The current device's generation (0: as the hammer found it).
    pub(crate) gen: u64,
    /// Re-probes done.
    pub(crate) lives: u64,
    /// Requests answered by the lost generations.
    pub(crate) before: u64,
    /// Time spent re-probing.
    pub(crate) reprobe: Duration,
    /// Re-probes that left no node (BAR2's header garbage at probe: a chaos spell).
    pub(crate) no_node: u64,
}

impl Lives {
    pub(crate) fn new(bus: &str, device: &str, target: u64, most: u64) -> Lives {
        Lives {
            bus: bus.to_string(),
            device: device.to_string(),
            target,
            most,
            gen: 0,
            lives: 0,
            before: 0,
            reprobe: Duration::ZERO,
            no_node: 0,
        }
    }

    /// Requests answered so far, over every generation.
    pub(crate) fn total(&self) -> u64 {
        self.before + answered(&self.bus)
    }

    /// Whether the requests asked for were answered.
    pub(crate) fn reached(&self) -> bool {
        self.total() >= self.target
    }

    /// A worker said it lost generation `g`: re-probe if that is the current one (`false`:
    /// no re-probe left), and tell the workers which generation to go on with.
    pub(crate) fn on_lost(
        &mut self,
        g: u64,
        workers: &mut [Option<ChildStdin>],
        who: usize,
    ) -> bool {
        if g == self.gen {
            if self.lives >= self.most {
                return false;
            }
            self.reprobe_now();
            for w in workers.iter_mut() {
                send(w, &format!("go {}", self.gen));
            }
        } else if let Some(w) = workers.get_mut(who) {
            send(w, &format!("go {}", self.gen));
        }
        true
    }

    fn reprobe_now(&mut self) {
        let t = Instant::now();
        let lost = answered(&self.bus);
        self.before += lost;
        let bound = format!("/sys/bus/pci/drivers/davinci/{}", self.bus);
        let ms = |t: Instant| t.elapsed().as_millis() as u64;
        let t1 = Instant::now();
        if Path::new(&bound).exists() {
            sysfs("/sys/bus/pci/drivers/davinci/unbind", &self.bus);
        }
        let (unbind, t2) = (ms(t1), Instant::now());
        sysfs("/sys/bus/pci/drivers/davinci/bind", &self.bus);
        let (bind, t3) = (ms(t2), Instant::now());
        // The chaos device closes every client the module forgot.
        sysfs("/sys/module/davinci/parameters/inject", "reset");
        let reset = ms(t3);
        self.gen += 1;
        self.lives += 1;
        let node = Path::new(&self.device).exists();
        self.reprobe += t.elapsed();
        say(
            json!({"event": "reprobe", "life": self.gen, "answered": lost,
            "total": self.before, "node": node, "ms": ms(t), "unbind_ms": unbind,
            "bind_ms": bind, "reset_ms": reset}),
        );
        if !node {
            // Bound without a node: BAR2's header was garbage at probe (a chaos spell lasts at
            // most 1.5 s); the workers' next opens fail and ask again, a little later.
            self.no_node += 1;
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The summary for the `done` line.
    pub(crate) fn json(&self) -> Value {
        json!({"requests": self.total(), "requests_asked": self.target, "lives": self.lives,
            "reprobe_seconds": self.reprobe.as_secs_f64(), "reprobes_without_node": self.no_node})
    }
}

/// One line to a worker (a worker gone is not an error here: its end is reported by its
/// exit).
pub(crate) fn send(w: &mut Option<ChildStdin>, line: &str) {
    if let Some(s) = w.as_mut() {
        if writeln!(s, "{line}").and_then(|()| s.flush()).is_err() {
            *w = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::admin_count;

    #[test]
    fn the_admin_count_is_read_from_the_info_file() {
        let info = "pci 0000:00:02.0\npeer 1\nvectors 2\nirqs 53949 27171\nadmin 1734\n";
        assert_eq!(admin_count(info), 1734);
        // A module without the line, or a garbled one: nothing counted.
        assert_eq!(admin_count("pci 0000:00:02.0\nirqs 1 2\n"), 0);
        assert_eq!(admin_count("admin x\n"), 0);
    }
}
