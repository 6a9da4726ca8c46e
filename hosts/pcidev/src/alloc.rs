//! [`PageAllocator`]: runs of contiguous 4 KiB pages of BAR2's heap, first fit, bounded by
//! the heap fixed at boot (a request it cannot place is refused: `ENOMEM` for the caller,
//! never growth).
#![forbid(unsafe_code)]

/// Which heap pages are taken.
#[derive(Debug)]
pub struct PageAllocator {
    used: Vec<bool>,
    free: u64,
}

impl PageAllocator {
    /// A heap of `pages` free pages.
    pub fn new(pages: u64) -> Self {
        Self {
            used: vec![false; usize::try_from(pages).unwrap_or(0)],
            free: pages,
        }
    }

    /// Pages in the heap.
    pub fn pages(&self) -> u64 {
        self.used.len() as u64
    }

    /// Free pages (not necessarily contiguous).
    pub fn free_pages(&self) -> u64 {
        self.free
    }

    /// Takes the first run of `n` free pages (`n > 0`): its first page, or `None` when no
    /// run of `n` is free.
    pub fn alloc(&mut self, n: u64) -> Option<u64> {
        let n = usize::try_from(n).ok().filter(|&n| n > 0)?;
        if n as u64 > self.free {
            return None;
        }
        let mut run = 0usize;
        for i in 0..self.used.len() {
            if self.used[i] {
                run = 0;
                continue;
            }
            run += 1;
            if run == n {
                let first = i + 1 - n;
                self.used[first..=i].fill(true);
                self.free -= n as u64;
                return Some(first as u64);
            }
        }
        None
    }

    /// Returns the run of `n` pages from `first` (what [`alloc`](Self::alloc) gave). Pages
    /// outside the heap or already free are left alone (a host bug, not a crash).
    pub fn free(&mut self, first: u64, n: u64) {
        let (Ok(first), Ok(n)) = (usize::try_from(first), usize::try_from(n)) else {
            return;
        };
        let end = first.saturating_add(n).min(self.used.len());
        for u in self.used.get_mut(first..end).into_iter().flatten() {
            if *u {
                *u = false;
                self.free += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_contiguous_runs_and_a_bounded_heap() {
        let mut a = PageAllocator::new(8);
        assert_eq!(a.alloc(0), None);
        assert_eq!(a.alloc(3), Some(0));
        assert_eq!(a.alloc(2), Some(3));
        assert_eq!(a.alloc(4), None); // 3 left
        assert_eq!(a.free_pages(), 3);
        a.free(0, 3);
        assert_eq!(a.alloc(4), None); // 3 + 3 free, not contiguous
        assert_eq!(a.alloc(3), Some(0));
        assert_eq!(a.alloc(3), Some(5));
        assert_eq!((a.alloc(1), a.free_pages()), (None, 0));
        // Freeing outside or twice changes nothing it should not.
        a.free(7, 100);
        a.free(7, 1);
        assert_eq!(a.free_pages(), 1);
        a.free(u64::MAX, u64::MAX);
        assert_eq!(a.alloc(1), Some(7));
        assert_eq!(a.pages(), 8);
    }
}
