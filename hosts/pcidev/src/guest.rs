//! The guest's side of the hardware interface, as a driver-less guest program or a test
//! speaks it: BAR2's header read and validated, the admin queue's host ends (requests posted
//! on the submission ring, completions taken from the completion ring, tags checked) and ring
//! views over the stream rings MMAP_TARGET places in BAR2.
//!
//! It is generic over a [`Bus`]: how this side sees BAR2 (a [`SharedMapping`]) and rings or
//! waits for the device's vectors. Two buses exist: [`PeerClient`] (an in-process guest that
//! gets what QEMU gets from the ivshmem server, for the tests) and, in
//! `examples/pcidev-guest.rs`, BAR0 and BAR2 mapped through sysfs inside a QEMU guest with no
//! kernel driver (doorbells are BAR0 writes, "interrupts" are a short sleep: it polls).
//!
//! Every ring view holds an `Arc` of the bus, so the mapping it points into outlives it.
//! Everything the device wrote is read from a copy and validated (`davinci-hwif`).
#![allow(unsafe_code)]

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::{Duration, Instant};

use davinci_hwif::bytes::{bytes_to_words, words_to_bytes};
use davinci_hwif::layout::{Bar2Header, DeviceState, PAGE_SIZE};
use davinci_hwif::{
    AdminOp, AdminRequest, AdminSlot, ArgBuf, Completion, MmapReply, OpenArgs, ReplyKind,
    ADMIN_DEPTH, ADMIN_ENTRY_SIZE, VECTOR_ADMIN,
};
use davinci_ivshmem::{PeerClient, SERVER_ID};
use davinci_ring::{Consumer, Producer, RingRegion, Slot};
use davinci_shm::SharedMapping;
use davinci_uapi::Wire;

/// How this side reaches the device.
pub trait Bus {
    /// BAR2 as this side maps it (its length is BAR2's size).
    fn bar2(&self) -> &SharedMapping;
    /// Rings the device's `vector` (a BAR0 Doorbell write of `0 << 16 | vector`).
    ///
    /// # Errors
    /// What went wrong, with the vector.
    fn ring(&self, vector: u16) -> Result<(), GuestError>;
    /// Waits at most `timeout` for the device to raise `vector` in this guest (or, on a bus
    /// without interrupts, for a short pause). Returning early is allowed: the caller looks
    /// again and keeps its own deadline.
    ///
    /// # Errors
    /// A broken bus (a timeout is not an error).
    fn wait(&self, vector: u16, timeout: Duration) -> Result<(), GuestError>;
}

/// What went wrong on the guest's side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GuestError {
    /// The device answered with a failure: its errno and message.
    Device {
        /// The errno.
        errno: u32,
        /// The device's message.
        message: String,
    },
    /// Nothing came in time: what was awaited.
    Timeout(String),
    /// Anything else (a bad header, a broken ring, a malformed completion, the bus): what.
    Other(String),
}

impl GuestError {
    /// The device's errno, when the device refused.
    pub fn errno(&self) -> Option<u32> {
        match self {
            GuestError::Device { errno, .. } => Some(*errno),
            _ => None,
        }
    }

    fn other(what: impl fmt::Display) -> GuestError {
        GuestError::Other(what.to_string())
    }
}

impl fmt::Display for GuestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GuestError::Device { errno, message } => {
                write!(f, "the device failed the request: errno {errno}: {message}")
            }
            GuestError::Timeout(what) => write!(f, "timed out waiting for {what}"),
            GuestError::Other(what) => f.write_str(what),
        }
    }
}

impl std::error::Error for GuestError {}

/// The in-process guest of the tests: what QEMU gets from the ivshmem server.
impl Bus for PeerClient {
    fn bar2(&self) -> &SharedMapping {
        self.shared()
    }

    fn ring(&self, vector: u16) -> Result<(), GuestError> {
        match PeerClient::ring(self, SERVER_ID, vector) {
            Ok(true) => Ok(()),
            Ok(false) => Err(GuestError::Other(format!(
                "the device has no vector {vector}"
            ))),
            Err(e) => Err(GuestError::Other(format!("ringing vector {vector}: {e}"))),
        }
    }

    fn wait(&self, vector: u16, timeout: Duration) -> Result<(), GuestError> {
        match self.wait_interrupt(vector, timeout) {
            Ok(_) | Err(davinci_ivshmem::Error::Timeout(_)) => Ok(()),
            Err(e) => Err(GuestError::Other(format!(
                "waiting for vector {vector}: {e}"
            ))),
        }
    }
}

/// A view into the bus's mapping of BAR2 (a ring view, a producer or a consumer), kept with
/// the bus it points into.
pub struct Held<V, B> {
    view: V,
    // Last: `view` points into its mapping.
    _bus: Arc<B>,
}

impl<V, B> Deref for Held<V, B> {
    type Target = V;
    fn deref(&self) -> &V {
        &self.view
    }
}

impl<V, B> DerefMut for Held<V, B> {
    fn deref_mut(&mut self) -> &mut V {
        &mut self.view
    }
}

