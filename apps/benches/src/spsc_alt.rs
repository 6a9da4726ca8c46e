//! The two-ring baseline on other SPSC rings, extra rows beside THE baseline (`spsc.rs`'s own
//! ring, the fastest here): `rtrb::RingBuffer`, used in chunks (one index store per batch on
//! each side, remote indices cached: the same discipline as the own ring, with plain memory
//! copies of the items instead of atomic words), and crossbeam's `ArrayQueue` (bounded MPMC:
//! a stamp per slot and a compare-and-swap per item; it cannot batch). Same host and device
//! loops, same checks, same depths.
#![forbid(unsafe_code)]

use crossbeam_queue::ArrayQueue;
use std::sync::Arc;

use crate::spsc::{start, Cpl, Desc, Pipeline, Rx, Tx};

impl<T: Copy> Tx<T> for rtrb::Producer<T> {
    fn free(&mut self, want: usize) -> usize {
        let cached = self.cached_slots();
        if cached >= want {
            cached
        } else {
            self.slots()
        }
    }

    fn send(&mut self, n: usize, item: impl FnMut(usize) -> T) {
        if let Ok(chunk) = self.write_chunk_uninit(n) {
            chunk.fill_from_iter((0..n).map(item));
        }
    }
}

impl<T: Copy> Rx<T> for rtrb::Consumer<T> {
    fn available(&mut self) -> usize {
        match self.cached_slots() {
            0 => self.slots(),
            n => n,
        }
    }

    fn take(&mut self, n: usize) -> impl Iterator<Item = T> + '_ {
        // Commits (one index store) what it gave out when dropped.
        self.read_chunk(n).ok().into_iter().flatten()
    }
}

/// One end of an [`ArrayQueue`].
#[derive(Debug)]
pub struct Queue<T>(Arc<ArrayQueue<T>>);

impl<T: Copy> Tx<T> for Queue<T> {
    fn free(&mut self, _want: usize) -> usize {
        self.0.capacity() - self.0.len()
    }

    fn send(&mut self, n: usize, mut item: impl FnMut(usize) -> T) {
        for i in 0..n {
            // The caller saw room for n; a push cannot fail (only this thread pushes).
            let _ = self.0.push(item(i));
        }
    }
}

impl<T: Copy> Rx<T> for Queue<T> {
    fn available(&mut self) -> usize {
        self.0.len()
    }

    fn take(&mut self, n: usize) -> impl Iterator<Item = T> + '_ {
        (0..n).map_while(|_| self.0.pop())
    }
}

/// A pipeline over two `rtrb` rings of `entries` slots.
///
/// # Errors
/// The device thread cannot be spawned.
pub fn rtrb(entries: u32) -> Result<Pipeline<rtrb::Producer<Desc>, rtrb::Consumer<Cpl>>, String> {
    let (cmd, dev_cmd) = rtrb::RingBuffer::new(entries as usize);
    let (dev_cpl, cpl) = rtrb::RingBuffer::new(entries as usize);
    start::<Desc, _, _, _, _>((cmd, cpl), (dev_cmd, dev_cpl))
}

/// A pipeline over two `ArrayQueue`s of `entries` slots.
///
/// # Errors
/// The device thread cannot be spawned.
pub fn array_queue(entries: u32) -> Result<Pipeline<Queue<Desc>, Queue<Cpl>>, String> {
    let cmd = Arc::new(ArrayQueue::new(entries.max(1) as usize));
    let cpl = Arc::new(ArrayQueue::new(entries.max(1) as usize));
    start::<Desc, _, _, _, _>(
        (Queue(cmd.clone()), Queue(cpl.clone())),
        (Queue(cmd), Queue(cpl)),
    )
}
