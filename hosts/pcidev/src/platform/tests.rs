use super::*;
use davinci_hwif::layout::MIN_REGION;
use davinci_ivshmem::{Server, ShmSpec};

/// A platform over a real server's region of `size` bytes (the server is kept alive).
fn platform(size: u64) -> (tempfile::TempDir, Server, Bar2Platform) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::bind(dir.path().join("s"), ShmSpec { size }, 2).unwrap();
    let bar2 = Arc::new(Bar2::map(server.shared_fd(), size as usize).unwrap());
    let layout = Bar2Layout::for_region(size).unwrap();
    (dir, server, Bar2Platform::new(bar2, layout))
}

#[test]
fn allocations_are_bounded_by_the_heap_and_zeroed_for_the_next_owner() {
    let (_d, _s, mut p) = platform(MIN_REGION); // 8 heap pages: 4 for rings, 4 for memory
    assert_eq!(p.heap_bytes(), 4 * 4096);
    p.alloc_backing(1, 0, 4 * 4096).unwrap();
    let e = p.alloc_backing(2, 0, 4 * 4096).unwrap_err();
    assert_eq!(e.errno, Errno::ENOMEM);
    p.mem_write(1, 4096, b"secret").unwrap();
    p.mem_fill(1, 8192, 8, 0xdead_beef).unwrap();
    let mut b = [0u8; 6];
    p.mem_read(1, 4096, &mut b).unwrap();
    assert_eq!(&b, b"secret");
    // The pages as the guest sees them in BAR2.
    let (at, len) = p.allocation_range(1, 0).unwrap();
    assert_eq!(len, 4 * 4096);
    let mut raw = [0u8; 6];
    p.bar2.mapping().read(at + 4096, &mut raw).unwrap();
    assert_eq!(&raw, b"secret");
    p.free_backing(1, 0, 4 * 4096);
    assert_eq!(p.free_pages(), 4);
    // The next owner gets the same pages, zeroed.
    p.alloc_backing(2, 0, 4 * 4096).unwrap();
    assert_eq!(p.allocation_range(2, 0).unwrap().0, at);
    let mut all = vec![1u8; 4 * 4096];
    p.mem_read(2, 0, &mut all).unwrap();
    assert!(all.iter().all(|&x| x == 0));
}

#[test]
fn memory_access_stays_inside_one_allocation_of_its_client() {
    let (_d, _s, mut p) = platform(MIN_REGION);
    p.alloc_backing(1, 0, 4096).unwrap();
    p.alloc_backing(1, 4096, 100).unwrap();
    p.alloc_backing(2, 8192, 4096).unwrap();
    let mut b = [0u8; 8];
    assert_eq!(
        p.mem_read(1, 4092, &mut b).unwrap_err().errno,
        Errno::EFAULT
    );
    assert_eq!(
        p.mem_read(1, 4096 + 96, &mut b).unwrap_err().errno,
        Errno::EFAULT
    );
    assert_eq!(p.mem_read(2, 0, &mut b).unwrap_err().errno, Errno::EFAULT);
    assert_eq!(
        p.mem_read(3, 8192, &mut b).unwrap_err().errno,
        Errno::EFAULT
    );
    assert_eq!(
        p.mem_fill(1, u64::MAX - 3, 4, 0).unwrap_err().errno,
        Errno::EFAULT
    );
    // A copy between two clients' allocations (an import) and within one.
    p.mem_write(2, 8192, b"abcdefgh").unwrap();
    p.mem_copy((1, 4096), (2, 8192), 8).unwrap();
    p.mem_read(1, 4096, &mut b).unwrap();
    assert_eq!(&b, b"abcdefgh");
    p.mem_copy((1, 4098), (1, 4096), 4).unwrap();
    p.mem_read(1, 4096, &mut b).unwrap();
    assert_eq!(&b, b"ababcdgh");
    p.forget_client(1);
    assert_eq!(p.backed_allocations(), 1);
    assert_eq!(p.free_pages(), 3);
}

#[test]
fn the_rings_area_is_an_eighth_of_the_heap_and_at_least_half_of_a_small_one() {
    assert_eq!(ring_pages(9), 4);
    assert_eq!(ring_pages(40), 16);
    assert_eq!(ring_pages(233), 29);
    assert_eq!(ring_pages(65513), 8189);
}

#[test]
fn streams_take_zeroed_page_runs_and_give_them_back() {
    let (_d, _s, mut p) = platform(1 << 20);
    let (free, memory) = (p.free_ring_pages(), p.free_pages());
    // Dirty the heap as a hostile guest could.
    let (h, hl) = (p.layout.heap_offset, p.layout.heap_pages * 4096);
    p.bar2.mapping().fill(h, hl, 0xffff_ffff).unwrap();
    let r = p.create_stream(1, 32, 4096 + 4096, 64, 4096 * 2).unwrap();
    // From the rings' area (the heap's first pages), never device memory's.
    assert_eq!((p.free_ring_pages(), p.free_pages()), (free - 5, memory));
    let m = &r.mem;
    assert_eq!(m.cmd, (h, 8192));
    assert_eq!(m.event, (h + 8192, 8192));
    assert_eq!(m.doorbell, h + 16384);
    let mut page = vec![1u8; 5 * 4096];
    p.bar2.mapping().read(h, &mut page).unwrap();
    assert!(
        page.iter().all(|&x| x == 0),
        "a new stream's pages read zero"
    );
    assert_eq!((r.cmd.entries(), r.event.entries()), (32, 64));
    // The core drops the ring views before it hands the pages back.
    let StreamRegions { mem, .. } = r;
    p.release_stream(1, 1, mem);
    assert_eq!(p.free_ring_pages(), free);
    // More than the rings' area: ENOMEM, nothing taken (device memory's pages included).
    let Err(e) = p.create_stream(1, 1 << 15, 1 << 21, 64, 8192) else {
        panic!("a stream larger than the rings' area was created");
    };
    assert_eq!(e.errno, Errno::ENOMEM);
    assert!(e.msg.contains("ring area"), "{}", e.msg);
    assert_eq!((p.free_ring_pages(), p.free_pages()), (free, memory));
    // Wake-ups are recorded once.
    p.notify_waiters(1);
    assert!(p.take_irq() && !p.take_irq());
    assert!(p.take_kick() && !p.take_kick());
}

/// A client's waiters are notified through its own word of page 0 (and vector 1): another
/// client's word does not move.
#[test]
fn notifying_a_client_bumps_its_word_alone_and_asks_for_vector_1() {
    use davinci_hwif::layout::{notify_offset, NOTIFY_WORDS};
    let (_d, _s, p) = platform(MIN_REGION);
    let word = |c: u32| {
        p.bar2
            .mapping()
            .word(notify_offset(c))
            .unwrap()
            .load(Ordering::Acquire)
    };
    assert!(!p.take_irq());
    let (a, b) = (7u32, 8u32);
    p.notify_waiters(a);
    p.notify_waiters(a);
    assert_eq!((word(a), word(b)), (2, 0));
    assert!(p.take_irq(), "vector 1 is due");
    assert!(!p.take_irq(), "once");
    // Ids share a word modulo NOTIFY_WORDS (a spurious wake-up, nothing more).
    p.notify_waiters(b + NOTIFY_WORDS);
    assert_eq!((word(a), word(b)), (2, 1));
}
