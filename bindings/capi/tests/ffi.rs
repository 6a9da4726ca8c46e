//! The C entry points called from Rust as a C program would: NULL pointers and bad lengths
//! are -EINVAL with a message naming the argument, a round trip works, handles free in any
//! order, and the header's version constants are the crate's.

use std::ffi::{c_char, CStr};
use std::ptr::{null, null_mut};

use davinci::*;

fn last_error() -> String {
    // SAFETY: davinci_last_error returns a NUL-terminated string owned by this thread.
    unsafe { CStr::from_ptr(davinci_last_error()) }
        .to_string_lossy()
        .into_owned()
}

#[test]
fn versions_are_the_crates() {
    assert_eq!(
        DAVINCI_RUNTIME_VERSION_MAJOR.to_string(),
        env!("CARGO_PKG_VERSION_MAJOR")
    );
    assert_eq!(
        DAVINCI_RUNTIME_VERSION_MINOR.to_string(),
        env!("CARGO_PKG_VERSION_MINOR")
    );
    assert_eq!(
        DAVINCI_RUNTIME_VERSION_PATCH.to_string(),
        env!("CARGO_PKG_VERSION_PATCH")
    );
    assert_eq!(
        DAVINCI_RUNTIME_VERSION,
        DAVINCI_RUNTIME_VERSION_MAJOR << 16
            | DAVINCI_RUNTIME_VERSION_MINOR << 8
            | DAVINCI_RUNTIME_VERSION_PATCH
    );
    assert_eq!(davinci_runtime_version(), DAVINCI_RUNTIME_VERSION);
}

#[test]
fn null_pointers_and_bad_lengths_are_einval() {
    // SAFETY: every pointer passed is NULL or valid, as the functions' contracts allow.
    unsafe {
        assert_eq!(
            davinci_device_open(c"embedded".as_ptr(), null_mut()),
            -libc::EINVAL
        );
        assert!(
            last_error().contains("out (out-parameter) is NULL"),
            "{}",
            last_error()
        );
        let mut ctx = null_mut();
        assert_eq!(davinci_context_create(null(), &mut ctx), -libc::EINVAL);
        assert_eq!(last_error(), "davinci_context_create: dev is NULL");
        assert!(ctx.is_null());
        assert_eq!(davinci_stream_synchronize(null(), 0), -libc::EINVAL);
        let mut n = 0usize;
        assert_eq!(davinci_buffer_size(null(), &mut n), -libc::EINVAL);
        let mut dev = null_mut();
        assert_eq!(davinci_device_open(c"embedded".as_ptr(), &mut dev), 0);
        let mut buf = null_mut();
        assert_eq!(davinci_buffer_alloc(dev, 64, &mut buf), 0);
        assert_eq!(davinci_buffer_write(buf, 0, null(), 8), -libc::EINVAL);
        assert!(last_error().contains("src is NULL with 8 bytes"));
        let word = 0u32;
        assert_eq!(
            davinci_buffer_write(buf, 62, (&raw const word).cast(), 4),
            -libc::ERANGE
        );
        let mut out = [0u8; 4];
        assert_eq!(
            davinci_buffer_read(buf, 0, out.as_mut_ptr().cast(), usize::MAX),
            -libc::EINVAL
        );
        let mut t = null_mut();
        let r = davinci_region {
            buffer: buf,
            offset: 8,
            length: DAVINCI_WHOLE,
        };
        assert_eq!(davinci_task_fill(r, 1, &mut t), 0);
        let past = davinci_region {
            buffer: buf,
            offset: 65,
            length: DAVINCI_WHOLE,
        };
        let mut t2 = null_mut();
        assert_eq!(davinci_task_fill(past, 1, &mut t2), -libc::ERANGE);
        assert!(last_error().contains("dst: bytes [65"), "{}", last_error());
        davinci_task_destroy(t);
        davinci_buffer_free(buf);
        davinci_device_destroy(dev);
        davinci_device_destroy(null_mut());
    }
}

#[test]
fn a_bad_path_names_itself() {
    let mut dev = null_mut();
    // SAFETY: a NUL-terminated path and a writable out-parameter.
    let r = unsafe { davinci_device_open(c"/dev/davinci-capi-rust-test".as_ptr(), &mut dev) };
    assert_eq!(r, -libc::ENODEV);
    let m = last_error();
    assert!(
        m.starts_with("davinci_device_open: device \"/dev/davinci-capi-rust-test\"")
            && m.contains("ENODEV"),
        "{m}"
    );
    assert!(dev.is_null());
}

