//! The ioctl boundary: user pointers that fault (EFAULT, and the file goes on), creates whose
//! reply cannot be copied out (nothing stays created, an import is dropped again), and slab
//! allocations failing inside a call (ENOMEM, nothing left behind).

use std::fs::{File, OpenOptions};

use davinci_shim::{Control, Device, DeviceMem};
use davinci_uapi::{
    AllocMemoryArgs, CreateContextArgs, CreateEventArgs, CreateStreamArgs, ImportMemoryArgs,
    ListClientsArgs, Wire, ABI_VERSION_MAJOR, DRIVER_CMD_ALLOC_MEMORY, DRIVER_CMD_CREATE_CONTEXT,
    DRIVER_CMD_CREATE_EVENT, DRIVER_CMD_CREATE_STREAM, DRIVER_CMD_GET_INFO,
    DRIVER_CMD_IMPORT_MEMORY, DRIVER_CMD_LIST_CLIENTS, DRIVER_CMD_WAIT_EVENT,
};
use nix::libc;

use super::{anon, node_path, page, pinned_bytes, Node, Shared, KERNEL_ONLY};

#[test]
#[ignore = "needs the kernel module: runs in the QEMU guest (scripts/kmod-test.sh)"]
fn bad_user_pointers_are_efault_and_the_file_goes_on() {
    let _ = KERNEL_ONLY;
    let path = node_path();
    let n = Node::open(&path, true);
    let pg = page();

    // Nothing mapped at all.
    assert_eq!(
        n.ioctl_ptr(DRIVER_CMD_GET_INFO, 16 as *mut libc::c_void),
        Err(libc::EFAULT),
        "GET_INFO to address 16"
    );
    assert_eq!(
        n.ioctl_ptr(DRIVER_CMD_CREATE_CONTEXT, std::ptr::null_mut()),
        Err(libc::EFAULT),
        "CREATE_CONTEXT from NULL"
    );
    // Mapped but inaccessible.
    let none = anon(pg, libc::PROT_NONE);
    assert_eq!(
        n.ioctl_ptr(DRIVER_CMD_GET_INFO, none.ptr),
        Err(libc::EFAULT),
        "GET_INFO into a PROT_NONE page"
    );
    assert_eq!(
        n.ioctl_ptr(DRIVER_CMD_WAIT_EVENT, none.ptr),
        Err(libc::EFAULT),
        "WAIT_EVENT from a PROT_NONE page"
    );
    // A struct that starts in a good page and runs into a bad one (a short buffer).
    let two = anon(2 * pg, libc::PROT_READ | libc::PROT_WRITE);
    // SAFETY: the second page of a mapping this test owns.
    let rc = unsafe { libc::mprotect(two.ptr.cast::<u8>().add(pg).cast(), pg, libc::PROT_NONE) };
    assert_eq!(rc, 0, "mprotect");
    // SAFETY: 8 bytes before the end of the accessible first page: in the mapping.
    let straddle = unsafe { two.ptr.cast::<u8>().add(pg - 8) };
    assert_eq!(
        n.ioctl_ptr(DRIVER_CMD_GET_INFO, straddle.cast()),
        Err(libc::EFAULT),
        "GET_INFO into a buffer that runs off its mapping"
    );
    // A well-formed argument whose own user pointer is bad (LIST_CLIENTS writes through it).
    let ctl = Node::open(&path, false);
    for buf in [16u64, none.ptr as u64] {
        let a = ListClientsArgs {
            buf,
            capacity: 4,
            entry_size: davinci_uapi::ClientUsage::SIZE as u32,
            ..Default::default()
        };
        assert_eq!(
            ctl.call(DRIVER_CMD_LIST_CLIENTS, &a).map(|_| ()),
            Err(libc::EFAULT),
            "LIST_CLIENTS into {buf:#x}"
        );
    }
    // Unknown commands and oversized arguments.
    assert_eq!(
        n.ioctl_ptr(0xc008_64ff, std::ptr::null_mut()),
        Err(libc::ENOTTY),
        "unknown command number"
    );
    assert_eq!(
        n.ioctl_ptr(
            0xc000_0000 | (0x3fff << 16) | (u32::from(b'd') << 8) | 1,
            none.ptr
        ),
        Err(libc::ENOTTY),
        "a known number with a 16 KiB argument size"
    );

    // Nothing was lost: both opens still work, and nothing was created.
    let info = n.info();
    assert_eq!(info.abi_major, ABI_VERSION_MAJOR);
    let ctx = n.create_context();
    assert_ne!(ctx, 0);
    let me = Control::open(&path)
        .expect("control open")
        .clients()
        .expect("LIST_CLIENTS")
        .into_iter()
        .find(|c| c.pid == std::process::id() && c.contexts > 0)
        .expect("this process's client is listed");
    assert_eq!(
        me.contexts, 1,
        "only the good CREATE_CONTEXT made a context"
    );
}

