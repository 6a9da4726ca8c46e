//! Exports as file descriptors (issue 42, build 8; ABI 1.5, `DAVINCI_FEAT_EXPORT_FD`): an
//! export fd sent over `SCM_RIGHTS` imports in another process, by the fd alone; what is not
//! an export fd of this device is refused with what was wrong; the fd outlives nothing (the
//! exporter's free revokes imports made through it); no descriptor free is `EMFILE` and
//! leaks nothing.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use davinci_shim::{Device, DeviceMem, Errno, ExportTo, Features};
use davinci_uapi::{ImportMemoryArgs, Wire, DRIVER_CMD_IMPORT_MEMORY, IMPORT_FLAG_FD};
use nix::libc;

use super::{node_path, other_node_path, wait_child, Node, Shared};

/// What the child reports by its exit status (0: all well).
const CHILD_NO_FD: i32 = 201;
const CHILD_OPEN: i32 = 202;
const CHILD_TOKEN_CHANGED: i32 = 203;
const CHILD_MMAP: i32 = 204;
const CHILD_READ: i32 = 205;
const CHILD_IMPORT: i32 = 100;

/// Receives one descriptor over `sock` (`SCM_RIGHTS`) with system calls only (the child of
/// a fork in a threaded process): the fd, or -1.
///
/// # Safety
///
/// `sock` is an open socket of this process.
unsafe fn recv_fd(sock: libc::c_int) -> libc::c_int {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // Room for one SCM_RIGHTS message of one int, aligned.
    let mut cbuf = [0u64; 8];
    // SAFETY: an all-zero msghdr is valid (null pointers, zero lengths).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&cbuf);
    // SAFETY: every pointer in `msg` is to a live local of this frame, of the length given.
    if unsafe { libc::recvmsg(sock, &mut msg, 0) } <= 0 {
        return -1;
    }
    // SAFETY: `msg` was filled by recvmsg; the header macros read within `cbuf`.
    let c = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    // SAFETY: `c`, when not null, points at a control message header inside `cbuf`.
    if c.is_null() || unsafe { (*c).cmsg_type } != libc::SCM_RIGHTS {
        return -1;
    }
    // SAFETY: an SCM_RIGHTS message carries at least one int after its header.
    unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>()) }
}

/// Sends `fd` over `sock` (`SCM_RIGHTS`).
fn send_fd(sock: BorrowedFd<'_>, fd: BorrowedFd<'_>) {
    let byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_ptr() as *mut libc::c_void,
        iov_len: 1,
    };
    let mut cbuf = [0u64; 8];
    // SAFETY: an all-zero msghdr is valid (null pointers, zero lengths).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE only computes a size.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(4) } as usize;
    // SAFETY: `msg_control` points at `cbuf`, large enough for one int's message
    // (CMSG_SPACE(4) <= 64 bytes); the header and data are written inside it.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(4) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>(), fd.as_raw_fd());
    }
    // SAFETY: every pointer in `msg` is to a live local of this frame.
    let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, 0) };
    assert_eq!(
        n,
        1,
        "sendmsg SCM_RIGHTS: {}",
        std::io::Error::last_os_error()
    );
}

/// IMPORT_MEMORY through the fd `fd` on `n`: the reply, or the errno.
fn import_raw(n: &Node, fd: u64) -> Result<ImportMemoryArgs, i32> {
    n.call(
        DRIVER_CMD_IMPORT_MEMORY,
        &ImportMemoryArgs {
            token: fd,
            flags: IMPORT_FLAG_FD,
            ..Default::default()
        },
    )
}

#[test]
#[ignore = "needs the kernel module: runs in the QEMU guest (scripts/kmod-test.sh)"]
fn an_export_fd_sent_over_scm_rights_imports_in_another_process() {
    let path = node_path();
    let _shared = Shared::new(&path);
    let dev = Device::open(&path).expect("open");
    assert!(
        dev.features().contains(Features::EXPORT_FD),
        "the module advertises export fds"
    );
    let buf = dev.alloc(1 << 16).expect("alloc");
    buf.write_slice(0, &[0x1234_5678u32; 4]).expect("write");
    let fd = buf
        .export_fd(ExportTo::SameUser)
        .expect("EXPORT_MEMORY as an fd");
    // SAFETY: F_GETFD on a descriptor this test owns.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) };
    assert_eq!(flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC, "close-on-exec");
    let (parent, child) = std::os::unix::net::UnixStream::pair().expect("socketpair");
    let cpath = std::ffi::CString::new(path.clone()).unwrap();
    // SAFETY: the child makes system calls only (recvmsg, open, ioctl, mmap, loads and
    // stores to its mapping, _exit) on memory allocated before the fork.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        // SAFETY: in the child: raw system calls on locals; `_exit` never returns.
        unsafe {
            let rfd = recv_fd(child.as_raw_fd());
            if rfd < 0 {
                libc::_exit(CHILD_NO_FD);
            }
            let dfd = libc::open(cpath.as_ptr(), libc::O_RDWR);
            if dfd < 0 {
                libc::_exit(CHILD_OPEN);
            }
            let mut a = [0u8; ImportMemoryArgs::SIZE];
            // The import's fields by offset (0x00 token, 0x0c flags; docs/abi.md): encoding
            // through `Wire` is the same bytes, but allocates nothing here either way.
            a[..8].copy_from_slice(&(rfd as u64).to_ne_bytes());
            a[12..16].copy_from_slice(&IMPORT_FLAG_FD.to_ne_bytes());
            if libc::ioctl(dfd, DRIVER_CMD_IMPORT_MEMORY as _, a.as_mut_ptr()) < 0 {
                libc::_exit(CHILD_IMPORT + *libc::__errno_location());
            }
            let mut token = [0u8; 8];
            token.copy_from_slice(&a[..8]);
            if u64::from_ne_bytes(token) != rfd as u64 {
                libc::_exit(CHILD_TOKEN_CHANGED);
            }
            let mut off = [0u8; 8];
            off.copy_from_slice(&a[0x20..0x28]);
            let p = libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                dfd,
                u64::from_ne_bytes(off) as libc::off_t,
            );
            if p == libc::MAP_FAILED {
                libc::_exit(CHILD_MMAP);
            }
            let w = p.cast::<u32>();
            if std::ptr::read_volatile(w) != 0x1234_5678 {
                libc::_exit(CHILD_READ);
            }
            std::ptr::write_volatile(w.add(1), 0xfeed_f00d);
            libc::_exit(0);
        }
    }
    drop(child);
    send_fd(parent.as_fd(), fd.as_fd());
    let status = wait_child(pid);
    assert!(libc::WIFEXITED(status), "status {status:#x}");
    let code = libc::WEXITSTATUS(status);
    assert_eq!(
        code,
        0,
        "the child (exit {code}: {})",
        match code {
            CHILD_NO_FD => "no fd received".to_string(),
            CHILD_OPEN => "open of the node failed".to_string(),
            CHILD_TOKEN_CHANGED => "the import's token field came back changed".to_string(),
            CHILD_MMAP => "mmap of the import failed".to_string(),
            CHILD_READ => "the import did not read the exporter's bytes".to_string(),
            c if c > CHILD_IMPORT =>
                format!("IMPORT_MEMORY failed with errno {}", c - CHILD_IMPORT),
            _ => "?".to_string(),
        }
    );
    assert_eq!(
        buf.read_vec::<u32>(0, 2).expect("read"),
        [0x1234_5678, 0xfeed_f00d],
        "the exporter sees the importer's store"
    );
}