#[test]
fn fill_and_add_round_trip_with_a_buffer_freed_while_queued() {
    // SAFETY: every handle is used while live and freed once; out-parameters are writable.
    unsafe {
        let (mut dev, mut ctx, mut s, mut pool) = (null_mut(), null_mut(), null_mut(), null_mut());
        assert_eq!(davinci_device_open(c"embedded".as_ptr(), &mut dev), 0);
        assert_eq!(davinci_context_create(dev, &mut ctx), 0);
        assert_eq!(davinci_stream_create(ctx, null(), &mut s), 0);
        assert_eq!(davinci_pool_create(dev, null(), &mut pool), 0);
        let (mut a, mut b, mut sum) = (null_mut(), null_mut(), null_mut());
        for p in [&mut a, &mut b, &mut sum] {
            assert_eq!(davinci_pool_alloc(pool, 64, p), 0);
        }
        let whole = |b| davinci_region {
            buffer: b,
            offset: 0,
            length: DAVINCI_WHOLE,
        };
        let (mut fa, mut fb, mut add) = (null_mut(), null_mut(), null_mut());
        assert_eq!(davinci_task_fill(whole(a), 3, &mut fa), 0);
        assert_eq!(davinci_task_fill(whole(b), 4, &mut fb), 0);
        assert_eq!(
            davinci_task_add(0, whole(sum), whole(a), whole(b), &mut add),
            0
        );
        assert_eq!(davinci_task_set_user_data(add, 9), 0);
        let batch = [fa.cast_const(), fb.cast_const(), add.cast_const()];
        let mut first = u64::MAX;
        assert_eq!(
            davinci_stream_submit_batch(s, batch.as_ptr(), 3, &mut first),
            0
        );
        assert_eq!(first, 0);
        for t in batch {
            davinci_task_destroy(t.cast_mut());
        }
        davinci_buffer_free(a);
        davinci_buffer_free(b);
        let mut st = std::mem::zeroed::<davinci_pool_stats>();
        assert_eq!(davinci_pool_get_stats(pool, &mut st), 0);
        assert_eq!(st.blocks, 3, "queued tasks hold the freed blocks");
        assert_eq!(davinci_stream_synchronize(s, 5_000_000_000), 0);
        assert_eq!(davinci_pool_get_stats(pool, &mut st), 0);
        assert_eq!(st.blocks, 1);
        let mut out = [0u32; 16];
        assert_eq!(davinci_buffer_read(sum, 0, out.as_mut_ptr().cast(), 64), 0);
        assert_eq!(out, [7; 16]);
        let mut done = [davinci_completion::default(); 2];
        let mut n = 0;
        assert_eq!(davinci_stream_poll(s, done.as_mut_ptr(), 2, &mut n), 0);
        assert_eq!((n, done[0].task, done[1].task), (2, 0, 1));
        assert_eq!(davinci_stream_poll(s, done.as_mut_ptr(), 2, &mut n), 0);
        assert_eq!((n, done[0].user_data, done[0].status), (1, 9, 0));
        let mut text = [0 as c_char; 64];
        let len = davinci_device_describe(dev, text.as_mut_ptr(), text.len());
        assert!(len > 0);
        assert!(CStr::from_ptr(text.as_ptr())
            .to_string_lossy()
            .contains("embedded"));
        // Any order.
        davinci_device_destroy(dev);
        davinci_context_destroy(ctx);
        davinci_pool_destroy(pool);
        davinci_buffer_free(sum);
        davinci_stream_destroy(s);
    }
}