#[test]
#[ignore = "needs the kernel module: runs in the QEMU guest (scripts/kmod-test.sh)"]
fn a_create_whose_reply_cannot_be_copied_out_creates_nothing() {
    let path = node_path();
    let n = Node::open(&path, true);
    let ctx = n.create_context();
    let pg = page();
    let ro = anon(pg, libc::PROT_READ | libc::PROT_WRITE);
    let stage = |bytes: &[u8]| {
        // SAFETY: the page is ours and writable until it is made read-only below.
        unsafe {
            libc::mprotect(ro.ptr, pg, libc::PROT_READ | libc::PROT_WRITE);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), ro.ptr.cast::<u8>(), bytes.len());
            assert_eq!(libc::mprotect(ro.ptr, pg, libc::PROT_READ), 0);
        }
    };
    let enc = |w: &dyn Fn(&mut [u8]), size: usize| {
        let mut b = vec![0u8; size];
        w(&mut b);
        b
    };
    let cases: [(&str, u32, Vec<u8>); 4] = [
        (
            "CREATE_CONTEXT",
            DRIVER_CMD_CREATE_CONTEXT,
            enc(
                &|b| CreateContextArgs::default().encode(b),
                CreateContextArgs::SIZE,
            ),
        ),
        (
            "CREATE_STREAM",
            DRIVER_CMD_CREATE_STREAM,
            enc(
                &|b| {
                    CreateStreamArgs {
                        ctx,
                        cmd_entries: 64,
                        event_entries: 64,
                        ..Default::default()
                    }
                    .encode(b)
                },
                CreateStreamArgs::SIZE,
            ),
        ),
        (
            "CREATE_EVENT",
            DRIVER_CMD_CREATE_EVENT,
            enc(
                &|b| {
                    CreateEventArgs {
                        ctx,
                        ..Default::default()
                    }
                    .encode(b)
                },
                CreateEventArgs::SIZE,
            ),
        ),
        (
            "ALLOC_MEMORY",
            DRIVER_CMD_ALLOC_MEMORY,
            enc(
                &|b| {
                    AllocMemoryArgs {
                        size: 1 << 20,
                        ..Default::default()
                    }
                    .encode(b)
                },
                AllocMemoryArgs::SIZE,
            ),
        ),
    ];
    let ctl = Control::open(&path).expect("control open");
    let mine = || {
        ctl.clients()
            .expect("LIST_CLIENTS")
            .into_iter()
            .find(|c| c.pid == std::process::id() && c.contexts > 0)
            .expect("this process's client")
    };
    let before = mine();
    let pinned = pinned_bytes();
    for (what, request, bytes) in &cases {
        stage(bytes);
        // The argument is readable (the call runs) but not writable (the reply is lost).
        assert_eq!(
            n.ioctl_ptr(*request, ro.ptr),
            Err(libc::EFAULT),
            "{what} with a read-only argument"
        );
        let now = mine();
        assert_eq!(
            (
                now.contexts,
                now.streams,
                now.events,
                now.allocations,
                now.memory_bytes
            ),
            (
                before.contexts,
                before.streams,
                before.events,
                before.allocations,
                before.memory_bytes
            ),
            "{what}: what it created went again"
        );
        assert_eq!(pinned_bytes(), pinned, "{what}: no buffer left behind");
    }
}

/// An IMPORT_MEMORY whose reply cannot be copied out is dropped again (ABI 1.5; the 1.4
/// module kept it until the close): importing the token once more on the same open works,
/// where a kept import would answer EBUSY.
#[test]
#[ignore = "needs the kernel module: runs in the QEMU guest (scripts/kmod-test.sh)"]
fn an_import_whose_reply_cannot_be_copied_out_is_dropped() {
    let path = node_path();
    let _shared = Shared::new(&path);
    let exporter = Device::open(&path).expect("open the exporter");
    let buf = exporter.alloc(1 << 16).expect("alloc");
    let token = buf
        .export(davinci_shim::ExportTo::SameUser)
        .expect("EXPORT_MEMORY");
    let importer = Node::open(&path, true);
    let pg = page();
    let ro = anon(pg, libc::PROT_READ | libc::PROT_WRITE);
    let mut bytes = vec![0u8; ImportMemoryArgs::SIZE];
    ImportMemoryArgs {
        token: token.0,
        ..Default::default()
    }
    .encode(&mut bytes);
    // SAFETY: the page is ours and writable until it is made read-only here.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), ro.ptr.cast::<u8>(), bytes.len());
        assert_eq!(libc::mprotect(ro.ptr, pg, libc::PROT_READ), 0);
    }
    assert_eq!(
        importer.ioctl_ptr(DRIVER_CMD_IMPORT_MEMORY, ro.ptr),
        Err(libc::EFAULT),
        "IMPORT_MEMORY with a read-only argument"
    );
    let again = importer
        .call(
            DRIVER_CMD_IMPORT_MEMORY,
            &ImportMemoryArgs {
                token: token.0,
                ..Default::default()
            },
        )
        .expect("the lost import went again, so the token imports once more (not EBUSY)");
    assert_eq!(again.dev_addr, buf.dev_addr().0);
    importer
        .free(again.handle)
        .expect("FREE_MEMORY of the import");
}