/// A ring view of `len` bytes at BAR2 offset `offset` of the bus's mapping.
///
/// # Errors
/// The range is not inside BAR2, or the ring's geometry checks fail.
pub fn view<B: Bus>(
    bus: &Arc<B>,
    offset: u64,
    len: u64,
    entries: u32,
    slot_size: usize,
) -> Result<Held<RingRegion, B>, GuestError> {
    let map = bus.bar2();
    let bad = || {
        GuestError::Other(format!(
            "a ring at BAR2 {offset:#x}+{len:#x} is not inside BAR2 ({} bytes)",
            map.len()
        ))
    };
    let end = offset.checked_add(len).ok_or_else(bad)?;
    if end > map.len() as u64 {
        return Err(bad());
    }
    let (at, n) = (
        usize::try_from(offset).map_err(|_| bad())?,
        usize::try_from(len).map_err(|_| bad())?,
    );
    // SAFETY: `[at, at + n)` lies inside the bus's live read/write mapping of BAR2 (checked
    // just above), so `as_ptr() + at` stays in bounds; `RingRegion::new` checks the alignment
    // and that `n` holds the header and slots. The mapping outlives the view: the view is
    // returned inside a `Held` that also owns an `Arc` of the bus (which owns the mapping),
    // declared after the view, so the view is dropped first. Within this process only this
    // side's one ring end per view touches these bytes; the device writes them concurrently,
    // which the ring protocol allows (atomics and whole-slot volatile copies, indices checked).
    let region = unsafe { RingRegion::new(map.as_ptr().add(at), n, entries, slot_size) }
        .map_err(|e| GuestError::Other(format!("a ring at BAR2 {offset:#x}: {e:?}")))?;
    Ok(Held {
        view: region,
        _bus: bus.clone(),
    })
}

/// The producer end of a ring MMAP_TARGET placed at `m` (a command ring).
///
/// # Errors
/// As [`view`].
pub fn producer<T: Slot, B: Bus>(
    bus: &Arc<B>,
    m: &MmapReply,
    entries: u32,
) -> Result<Held<Producer<T>, B>, GuestError> {
    let v = view(bus, m.offset, m.len, entries, size_of::<T>())?;
    Ok(Held {
        view: Producer::new(v.view),
        _bus: v._bus,
    })
}

/// The consumer end of a ring MMAP_TARGET placed at `m` (an event ring).
///
/// # Errors
/// As [`view`].
pub fn consumer<T: Slot, B: Bus>(
    bus: &Arc<B>,
    m: &MmapReply,
    entries: u32,
) -> Result<Held<Consumer<T>, B>, GuestError> {
    let v = view(bus, m.offset, m.len, entries, size_of::<T>())?;
    Ok(Held {
        view: Consumer::new(v.view),
        _bus: v._bus,
    })
}

/// Reads and validates BAR2's header (page 0) through `bus`.
///
/// # Errors
/// The header's first bad field.
pub fn read_header<B: Bus>(bus: &B) -> Result<Bar2Header, GuestError> {
    let map = bus.bar2();
    let mut page = [0u8; PAGE_SIZE as usize];
    map.read(0, &mut page).map_err(|_| {
        GuestError::Other(format!("BAR2 of {} bytes has no header page", map.len()))
    })?;
    Bar2Header::decode(&page, map.len() as u64).map_err(GuestError::other)
}

/// The guest's transport: the admin queue's host ends over the bus's mapping of BAR2.
pub struct AdminQueue<B: Bus> {
    sq: Held<Producer<AdminSlot>, B>,
    cq: Held<Consumer<AdminSlot>, B>,
    header: Bar2Header,
    tag: u64,
    limit: Duration,
    bus: Arc<B>,
}

impl<B: Bus> AdminQueue<B> {
    /// Reads BAR2's header (it must say the device is ready) and takes the admin rings it
    /// names. `limit` bounds every wait for a completion.
    ///
    /// # Errors
    /// A bad header, a device not ready, admin rings that do not fit.
    pub fn connect(bus: Arc<B>, limit: Duration) -> Result<AdminQueue<B>, GuestError> {
        let header = read_header(&*bus)?;
        if header.state != DeviceState::Ready {
            return Err(GuestError::Other(format!(
                "the device is not ready: {:?} (failure errno {})",
                header.state, header.failure
            )));
        }
        let l = header.layout;
        let ring = |at| view(&bus, at, l.ring_bytes, ADMIN_DEPTH, ADMIN_ENTRY_SIZE);
        let (sq, cq) = (ring(l.sq_offset)?, ring(l.cq_offset)?);
        Ok(AdminQueue {
            sq: Held {
                view: Producer::new(sq.view),
                _bus: sq._bus,
            },
            cq: Held {
                view: Consumer::new(cq.view),
                _bus: cq._bus,
            },
            header,
            tag: 0,
            limit,
            bus,
        })
    }

    /// The bus.
    pub fn bus(&self) -> &Arc<B> {
        &self.bus
    }

    /// The header as read at [`connect`](Self::connect).
    pub fn header(&self) -> &Bar2Header {
        &self.header
    }