#[test]
fn a_host_view_sees_writes_and_the_device_and_keeps_its_buffer() {
    // SAFETY: every handle is used while live and freed once; out-parameters are writable;
    // the views' bytes are touched only within their length, while they live, and after the
    // stream's synchronize for what the device wrote.
    unsafe {
        let (mut dev, mut ctx, mut s, mut buf) = (null_mut(), null_mut(), null_mut(), null_mut());
        assert_eq!(davinci_device_open(c"embedded".as_ptr(), &mut dev), 0);
        assert_eq!(davinci_context_create(dev, &mut ctx), 0);
        assert_eq!(davinci_stream_create(ctx, null(), &mut s), 0);
        assert_eq!(davinci_buffer_alloc(dev, 4096, &mut buf), 0);
        let mut view = null_mut();
        assert_eq!(davinci_buffer_map(buf, &mut view), 0);
        assert_eq!(davinci_host_view_size(view), 4096);
        let data = davinci_host_view_data(view).cast::<u32>();
        assert!(!data.is_null());
        assert_eq!(
            data as usize % 4096,
            0,
            "an allocation's view is page-aligned"
        );
        let bytes = std::slice::from_raw_parts_mut(data, 1024);

        // What davinci_buffer_write wrote, the view sees; what the view wrote, the copy reads.
        let word = 0x1234_5678u32;
        assert_eq!(davinci_buffer_write(buf, 8, (&raw const word).cast(), 4), 0);
        assert_eq!(bytes[2], word);
        bytes[3] = 0xfeed;
        let mut back = 0u32;
        assert_eq!(davinci_buffer_read(buf, 12, (&raw mut back).cast(), 4), 0);
        assert_eq!(back, 0xfeed);

        // A device FILL, seen through the view after synchronize.
        let mut fill = null_mut();
        let whole = davinci_region {
            buffer: buf,
            offset: 0,
            length: DAVINCI_WHOLE,
        };
        assert_eq!(davinci_task_fill(whole, 0xdead_beef, &mut fill), 0);
        assert_eq!(davinci_stream_submit(s, fill, null_mut()), 0);
        davinci_task_destroy(fill);
        assert_eq!(davinci_stream_synchronize(s, 5_000_000_000), 0);
        assert!(bytes.iter().all(|&w| w == 0xdead_beef));

        // The view counts as a use and keeps the memory after the buffer's free.
        let mut uses = 0;
        assert_eq!(davinci_buffer_pending_uses(buf, &mut uses), 0);
        assert_eq!(uses, 1);
        let mut info = std::mem::zeroed();
        assert_eq!(davinci_device_query_info(dev, &mut info), 0);
        let used = info.memory_used;
        davinci_buffer_free(buf);
        assert_eq!(davinci_device_query_info(dev, &mut info), 0);
        assert_eq!(info.memory_used, used, "not freed while viewed");
        assert!(bytes.iter().all(|&w| w == 0xdead_beef));
        davinci_host_view_release(view);
        assert_eq!(davinci_device_query_info(dev, &mut info), 0);
        assert!(info.memory_used < used, "freed at the view's release");

        davinci_stream_destroy(s);
        davinci_context_destroy(ctx);
        davinci_device_destroy(dev);
    }
}

#[test]
fn pool_block_views_lie_in_their_chunk_and_hold_the_block() {
    // SAFETY: as above.
    unsafe {
        let (mut dev, mut pool, mut a, mut b) = (null_mut(), null_mut(), null_mut(), null_mut());
        assert_eq!(davinci_device_open(c"embedded".as_ptr(), &mut dev), 0);
        assert_eq!(davinci_pool_create(dev, null(), &mut pool), 0);
        assert_eq!(davinci_pool_alloc(pool, 100, &mut a), 0);
        assert_eq!(davinci_pool_alloc(pool, 100, &mut b), 0);
        let (mut va, mut vb, mut vb2) = (null_mut(), null_mut(), null_mut());
        assert_eq!(davinci_buffer_map(a, &mut va), 0);
        assert_eq!(davinci_buffer_map(b, &mut vb), 0);
        assert_eq!(davinci_buffer_map(b, &mut vb2), 0);
        let mut size = 0;
        assert_eq!(davinci_buffer_size(a, &mut size), 0);
        assert_eq!(davinci_host_view_size(va), size);
        let (pa, pb) = (davinci_host_view_data(va), davinci_host_view_data(vb));
        assert_eq!(
            pb,
            davinci_host_view_data(vb2),
            "views of one buffer share its bytes"
        );
        assert_eq!(pa as usize % 64, 0);
        let (mut da, mut db) = (0, 0);
        assert_eq!(davinci_buffer_dev_addr(a, &mut da), 0);
        assert_eq!(davinci_buffer_dev_addr(b, &mut db), 0);
        assert_eq!(pb as usize - pa as usize, (db - da) as usize);
        pa.cast::<u8>().write_bytes(0x5a, 100);
        let mut out = [0u8; 100];
        assert_eq!(davinci_buffer_read(a, 0, out.as_mut_ptr().cast(), 100), 0);
        assert_eq!(out, [0x5a; 100]);

        let blocks = |pool| {
            let mut st = std::mem::zeroed::<davinci_pool_stats>();
            assert_eq!(davinci_pool_get_stats(pool, &mut st), 0);
            st.blocks
        };
        davinci_buffer_free(a);
        davinci_buffer_free(b);
        assert_eq!(blocks(pool), 2, "the freed blocks wait for their views");
        davinci_host_view_release(va);
        assert_eq!(blocks(pool), 1);
        davinci_host_view_release(vb);
        assert_eq!(blocks(pool), 1, "b has another view");
        // A view outlives its pool's handle too (the block keeps its chunk).
        davinci_pool_destroy(pool);
        pb.cast::<u8>().write_bytes(0x3c, 100);
        assert_eq!(*pb.cast::<u8>().add(99), 0x3c);
        davinci_host_view_release(vb2);
        davinci_device_destroy(dev);
    }
}