/// The kernel's slab fault injection (failslab, debugfs), set up to fail every slab allocation
/// of the calling thread (`task-filter`, `make-it-fail`) during one call; torn down on drop.
/// The two switches are written through descriptors opened beforehand, since opening a file
/// allocates.
struct FailSlab {
    times: File,
    me: File,
}

impl FailSlab {
    fn set(name: &str, value: &str) {
        let p = format!("/sys/kernel/debug/failslab/{name}");
        std::fs::write(&p, value).unwrap_or_else(|e| panic!("write {value:?} to {p}: {e}"));
    }

    fn new() -> FailSlab {
        for (k, v) in [
            ("verbose", "0"),
            ("task-filter", "1"),
            ("ignore-gfp-wait", "N"),
            ("interval", "1"),
            ("space", "0"),
            ("times", "0"),
            ("probability", "100"),
        ] {
            FailSlab::set(k, v);
        }
        let open = |p: &str| {
            OpenOptions::new()
                .write(true)
                .open(p)
                .unwrap_or_else(|e| panic!("open {p}: {e}"))
        };
        FailSlab {
            times: open("/sys/kernel/debug/failslab/times"),
            me: open("/proc/thread-self/make-it-fail"),
        }
    }

    /// Writes `v` to a switch (both are non-seekable: each write is read whole).
    fn write(mut f: &File, v: &str) -> std::io::Result<()> {
        use std::io::Write;
        f.write_all(v.as_bytes())
    }

    /// `f` with every slab allocation of this thread failing.
    fn during<R>(&self, f: impl FnOnce() -> R) -> R {
        let switch = |f: &File, v: &str| FailSlab::write(f, v).expect("a fault-injection switch");
        switch(&self.me, "1");
        switch(&self.times, "-1");
        let r = f();
        switch(&self.times, "0");
        switch(&self.me, "0");
        r
    }
}

impl Drop for FailSlab {
    fn drop(&mut self) {
        // No panic here (a failing test is already unwinding): best effort.
        let _ = FailSlab::write(&self.times, "0");
        let _ = FailSlab::write(&self.me, "0");
        let _ = std::fs::write("/sys/kernel/debug/failslab/probability", "0");
    }
}

#[test]
#[ignore = "needs the kernel module: runs in the QEMU guest (scripts/kmod-test.sh)"]
fn an_allocation_failing_inside_an_ioctl_is_enomem_and_leaves_nothing() {
    let path = node_path();
    let n = Node::open(&path, true);
    let ctx = n.create_context();
    let ctl = Control::open(&path).expect("control open");
    let mine = || {
        ctl.clients()
            .expect("LIST_CLIENTS")
            .into_iter()
            .find(|c| c.pid == std::process::id() && c.contexts > 0)
            .expect("this process's client")
    };
    let before = mine();
    let pinned = pinned_bytes();
    let fail = FailSlab::new();

    let alloc = AllocMemoryArgs {
        size: 1 << 20,
        ..Default::default()
    };
    let stream = CreateStreamArgs {
        ctx,
        cmd_entries: 64,
        event_entries: 64,
        ..Default::default()
    };
    // The arguments are built first: nothing but the ioctl runs while allocations fail (a
    // user-space allocation could need the kernel's).
    let mut alloc_arg = vec![0u8; AllocMemoryArgs::SIZE];
    alloc.encode(&mut alloc_arg);
    let mut stream_arg = vec![0u8; CreateStreamArgs::SIZE];
    stream.encode(&mut stream_arg);
    let r = fail.during(|| n.ioctl_ptr(DRIVER_CMD_ALLOC_MEMORY, alloc_arg.as_mut_ptr().cast()));
    assert_eq!(r, Err(libc::ENOMEM), "ALLOC_MEMORY with its buffer failing");
    let r = fail.during(|| n.ioctl_ptr(DRIVER_CMD_CREATE_STREAM, stream_arg.as_mut_ptr().cast()));
    assert_eq!(r, Err(libc::ENOMEM), "CREATE_STREAM with its ring failing");
    drop(fail);

    let now = mine();
    assert_eq!(
        (now.streams, now.allocations, now.memory_bytes),
        (before.streams, before.allocations, before.memory_bytes),
        "the failed calls created nothing"
    );
    assert_eq!(pinned_bytes(), pinned, "no buffer left behind");
    // And the same calls work now.
    n.call(DRIVER_CMD_ALLOC_MEMORY, &alloc)
        .expect("ALLOC_MEMORY");
    n.call(DRIVER_CMD_CREATE_STREAM, &stream)
        .expect("CREATE_STREAM");
}
