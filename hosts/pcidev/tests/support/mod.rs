//! An in-process guest: a `davinci_ivshmem::PeerClient` gets exactly what QEMU gets from the
//! device (BAR2's descriptor, its eventfds and peer 0's), maps BAR2 and speaks the admin
//! queue and the stream rings as the guest's transport and a client would, through
//! `davinci_pcidev::guest` (the same code as the driver-less guest of the QEMU smoke).
#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use davinci_hwif::layout::{Bar2Header, DeviceState};
use davinci_hwif::{AdminOp, Completion, MmapReply, ADMIN_ENTRY_SIZE, VECTORS};
use davinci_ivshmem::PeerClient;
use davinci_pcidev::guest::{self, AdminQueue, Bus, GuestError, Held};
use davinci_pcidev::{DeviceConfig, PciDevice};
use davinci_ring::{Consumer, Producer, Slot};
use davinci_uapi::Wire;

/// How long anything may take before the test fails (a bound, not a measurement).
pub const LIMIT: Duration = Duration::from_secs(20);

/// The device serving on a thread, until dropped.
pub struct Running {
    pub dir: tempfile::TempDir,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<PciDevice>>,
}

impl Running {
    pub fn start(size: u64) -> Running {
        Running::start_with(DeviceConfig {
            size,
            ..DeviceConfig::default()
        })
    }

    /// A device configured as `config` says (with a short idle timeout).
    pub fn start_with(config: DeviceConfig) -> Running {
        let dir = tempfile::tempdir().unwrap();
        let config = DeviceConfig {
            idle_timeout: Duration::from_millis(20),
            ..config
        };
        let mut dev = PciDevice::bind(&dir.path().join("ivshmem.sock"), config).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            dev.serve(&s).unwrap();
            dev
        });
        Running {
            dir,
            stop,
            thread: Some(thread),
        }
    }

    pub fn socket(&self) -> std::path::PathBuf {
        self.dir.path().join("ivshmem.sock")
    }

    /// Stops the device and hands it back (its counters).
    pub fn stop(mut self) -> PciDevice {
        self.stop.store(true, Ordering::Release);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

pub fn producer<T: Slot>(
    peer: &Arc<PeerClient>,
    m: &MmapReply,
    entries: u32,
) -> Held<Producer<T>, PeerClient> {
    guest::producer(peer, m, entries).unwrap()
}

pub fn consumer<T: Slot>(
    peer: &Arc<PeerClient>,
    m: &MmapReply,
    entries: u32,
) -> Held<Consumer<T>, PeerClient> {
    guest::consumer(peer, m, entries).unwrap()
}

/// The guest's transport (`davinci_pcidev::guest`) over an in-process peer, failing the test
/// on any transport error.
pub struct Guest {
    pub q: AdminQueue<PeerClient>,
    pub header: Bar2Header,
    pub peer: Arc<PeerClient>,
}

impl Guest {
    pub fn connect(running: &Running) -> Guest {
        let mut peer = PeerClient::connect(&running.socket(), VECTORS, LIMIT).unwrap();
        peer.wait_ready(LIMIT).unwrap();
        let peer = Arc::new(peer);
        let q = AdminQueue::connect(peer.clone(), LIMIT).unwrap();
        let header = *q.header();
        assert_eq!(header.state, DeviceState::Ready);
        Guest { q, header, peer }
    }

    /// Posts one raw slot and rings vector 0.
    pub fn post_raw(&mut self, bytes: &[u8; ADMIN_ENTRY_SIZE]) {
        self.q.post_raw(bytes).unwrap();
    }

    /// The next completion, waiting for vector 0 when there is none.
    pub fn completion(&mut self) -> Completion {
        self.q.completion().unwrap()
    }

    /// One request, its completion (the tag checked).
    pub fn call(&mut self, client: u32, op: AdminOp) -> Completion {
        self.q.call(client, op).unwrap()
    }

    pub fn open(&mut self) -> u32 {
        self.q.open(1234, 1000, "guest").unwrap()
    }

    /// An ioctl with `args` in and out; `Err((errno, message))` on failure.
    pub fn ioctl<T: Wire>(
        &mut self,
        client: u32,
        request: u32,
        args: &mut T,
    ) -> Result<(), (u32, String)> {
        self.q.ioctl(client, request, args).map_err(device_error)
    }

    pub fn map(&mut self, client: u32, cookie: u64, len: u64) -> Result<MmapReply, (u32, String)> {
        self.q.map(client, cookie, len).map_err(device_error)
    }

    /// A new client and a context of it: `(client, context handle)`.
    pub fn client_with_context(&mut self) -> (u32, u32) {
        let client = self.open();
        let mut ctx = davinci_uapi::CreateContextArgs::default();
        self.ioctl(client, davinci_uapi::DRIVER_CMD_CREATE_CONTEXT, &mut ctx)
            .unwrap();
        (client, ctx.handle)
    }

    /// A stream of `entries` slots per ring in context `ctx`, and where MMAP_TARGET says its
    /// command and event rings lie.
    pub fn stream(
        &mut self,
        client: u32,
        ctx: u32,
        entries: u32,
    ) -> (davinci_uapi::CreateStreamArgs, MmapReply, MmapReply) {
        let mut s = davinci_uapi::CreateStreamArgs {
            ctx,
            cmd_entries: entries,
            event_entries: entries,
            ..Default::default()
        };
        self.ioctl(client, davinci_uapi::DRIVER_CMD_CREATE_STREAM, &mut s)
            .unwrap();
        let cmd = self
            .map(client, s.cmd_ring.mmap_offset, s.cmd_ring.mmap_size)
            .unwrap();
        let evt = self
            .map(client, s.event_ring.mmap_offset, s.event_ring.mmap_size)
            .unwrap();
        (s, cmd, evt)
    }

    /// Takes records off `evt` until there are at least `n`, waiting for vector 1 between.
    pub fn records<T: Slot>(&self, evt: &mut Held<Consumer<T>, PeerClient>, n: usize) -> Vec<T> {
        let mut got = Vec::new();
        while got.len() < n {
            evt.consume(64, |r| got.push(r));
            if got.len() < n {
                self.peer
                    .wait_interrupt(davinci_hwif::VECTOR_DATA, LIMIT)
                    .unwrap();
            }
        }
        got
    }

    /// Rings the device's data vector (a client's BAR0 doorbell write `0 << 16 | 1`).
    pub fn ring_data(&self) {
        Bus::ring(&*self.peer, davinci_hwif::VECTOR_DATA).unwrap();
    }
}

/// A device's refusal as `(errno, message)`; anything else fails the test.
fn device_error(e: GuestError) -> (u32, String) {
    match e {
        GuestError::Device { errno, message } => (errno, message),
        other => panic!("transport error: {other}"),
    }
}