#[test]
#[ignore = "needs the kernel module: runs in the QEMU guest (scripts/kmod-test.sh)"]
fn what_is_not_an_export_fd_of_this_device_is_refused_and_a_free_revokes() {
    let path = node_path();
    let _shared = Shared::new(&path);
    let dev = Device::open(&path).expect("open");
    let other = Device::open(&path).expect("another client");
    let n = Node::open(&path, true);
    let buf = dev.alloc(1 << 16).expect("alloc");
    buf.write_slice(0, &[7u32; 4]).expect("write");
    let fd = buf
        .export_fd(ExportTo::SameUser)
        .expect("EXPORT_MEMORY as an fd");
    // Exported by token as well, that is another export (ABI 1.5: several exports of one
    // allocation); the fd's export stays reachable through descriptors alone.
    buf.export(ExportTo::SameUser)
        .expect("a token export beside the fd's");
    // Each call makes a new descriptor of the same export.
    let fd2 = buf.export_fd(ExportTo::SameUser).expect("again");
    assert_ne!(fd.as_raw_fd(), fd2.as_raw_fd());
    drop(fd2);
    // Not an open descriptor; a descriptor of something else; an export fd of another
    // device.
    assert_eq!(import_raw(&n, 1 << 20).err(), Some(libc::EBADF));
    assert_eq!(import_raw(&n, u64::MAX).err(), Some(libc::EBADF));
    let null = std::fs::File::open("/dev/null").unwrap();
    let e = other.import_fd(null.as_fd()).unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EINVAL), "{e}");
    assert!(e.to_string().contains("not an export fd"), "{e}");
    let node_fd = std::fs::File::open(&path).unwrap();
    assert_eq!(
        other.import_fd(node_fd.as_fd()).unwrap_err().errno(),
        Some(Errno::EINVAL),
        "the device node itself is no export fd"
    );
    if let Ok(dev1) = Device::open(&other_node_path()) {
        let e = dev1.import_fd(fd.as_fd()).unwrap_err();
        assert_eq!(e.errno(), Some(Errno::ENOENT), "{e}");
        assert!(e.to_string().contains("another device"), "{e}");
    }
    // The grant holds through the fd, and an import outlives the fd it came through.
    let imp = other.import_fd(fd.as_fd()).expect("import through the fd");
    drop(fd);
    assert_eq!(imp.read_vec::<u32>(0, 1).expect("read"), [7]);
    assert!(!imp.is_revoked().expect("is_revoked"));
    // The exporter's free revokes it, as for a token.
    drop(buf);
    assert!(imp.is_revoked().expect("is_revoked after the free"));
}

#[test]
#[ignore = "needs the kernel module: runs in the QEMU guest (scripts/kmod-test.sh)"]
fn no_descriptor_free_is_emfile_and_the_same_call_later_makes_the_fd() {
    let path = node_path();
    let dev = Device::open(&path).expect("open");
    let buf = dev.alloc(4096).expect("alloc");
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: reads this process's limit into a local.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut old) }, 0);
    // The lowest free descriptor taken, and the soft limit just above it: none is free.
    let hold = std::fs::File::open("/dev/null").unwrap();
    let low = libc::rlimit {
        rlim_cur: hold.as_raw_fd() as libc::rlim_t + 1,
        rlim_max: old.rlim_max,
    };
    // SAFETY: sets this process's soft limit from a local (restored below).
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &low) }, 0);
    let r = buf.export_fd(ExportTo::SameUser);
    // SAFETY: restores the limit read above.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &old) }, 0);
    let e = r.unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EMFILE), "{e}");
    assert!(e.to_string().contains("the same call again"), "{e}");
    drop(hold);
    // The export was made; its fd comes with the next call, and works.
    let fd = buf.export_fd(ExportTo::SameUser).expect("the fd, now");
    let _shared = Shared::new(&path);
    let other = Device::open(&path).expect("another client");
    assert!(other.import_fd(fd.as_fd()).is_ok());
}