    /// The admin submission ring's producer end.
    pub fn submission(&self) -> &Producer<AdminSlot> {
        &self.sq
    }

    /// Posts one raw entry and rings the admin vector.
    ///
    /// # Errors
    /// The submission ring is full; the bus's error.
    pub fn post_raw(&mut self, bytes: &[u8; ADMIN_ENTRY_SIZE]) -> Result<(), GuestError> {
        let slot: AdminSlot = bytes_to_words(bytes);
        if self.sq.push(&slot).is_err() {
            return Err(GuestError::Other(
                "the admin submission ring is full".into(),
            ));
        }
        self.sq.publish();
        self.bus.ring(VECTOR_ADMIN)
    }

    /// The next completion, waiting (at most the limit) for the admin vector.
    ///
    /// # Errors
    /// [`GuestError::Timeout`]; a completion that does not decode; the bus's error.
    pub fn completion(&mut self) -> Result<Completion, GuestError> {
        let deadline = Instant::now() + self.limit;
        loop {
            let mut got = None;
            self.cq.consume(1, |s| got = Some(s));
            if let Some(s) = got {
                let bytes: [u8; ADMIN_ENTRY_SIZE] = words_to_bytes(&s);
                return Completion::decode(&bytes)
                    .map_err(|e| GuestError::Other(format!("an admin completion: {e:?}")));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(GuestError::Timeout(format!(
                    "an admin completion ({:?})",
                    self.limit
                )));
            }
            self.bus.wait(VECTOR_ADMIN, left)?;
        }
    }

    /// One request and its completion (the tag checked).
    ///
    /// # Errors
    /// As [`post_raw`](Self::post_raw) and [`completion`](Self::completion); a completion
    /// for another tag.
    pub fn call(&mut self, client: u32, op: AdminOp) -> Result<Completion, GuestError> {
        self.tag += 1;
        let req = AdminRequest {
            tag: self.tag,
            client,
            op,
        };
        let mut bytes = [0u8; ADMIN_ENTRY_SIZE];
        req.encode(&mut bytes);
        self.post_raw(&bytes)?;
        let c = self.completion()?;
        if c.tag != self.tag {
            return Err(GuestError::Other(format!(
                "a completion for tag {}, expected {}",
                c.tag, self.tag
            )));
        }
        Ok(c)
    }

    /// Like [`call`](Self::call), a failed reply as [`GuestError::Device`].
    fn call_ok(&mut self, client: u32, op: AdminOp) -> Result<Completion, GuestError> {
        let c = self.call(client, op)?;
        match c.reply {
            ReplyKind::Failed => Err(GuestError::Device {
                errno: c.errno,
                message: c.message().to_string(),
            }),
            _ => Ok(c),
        }
    }

    /// OPEN: a client for a process (`pid`, `uid`, its `comm`); its id.
    ///
    /// # Errors
    /// As [`call`](Self::call); the device's refusal.
    pub fn open(&mut self, pid: u32, uid: u32, comm: &str) -> Result<u32, GuestError> {
        let mut name = [0u8; 16];
        let n = comm.len().min(15);
        name[..n].copy_from_slice(&comm.as_bytes()[..n]);
        let c = self.call_ok(
            0,
            AdminOp::Open(OpenArgs {
                control: false,
                pid,
                uid,
                admin: false,
                comm: name,
                container: [0; 64],
            }),
        )?;
        Ok(c.client)
    }

    /// An ioctl of `client` with `args` in and out.
    ///
    /// # Errors
    /// As [`call`](Self::call); the device's refusal ([`GuestError::Device`]).
    pub fn ioctl<T: Wire>(
        &mut self,
        client: u32,
        request: u32,
        args: &mut T,
    ) -> Result<(), GuestError> {
        let mut arg = ArgBuf::zeroed(T::SIZE)
            .ok_or_else(|| GuestError::Other(format!("ioctl {request:#x}: argument too large")))?;
        args.encode(arg.as_mut_slice());
        let c = self.call_ok(client, AdminOp::Ioctl { request, arg })?;
        // (Bytes missing from a short reply decode as zero.)
        *args = T::decode(c.arg.as_slice());
        Ok(())
    }

    /// MMAP_TARGET: where the object `cookie` (an mmap offset the device handed out) lies
    /// in BAR2.
    ///
    /// # Errors
    /// As [`call`](Self::call); the device's refusal; a reply that does not decode.
    pub fn map(&mut self, client: u32, cookie: u64, len: u64) -> Result<MmapReply, GuestError> {
        let c = self.call_ok(client, AdminOp::MmapTarget { cookie, len })?;
        MmapReply::from_arg(c.arg.as_slice())
            .map_err(|e| GuestError::Other(format!("an MMAP_TARGET reply: {e:?}")))
    }

    /// CLOSE: the client and everything it holds go.
    ///
    /// # Errors
    /// As [`call`](Self::call); the device's refusal.
    pub fn close(&mut self, client: u32) -> Result<(), GuestError> {
        self.call_ok(client, AdminOp::Close).map(drop)
    }
}