#[test]
fn host_view_arguments_are_checked() {
    // SAFETY: every pointer passed is NULL or valid, as the functions' contracts allow.
    unsafe {
        let mut view = null_mut();
        assert_eq!(davinci_buffer_map(null(), &mut view), -libc::EINVAL);
        assert_eq!(last_error(), "davinci_buffer_map: buf is NULL");
        assert!(view.is_null());
        let (mut dev, mut buf) = (null_mut(), null_mut());
        assert_eq!(davinci_device_open(c"embedded".as_ptr(), &mut dev), 0);
        assert_eq!(davinci_buffer_alloc(dev, 64, &mut buf), 0);
        assert_eq!(davinci_buffer_map(buf, null_mut()), -libc::EINVAL);
        assert_eq!(
            last_error(),
            "davinci_buffer_map: out (out-parameter) is NULL"
        );
        let mut uses = 0;
        assert_eq!(davinci_buffer_pending_uses(buf, &mut uses), 0);
        assert_eq!(uses, 0, "a failed map holds nothing");
        assert!(davinci_host_view_data(null()).is_null());
        assert_eq!(last_error(), "davinci_host_view_data: view is NULL");
        assert_eq!(davinci_host_view_size(null()), 0);
        assert_eq!(last_error(), "davinci_host_view_size: view is NULL");
        davinci_host_view_release(null_mut());
        davinci_buffer_free(buf);
        davinci_device_destroy(dev);
    }
}

#[test]
fn an_event_destroyed_with_records_and_waits_queued_lives_until_they_ran() {
    const T: u64 = 20_000_000_000;
    // SAFETY: every handle is used while live and freed once; out-parameters are writable.
    unsafe {
        let (mut dev, mut ctx) = (null_mut(), null_mut());
        assert_eq!(davinci_device_open(c"embedded".as_ptr(), &mut dev), 0);
        assert_eq!(davinci_context_create(dev, &mut ctx), 0);
        let (mut p, mut c) = (null_mut(), null_mut());
        assert_eq!(davinci_stream_create(ctx, null(), &mut p), 0);
        assert_eq!(davinci_stream_create(ctx, null(), &mut c), 0);
        let mut buf = null_mut();
        assert_eq!(davinci_buffer_alloc(dev, 4096, &mut buf), 0);
        // cudaEventDestroy's rule: the event is destroyed right after its record, and the
        // record handle right after the wait; both tasks still run against a live event.
        let (mut ev, mut rec) = (null_mut(), null_mut());
        assert_eq!(davinci_event_create(ctx, &mut ev), 0);
        assert_eq!(davinci_event_record(ev, p, &mut rec), 0);
        davinci_event_destroy(ev);
        assert_eq!(davinci_stream_wait_record(c, rec), 0, "{}", last_error());
        assert_eq!(davinci_record_synchronize(rec, T), 0, "{}", last_error());
        let mut done = false;
        assert_eq!(davinci_record_query(rec, &mut done), 0);
        assert!(done);
        davinci_record_destroy(rec);
        let mut fill = null_mut();
        let whole = davinci_region {
            buffer: buf,
            offset: 0,
            length: DAVINCI_WHOLE,
        };
        assert_eq!(davinci_task_fill(whole, 6, &mut fill), 0);
        assert_eq!(davinci_stream_submit(c, fill, null_mut()), 0);
        davinci_task_destroy(fill);
        assert_eq!(davinci_stream_synchronize(c, T), 0, "{}", last_error());
        let mut out = [davinci_completion::default(); 4];
        let mut n = 0;
        assert_eq!(davinci_stream_poll(c, out.as_mut_ptr(), 4, &mut n), 0);
        assert_eq!(n, 2);
        assert!(out[..n].iter().all(|x| x.status == 0), "{:?}", &out[..n]);
        // Destroyed events do not pile up: past the device's whole event table.
        let mut info = std::mem::zeroed::<davinci::davinci_device_props>();
        assert_eq!(davinci_device_get_info(dev, &mut info), 0);
        for i in 0..info.max_events + 64 {
            let (mut ev, mut rec) = (null_mut(), null_mut());
            assert_eq!(
                davinci_event_create(ctx, &mut ev),
                0,
                "{i}: {}",
                last_error()
            );
            assert_eq!(davinci_event_record(ev, p, &mut rec), 0);
            davinci_event_destroy(ev);
            assert_eq!(davinci_stream_wait_record(c, rec), 0);
            davinci_record_destroy(rec);
            if i % 64 == 0 {
                assert_eq!(davinci_stream_synchronize(p, T), 0);
                assert_eq!(davinci_stream_synchronize(c, T), 0);
            }
        }
        assert_eq!(davinci_stream_synchronize(p, T), 0, "{}", last_error());
        assert_eq!(davinci_stream_synchronize(c, T), 0, "{}", last_error());
        davinci_buffer_free(buf);
        davinci_stream_destroy(c);
        davinci_stream_destroy(p);
        davinci_context_destroy(ctx);
        davinci_device_destroy(dev);
    }
}
