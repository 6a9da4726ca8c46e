//! An in-process guest: a `davinci_ivshmem::PeerClient` gets exactly what QEMU gets from the
//! device (BAR2's descriptor, its eventfds and peer 0's), maps BAR2 and speaks the admin
//! queue and the stream rings as the guest's transport and a client would.
#![allow(dead_code)]
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use davinci_hwif::bytes::{bytes_to_words, words_to_bytes};
use davinci_hwif::layout::{Bar2Header, DeviceState};
use davinci_hwif::{
    AdminOp, AdminRequest, AdminSlot, ArgBuf, Completion, MmapReply, OpenArgs, ReplyKind,
    ADMIN_DEPTH, ADMIN_ENTRY_SIZE, VECTORS, VECTOR_ADMIN,
};
use davinci_ivshmem::{PeerClient, PeerId, SERVER_ID};
use davinci_pcidev::{DeviceConfig, PciDevice};
use davinci_ring::{Consumer, Producer, RingRegion, Slot};
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
        let dir = tempfile::tempdir().unwrap();
        let config = DeviceConfig {
            size,
            idle_timeout: Duration::from_millis(20),
            ..DeviceConfig::default()
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

/// A ring view over the guest's mapping of BAR2.
pub fn view(peer: &PeerClient, offset: u64, len: u64, entries: u32, slot: usize) -> RingRegion {
    let map = peer.shared();
    assert!(offset + len <= map.len() as u64);
    // SAFETY: `[offset, offset + len)` lies inside the guest's live mapping of BAR2 (checked
    // above), which `peer` owns and every test keeps alive longer than the views (they are
    // fields of `Guest` declared before `peer`, or locals dropped before it). Within this
    // process the guest holds one end per view; the device writes the same memory through
    // its own mapping, which the ring protocol allows.
    unsafe {
        RingRegion::new(
            map.as_ptr().add(offset as usize),
            len as usize,
            entries,
            slot,
        )
    }
    .unwrap()
}

pub fn producer<T: Slot>(peer: &PeerClient, m: &MmapReply, entries: u32) -> Producer<T> {
    Producer::new(view(peer, m.offset, m.len, entries, size_of::<T>()))
}

pub fn consumer<T: Slot>(peer: &PeerClient, m: &MmapReply, entries: u32) -> Consumer<T> {
    Consumer::new(view(peer, m.offset, m.len, entries, size_of::<T>()))
}

/// The guest's transport: the admin queue's host ends over its mapping of BAR2.
pub struct Guest {
    pub sq: Producer<AdminSlot>,
    pub cq: Consumer<AdminSlot>,
    pub header: Bar2Header,
    tag: u64,
    // Last: the views above point into its mapping.
    pub peer: PeerClient,
}

impl Guest {
    pub fn connect(running: &Running) -> Guest {
        let mut peer = PeerClient::connect(&running.socket(), VECTORS, LIMIT).unwrap();
        peer.wait_ready(LIMIT).unwrap();
        let mut page = vec![0u8; 4096];
        peer.shared().read(0, &mut page).unwrap();
        let header = Bar2Header::decode(&page, peer.shm_size()).unwrap();
        assert_eq!(header.state, DeviceState::Ready);
        let l = header.layout;
        let sq = Producer::new(view(
            &peer,
            l.sq_offset,
            l.ring_bytes,
            ADMIN_DEPTH,
            ADMIN_ENTRY_SIZE,
        ));
        let cq = Consumer::new(view(
            &peer,
            l.cq_offset,
            l.ring_bytes,
            ADMIN_DEPTH,
            ADMIN_ENTRY_SIZE,
        ));
        Guest {
            sq,
            cq,
            header,
            tag: 0,
            peer,
        }
    }

    /// Posts one raw slot and rings vector 0.
    pub fn post_raw(&mut self, bytes: &[u8; ADMIN_ENTRY_SIZE]) {
        let slot: AdminSlot = bytes_to_words(bytes);
        assert!(self.sq.push(&slot).is_ok(), "admin submission ring full");
        self.sq.publish();
        assert!(self.peer.ring(SERVER_ID, VECTOR_ADMIN).unwrap());
    }

    /// The next completion, waiting for vector 0 when there is none.
    pub fn completion(&mut self) -> Completion {
        loop {
            let mut got = None;
            self.cq.consume(1, |s| got = Some(s));
            if let Some(s) = got {
                let bytes: [u8; ADMIN_ENTRY_SIZE] = words_to_bytes(&s);
                return Completion::decode(&bytes).unwrap();
            }
            self.peer.wait_interrupt(VECTOR_ADMIN, LIMIT).unwrap();
        }
    }

    /// One request, its completion (the tag checked).
    pub fn call(&mut self, client: u32, op: AdminOp) -> Completion {
        self.tag += 1;
        let req = AdminRequest {
            tag: self.tag,
            client,
            op,
        };
        let mut bytes = [0u8; ADMIN_ENTRY_SIZE];
        req.encode(&mut bytes);
        self.post_raw(&bytes);
        let c = self.completion();
        assert_eq!(c.tag, self.tag);
        c
    }

    pub fn open(&mut self) -> u32 {
        let mut comm = [0u8; 16];
        comm[..5].copy_from_slice(b"guest");
        let c = self.call(
            0,
            AdminOp::Open(OpenArgs {
                control: false,
                pid: 1234,
                uid: 1000,
                admin: false,
                comm,
                container: [0; 64],
            }),
        );
        assert_eq!(c.reply, ReplyKind::Done, "{}", c.message());
        c.client
    }

    /// An ioctl with `args` in and out; `Err((errno, message))` on failure.
    pub fn ioctl<T: Wire>(
        &mut self,
        client: u32,
        request: u32,
        args: &mut T,
    ) -> Result<(), (u32, String)> {
        let mut arg = ArgBuf::zeroed(T::SIZE).unwrap();
        args.encode(arg.as_mut_slice());
        let c = self.call(client, AdminOp::Ioctl { request, arg });
        *args = T::decode(c.arg.as_slice());
        match c.reply {
            ReplyKind::Failed => Err((c.errno, c.message().to_string())),
            _ => Ok(()),
        }
    }

    pub fn map(&mut self, client: u32, cookie: u64, len: u64) -> Result<MmapReply, (u32, String)> {
        let c = self.call(client, AdminOp::MmapTarget { cookie, len });
        match c.reply {
            ReplyKind::Done => Ok(MmapReply::from_arg(c.arg.as_slice()).unwrap()),
            _ => Err((c.errno, c.message().to_string())),
        }
    }

    /// Rings the device's data vector (a client's BAR0 doorbell write `0 << 16 | 1`).
    pub fn ring_data(&self) {
        assert!(self
            .peer
            .ring(PeerId(0), davinci_hwif::VECTOR_DATA)
            .unwrap());
    }
}
