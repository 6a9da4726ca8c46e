//! Pool blocks exported alone (ABI 1.5, EXPORT_RANGE), and blocks held for leases: a block
//! dropped while another client imports it under a lease is kept out of reuse until the
//! last import goes, then handed back to its chunk.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{BlockInner, PoolBuffer, State};
use crate::error::Result;
use crate::export_lease::{self, Lifetime};
use crate::memory::{BufferInner, ExportTo, ExportToken};

/// A dropped block an import still holds under a lease.
pub(super) struct Parked {
    chunk_id: u64,
    chunk: Arc<BufferInner>,
    offset: usize,
    size: usize,
}

impl PoolBuffer {
    /// Shares this block, not its chunk, with the clients `to` names (ABI 1.5,
    /// EXPORT_RANGE): an importer ([`Device::import`](crate::Device::import)) reaches the
    /// block's pages alone. When the block returns to the pool its exports end: with
    /// [`Lifetime::Revoke`] the imports are revoked then; with [`Lifetime::Lease`] the block
    /// is held out of reuse until the last import is freed
    /// ([`PoolStats::leased_blocks`](crate::PoolStats::leased_blocks)). The block must be
    /// whole pages: a pool made with `PoolOptions::align(page_size)` or more.
    ///
    /// # Errors
    /// `EINVAL` a block that is not whole pages (says which align would do), or a device
    /// without ranges (ABI < 1.5); `ENOSPC` the tenant's export quota or the device's 256.
    pub fn export(&self, to: ExportTo, lifetime: Lifetime) -> Result<ExportToken> {
        let b = &self.inner;
        export_lease::whole_pages(b.chunk.device(), b.offset, b.size)?;
        b.exported.store(true, Ordering::Release);
        export_lease::export_range(&b.chunk, (b.offset as u64, b.size as u64), to, lifetime)
    }
}

impl BlockInner {
    /// The block is going back: its exports end first (imports without a lease are
    /// revoked). Whether a lease still holds it: then it must not be reused yet. If the
    /// device cannot say (lost), it is held as if leased.
    pub(super) fn end_exports(&self) -> bool {
        self.exported.load(Ordering::Acquire)
            && export_lease::unexport(&self.chunk, (self.offset as u64, self.size as u64)) != Ok(0)
    }

    /// Held out of reuse for its lease's imports.
    pub(super) fn hold_for_lease(&self, s: &mut State) {
        s.parked.push(Parked {
            chunk_id: self.chunk_id,
            chunk: self.chunk.clone(),
            offset: self.offset,
            size: self.size,
        });
        s.stats.leased_blocks = s.parked.len();
    }
}

/// Blocks held for leases whose imports are all gone go back to their chunks: how many.
pub(super) fn reclaim(s: &mut State) -> usize {
    let before = s.parked.len();
    let mut back = Vec::new();
    s.parked.retain(|p| {
        // An error (the device lost): keep it held, as safe as a lease still standing.
        let gone = export_lease::unexport(&p.chunk, (p.offset as u64, p.size as u64)) == Ok(0);
        if gone {
            back.push((p.chunk_id, p.offset, p.size));
        }
        !gone
    });
    for (id, offset, size) in back {
        if let Some(c) = s.chunks.iter_mut().find(|c| c.id == id) {
            c.give(offset, size);
        }
    }
    s.stats.leased_blocks = s.parked.len();
    before - s.parked.len()
}
