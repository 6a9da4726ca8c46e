//! What the kernel module does for `open`, `ioctl` and `mmap` of `/dev/davinciN`, done over
//! a `davinci-mockd` connection: which paths are devices, where their sockets are, the
//! ioctl argument copies (in for `_IOC_WRITE`, back for `_IOC_READ`, LIST_CLIENTS' entries
//! to the caller's `buf`), and the MMAP round trip. No raw pointer is touched here: the
//! program's memory is reached through [`sys::read_user`]/[`sys::write_user`].

use std::ffi::{CString, OsStr};
use std::os::fd::{AsRawFd, IntoRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::Arc;

use davinci_mockd_proto::{Kind, MmapArgs, MmapReply, WireRole};
use davinci_uapi::ioctl::{ioc_dir, ioc_size, IOC_READ, IOC_WRITE};
use davinci_uapi::{
    command_by_request, HandleArgs, ListClientsArgs, WaitEventArgs, Wire, DRIVER_CMD_LIST_CLIENTS,
    DRIVER_CMD_WAIT_EVENT,
};

use crate::conn::Conn;
use crate::{sys, table, Failure, SOCKET_DIR_ENV};

/// The largest argument the module accepts (its `MAX_ARG`): a larger size is `ENOTTY`.
const MAX_ARG: usize = 256;

/// `N` if `path` is exactly `/dev/davinciN` (N decimal, no sign, no leading zeros beyond
/// `0` itself, at most 10 digits): the paths the library serves. Anything else (including
/// `/dev/davinci_manager`, relative paths and `/dev//davinci0`) is passed through.
pub fn device_number(path: &[u8]) -> Option<u32> {
    let digits = path.strip_prefix(b"/dev/davinci")?;
    if digits.is_empty() || digits.len() > 10 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if digits.len() > 1 && digits[0] == b'0' {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// The socket directory: `$DAVINCI_PRELOAD_SOCKET_DIR` when set and not empty, else the
/// daemon's default (`$DAVINCI_SOCKET_DIR`, `/run/davinci` for root,
/// `$XDG_RUNTIME_DIR/davinci`, `/tmp/davinci-$UID`).
pub fn socket_dir_from(env: Option<&OsStr>) -> PathBuf {
    match env.filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => davinci_mockd_proto::default_socket_dir(),
    }
}

/// The socket of device `n` in this process's socket directory.
pub fn socket_path(n: u32) -> PathBuf {
    socket_dir_from(std::env::var_os(SOCKET_DIR_ENV).as_deref())
        .join(davinci_mockd_proto::socket_name(n))
}

/// The role of an open with these `open(2)` flags: writable is a client, `O_RDONLY` is a
/// control open (as the module decides by `FMODE_WRITE`).
pub fn role_of(flags: i32) -> WireRole {
    if flags & libc::O_ACCMODE == libc::O_RDONLY {
        WireRole::Control
    } else {
        WireRole::Client
    }
}

/// Opens device `n`: connects to its socket, says HELLO, and gives the program a descriptor
/// of its own for the open (an empty memfd named `davinciN`, close-on-exec if `flags` has
/// `O_CLOEXEC`), recorded in the table.
///
/// # Errors
/// The connection's errno ([`Conn::open`]); `EMFILE` when [`table::MAX_OPENS`] davinci
/// descriptors are open already, or the memfd cannot be made.
pub fn open_device(n: u32, flags: i32) -> Result<RawFd, Failure> {
    let path = socket_path(n);
    let conn = Conn::open(&path, role_of(flags))?;
    let name = CString::new(format!("davinci{n}")).unwrap_or_default();
    let mut mflags = nix::sys::memfd::MFdFlags::empty();
    if flags & libc::O_CLOEXEC != 0 {
        mflags |= nix::sys::memfd::MFdFlags::MFD_CLOEXEC;
    }
    let fd: OwnedFd = nix::sys::memfd::memfd_create(name.as_c_str(), mflags).map_err(|e| {
        Failure::new(
            e as i32,
            format!("/dev/davinci{n}: cannot make the descriptor: {e}"),
        )
    })?;
    let Some(id) = sys::file_id(fd.as_raw_fd()) else {
        return Err(Failure::new(
            libc::EMFILE,
            "cannot fstat a new memfd".into(),
        ));
    };
    if let Err(conn) = table::insert(fd.as_raw_fd(), id, Arc::new(conn)) {
        // The memfd closes (through the library, passed on) and the open ends.
        drop((fd, conn));
        return Err(Failure::new(
            libc::EMFILE,
            format!(
                "/dev/davinci{n}: more than {} davinci descriptors open in this process",
                table::MAX_OPENS
            ),
        ));
    }
    let raw = fd.into_raw_fd();
    Ok(raw)
}

/// `ioctl(fd, request, arg)` on an open: 0, or the errno. The argument is copied in
/// (`_IOC_WRITE`) and back (`_IOC_READ`; on failure for WAIT_EVENT only, which reports
/// `current`/`status`), as the module does: a create whose reply cannot be copied back is
/// undone ([`undo_create`]), and a WAIT_EVENT interrupted by a signal looks once more
/// ([`interrupted_wait`]).
///
/// # Errors
/// `ENOTTY` for a request that is not a davinci command; `EFAULT` for an unreadable or
/// unwritable argument; the daemon's errno; the connection's ([`Conn::call`]).
pub fn ioctl(conn: &Conn, request: u32, arg: usize) -> Result<(), Failure> {
    let size = ioc_size(request);
    // Unknown commands are ENOTTY before the argument is touched, as in the module.
    if command_by_request(request).is_none() || size > MAX_ARG {
        return Err(Failure::new(
            libc::ENOTTY,
            format!("ioctl {request:#x} is not a davinci command"),
        ));
    }
    let dir = ioc_dir(request);
    let mut buf = vec![0u8; size];
    if dir & IOC_WRITE != 0 && sys::read_user(arg, &mut buf).is_err() {
        return Err(Failure::new(
            libc::EFAULT,
            "bad ioctl argument pointer".into(),
        ));
    }
    // A WAIT_EVENT's argument is kept for the look after a signal (`interrupted_wait`).
    let asked = (request == DRIVER_CMD_WAIT_EVENT).then(|| buf.clone());
    let got = match (conn.call(Kind::Ioctl, request, buf), asked) {
        (Err(f), Some(asked)) if f.errno == libc::EINTR => {
            return interrupted_wait(conn, arg, &asked, f);
        }
        (got, _) => got?,
    };
    let r = got.reply;
    let arg_ok = r.arg.len() == size;
    if r.errno != 0 {
        if request == DRIVER_CMD_WAIT_EVENT
            && arg_ok
            && dir & IOC_READ != 0
            && sys::write_user(arg, &r.arg).is_err()
        {
            return Err(Failure::new(
                libc::EFAULT,
                "bad ioctl argument pointer".into(),
            ));
        }
        return Err(Failure::new(r.errno, r.msg));
    }
    if !arg_ok {
        return Err(Failure::new(
            libc::EPROTO,
            format!(
                "{}: the daemon replied with an argument of {} bytes, not {size}",
                conn.path().display(),
                r.arg.len()
            ),
        ));
    }
    if BUFFERED.contains(&request) && !r.payload.is_empty() {
        // The entries the daemon would have written at `buf + k` are payload byte `k`. Every
        // command with a buffer begins as LIST_CLIENTS' argument does (`buf`, `capacity`,
        // `count`, `entry_size`).
        let a = ListClientsArgs::from_bytes(r.arg.get(..ListClientsArgs::SIZE).unwrap_or(&[]))
            .ok_or_else(|| Failure::new(libc::EPROTO, "malformed reply with entries".into()))?;
        let room = u64::from(a.capacity).saturating_mul(u64::from(a.entry_size));
        if r.payload.len() as u64 > room {
            return Err(Failure::new(
                libc::EPROTO,
                "reply with more entries than the caller's buffer holds".into(),
            ));
        }
        let to = usize::try_from(a.buf).map_err(|_| Failure::new(libc::EFAULT, String::new()))?;
        if sys::write_user(to, &r.payload).is_err() {
            return Err(Failure::new(libc::EFAULT, "bad entries buffer".into()));
        }
    }
    if dir & IOC_READ != 0 && sys::write_user(arg, &r.arg).is_err() {
        // The caller cannot learn the handle: what was created goes again, so a failed call
        // creates nothing (docs/abi.md 1.4), as the module's `undo_create` does.
        let undone = undo_create(conn, request, &r.arg);
        return Err(Failure::new(
            libc::EFAULT,
            format!("bad ioctl argument pointer (the reply could not be written back{undone})"),
        ));
    }
    Ok(())
}

/// The commands whose entries the daemon sends as payload, for the caller's `buf`.
const BUFFERED: [u32; 4] = [
    DRIVER_CMD_LIST_CLIENTS,
    davinci_uapi::DRIVER_CMD_LIST_KERNELS,
    davinci_uapi::DRIVER_CMD_TRACE,
    davinci_uapi::DRIVER_CMD_READ_EVENTS,
];

/// Destroys what `request` created, given its reply: the caller could not be told the
/// handle. Returns what to add to the `EFAULT` message (empty when nothing was created).
fn undo_create(conn: &Conn, request: u32, reply: &[u8]) -> String {
    let Some((undo, handle)) = davinci_uapi::undo_of(request, reply) else {
        return String::new();
    };
    let mut arg = vec![0u8; HandleArgs::SIZE];
    HandleArgs { handle, pad: 0 }.encode(&mut arg);
    match conn.call(Kind::Ioctl, undo, arg) {
        Ok(got) if got.reply.errno == 0 => "; what it created was destroyed again".into(),
        Ok(got) => format!(
            "; what it created could not be destroyed again: {}",
            got.reply.msg
        ),
        Err(f) => format!("; what it created could not be destroyed again: {}", f.msg),
    }
}

/// A WAIT_EVENT (argument `asked`, at the caller's `arg`) that a signal handler interrupted
/// (`eintr`): one more look, as the module's, with a timeout of 0: reached now, it succeeds;
/// otherwise `current` and `status` are copied out as they are now and the call fails with
/// `EINTR`, or with the look's own errno (`EIO`; `ECANCELED` for a stream or event destroyed
/// meanwhile, as the module says).
fn interrupted_wait(conn: &Conn, arg: usize, asked: &[u8], eintr: Failure) -> Result<(), Failure> {
    let Some(mut w) = WaitEventArgs::from_bytes(asked) else {
        return Err(eintr);
    };
    w.timeout_ns = 0;
    let mut poll = vec![0u8; WaitEventArgs::SIZE];
    w.encode(&mut poll);
    let Ok(got) = conn.call(Kind::Ioctl, DRIVER_CMD_WAIT_EVENT, poll) else {
        return Err(eintr);
    };
    let r = got.reply;
    if r.arg.len() != WaitEventArgs::SIZE {
        return Err(eintr);
    }
    if sys::write_user(arg, &r.arg).is_err() {
        return Err(Failure::new(
            libc::EFAULT,
            "bad ioctl argument pointer".into(),
        ));
    }
    match r.errno {
        0 => Ok(()),
        libc::EAGAIN | libc::ETIMEDOUT => Err(eintr),
        libc::ENOENT => Err(Failure::new(
            libc::ECANCELED,
            "the stream or event was destroyed while waiting".into(),
        )),
        e => Err(Failure::new(e, r.msg)),
    }
}

/// The memfd and the offset in it of the object at mmap offset `cookie`, `len` bytes (page
/// rounded by the caller): the MMAP round trip.
///
/// # Errors
/// The daemon's errno (`EINVAL`, `ENOENT`, `EACCES`...), `EPROTO` for a malformed reply, the
/// connection's.
pub fn resolve_mmap(conn: &Conn, cookie: u64, len: u64) -> Result<(OwnedFd, u64), Failure> {
    let got = conn.call(Kind::Mmap, 0, MmapArgs { cookie, len }.encode())?;
    if got.reply.errno != 0 {
        return Err(Failure::new(got.reply.errno, got.reply.msg));
    }
    let reply = MmapReply::decode(&got.reply.arg)
        .ok_or_else(|| Failure::new(libc::EPROTO, "malformed MMAP reply".into()))?;
    let mut fds = got.fds.into_iter();
    match (fds.next(), fds.next()) {
        (Some(fd), None) => Ok((fd, reply.offset)),
        _ => Err(Failure::new(
            libc::EPROTO,
            "MMAP reply must carry exactly one descriptor".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_dev_davinci_n_is_a_device() {
        assert_eq!(device_number(b"/dev/davinci0"), Some(0));
        assert_eq!(device_number(b"/dev/davinci7"), Some(7));
        assert_eq!(device_number(b"/dev/davinci4294967295"), Some(u32::MAX));
        for p in [
            &b"/dev/davinci"[..],
            b"/dev/davinci_manager",
            b"/dev/davinci01",
            b"/dev/davinci-1",
            b"/dev/davinci+1",
            b"/dev/davinci4294967296",
            b"/dev/davinci0/",
            b"/dev//davinci0",
            b"davinci0",
            b"/dev/null",
        ] {
            assert_eq!(device_number(p), None, "{}", String::from_utf8_lossy(p));
        }
    }

    #[test]
    fn socket_dir_and_role() {
        assert_eq!(
            socket_dir_from(Some(OsStr::new("/srv/d"))),
            PathBuf::from("/srv/d")
        );
        assert_eq!(
            socket_dir_from(Some(OsStr::new(""))),
            davinci_mockd_proto::default_socket_dir()
        );
        assert_eq!(role_of(libc::O_RDONLY | libc::O_CLOEXEC), WireRole::Control);
        assert_eq!(role_of(libc::O_RDWR), WireRole::Client);
        assert_eq!(role_of(libc::O_WRONLY), WireRole::Client);
    }
}
