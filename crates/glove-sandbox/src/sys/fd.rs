//! Descriptors: pipes, socketpairs with descriptor passing, closing, poll,
//! plain reads and writes.
//!
//! Callers pass only descriptors they own or borrow; functions returning
//! `OwnedFd` hand over fresh descriptors created with `O_CLOEXEC`.

use super::{check, check_int, Errno, SysResult};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// `pipe2(O_CLOEXEC)`: (read end, write end).
pub(crate) fn pipe() -> SysResult<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid two-element array for the kernel to fill.
    check_int(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: on success both entries are fresh descriptors we now own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// `socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC)`.
pub(crate) fn socketpair() -> SysResult<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid two-element array for the kernel to fill.
    check_int(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    // SAFETY: on success both entries are fresh descriptors we now own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// `read(2)` once; retries on `EINTR`.
pub(crate) fn read(fd: BorrowedFd<'_>, buf: &mut [u8]) -> SysResult<usize> {
    loop {
        // SAFETY: `buf` is valid for `buf.len()` writable bytes.
        let r = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        match check(r as libc::c_long) {
            Err(Errno(libc::EINTR)) => continue,
            other => return other.map(|n| n as usize),
        }
    }
}

/// Reads until `buf` is full or the other end is closed; returns how many
/// bytes were read (fewer than `buf.len()` only at end of file, or at an
/// error after some bytes; an error before any byte is returned).
pub(crate) fn read_full(fd: BorrowedFd<'_>, buf: &mut [u8]) -> SysResult<usize> {
    let mut got = 0;
    while got < buf.len() {
        match read(fd, &mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if got == 0 => return Err(e),
            Err(_) => break,
        }
    }
    Ok(got)
}

/// `write(2)` of the whole buffer; retries on `EINTR` and short writes.
pub(crate) fn write_all(fd: BorrowedFd<'_>, mut buf: &[u8]) -> SysResult<()> {
    while !buf.is_empty() {
        // SAFETY: `buf` is valid for `buf.len()` readable bytes.
        let r = unsafe { libc::write(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len()) };
        match check(r as libc::c_long) {
            Err(Errno(libc::EINTR)) => continue,
            Err(e) => return Err(e),
            Ok(0) => return Err(Errno(libc::EPIPE)),
            Ok(n) => buf = buf.get(n as usize..).unwrap_or_default(),
        }
    }
    Ok(())
}

/// Replaces the contents of the regular file open (for writing) at `fd`
/// with `bytes`: `ftruncate` to 0, write from offset 0, `fsync`.
pub(crate) fn replace_contents(fd: BorrowedFd<'_>, bytes: &[u8]) -> SysResult<()> {
    // SAFETY: plain system calls on a descriptor.
    check_int(unsafe { libc::ftruncate(fd.as_raw_fd(), 0) })?;
    // SAFETY: as above.
    check(unsafe { libc::lseek(fd.as_raw_fd(), 0, libc::SEEK_SET) } as libc::c_long)?;
    write_all(fd, bytes)?;
    // SAFETY: as above.
    check_int(unsafe { libc::fsync(fd.as_raw_fd()) })?;
    Ok(())
}

/// `dup2` then clear `FD_CLOEXEC` on the target (it must survive `execve`).
pub(crate) fn dup_to(fd: RawFd, target: RawFd) -> SysResult<()> {
    if fd == target {
        // SAFETY: fcntl on a descriptor number has no memory effects.
        let flags = check_int(unsafe { libc::fcntl(fd, libc::F_GETFD) })?;
        // SAFETY: as above.
        check_int(unsafe { libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) })?;
        return Ok(());
    }
    // SAFETY: dup2 only manipulates the descriptor table.
    check_int(unsafe { libc::dup2(fd, target) })?;
    Ok(())
}

/// Marks every descriptor from `first` upward close-on-exec
/// (`close_range(CLOSE_RANGE_CLOEXEC)`), so undeclared descriptors vanish at
/// `execve` while the exec-status pipe stays usable until then.
pub(crate) fn cloexec_from(first: u32) -> SysResult<()> {
    const CLOSE_RANGE_CLOEXEC: u32 = 1 << 2;
    // SAFETY: close_range with CLOEXEC only changes descriptor flags.
    check(unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, CLOSE_RANGE_CLOEXEC) })?;
    Ok(())
}

/// `fcntl(F_DUPFD_CLOEXEC)`: a close-on-exec copy of `fd` at the lowest
/// free number at or above `floor`.
pub(crate) fn dup_above(fd: RawFd, floor: RawFd) -> SysResult<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC only adds a descriptor table entry.
    let n = check_int(unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, floor) })?;
    // SAFETY: a fresh descriptor, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(n) })
}

/// Sets `O_NONBLOCK` on a descriptor.
pub(crate) fn set_nonblocking(fd: BorrowedFd<'_>) -> SysResult<()> {
    // SAFETY: fcntl flag manipulation has no memory effects.
    let fl = check_int(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    // SAFETY: as above.
    check_int(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK) })?;
    Ok(())
}

/// One entry for [`poll`].
pub(crate) struct PollEntry {
    pub(crate) fd: RawFd,
    pub(crate) events: i16,
    pub(crate) revents: i16,
}

/// `poll(2)` with a millisecond timeout; `EINTR` reads as "nothing ready".
pub(crate) fn poll(entries: &mut [PollEntry], timeout_ms: i32) -> SysResult<usize> {
    let mut fds: Vec<libc::pollfd> = entries
        .iter()
        .map(|e| libc::pollfd {
            fd: e.fd,
            events: e.events,
            revents: 0,
        })
        .collect();
    // SAFETY: `fds` is a valid array of `fds.len()` pollfd structures.
    let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    match check_int(r) {
        Err(Errno(libc::EINTR)) => Ok(0),
        Err(e) => Err(e),
        Ok(n) => {
            for (e, f) in entries.iter_mut().zip(fds.iter()) {
                e.revents = f.revents;
            }
            Ok(n as usize)
        }
    }
}

/// Sends descriptors with one tag byte of payload over a Unix socket.
pub(crate) fn send_fds(sock: BorrowedFd<'_>, tag: u8, fds: &[RawFd]) -> SysResult<()> {
    if fds.is_empty() {
        return write_all(sock, &[tag]);
    }
    let mut byte = [tag; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let payload = std::mem::size_of_val(fds);
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space = unsafe { libc::CMSG_SPACE(payload as u32) } as usize;
    // u64 elements: the buffer is read and written as `cmsghdr`, which
    // needs its alignment (a byte vector guarantees none).
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    // SAFETY: msghdr is plain data; zeroed is a valid initial state.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = space;
    // SAFETY: `msg` points at a control buffer of `space` bytes, enough for
    // one header carrying `fds.len()` descriptors.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null() {
            return Err(Errno(libc::EINVAL));
        }
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(payload as u32) as usize;
        std::ptr::copy_nonoverlapping(
            fds.as_ptr(),
            libc::CMSG_DATA(cmsg).cast::<RawFd>(),
            fds.len(),
        );
    }
    // SAFETY: `msg` and everything it points to stay alive for the call.
    check(unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) } as libc::c_long)?;
    Ok(())
}

/// Receives one byte and up to `N` descriptors sent with it by [`send_fds`].
pub(crate) fn recv_fds<const N: usize>(sock: BorrowedFd<'_>) -> SysResult<(u8, Vec<OwnedFd>)> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space = unsafe { libc::CMSG_SPACE((N * std::mem::size_of::<RawFd>()) as u32) } as usize;
    // u64 elements: the buffer is read and written as `cmsghdr`, which
    // needs its alignment (a byte vector guarantees none).
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    // SAFETY: msghdr is plain data; zeroed is a valid initial state.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = space;
    // SAFETY: `msg` describes valid buffers that outlive the call.
    let n = check(
        unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) }
            as libc::c_long,
    )?;
    if n == 0 {
        return Err(Errno(libc::EPIPE));
    }
    let mut out = Vec::new();
    // SAFETY: we walk the control headers the kernel wrote into `cbuf`,
    // reading only within each header's declared length.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                let len = ((*cmsg).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
                for i in 0..len / std::mem::size_of::<RawFd>() {
                    out.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok((byte[0], out))
}

/// One `recvmsg(2)` into `buf` on a stream socket, keeping any
/// descriptors that came with the bytes (at most 4 per call; more are
/// closed by the kernel as truncated). Retries on `EINTR`; 0 at the end.
/// Most descriptors [`recv_collecting`] takes from one message: the egress
/// channel and one mount per retained workspace.
const RECV_MAX_FDS: usize = 1 + crate::spec::MAX_RETAINED;

pub(crate) fn recv_collecting(
    sock: BorrowedFd<'_>,
    buf: &mut [u8],
    fds: &mut Vec<OwnedFd>,
) -> SysResult<usize> {
    loop {
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: CMSG_SPACE is a pure size computation.
        let space =
            unsafe { libc::CMSG_SPACE((RECV_MAX_FDS * std::mem::size_of::<RawFd>()) as u32) }
                as usize;
        // u64 elements: the buffer is read and written as `cmsghdr`, which
        // needs its alignment (a byte vector guarantees none).
        let mut cbuf = vec![0u64; space.div_ceil(8)];
        // SAFETY: msghdr is plain data; zeroed is a valid initial state.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = space;
        // SAFETY: `msg` describes valid buffers that outlive the call.
        let r = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        let n = match check(r as libc::c_long) {
            Ok(n) => n as usize,
            Err(Errno(libc::EINTR)) => continue,
            Err(e) => return Err(e),
        };
        // SAFETY: we walk the control headers the kernel wrote into `cbuf`,
        // reading only within each header's declared length.
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
            while !cmsg.is_null() {
                if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                    let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                    let len =
                        ((*cmsg).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
                    for i in 0..len / std::mem::size_of::<RawFd>() {
                        fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                    }
                }
                cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
            }
        }
        return Ok(n);
    }
}

/// A socket's `SO_TYPE` (`SOCK_STREAM`, `SOCK_SEQPACKET`, ...) and
/// `SO_DOMAIN`.
pub(crate) fn socket_kind(fd: BorrowedFd<'_>) -> SysResult<(i32, i32)> {
    let get = |opt: libc::c_int| -> SysResult<i32> {
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `v` and `len` are valid out parameters of the sizes given.
        check_int(unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        })?;
        Ok(v)
    };
    Ok((get(libc::SO_TYPE)?, get(libc::SO_DOMAIN)?))
}

/// One `write(2)`; returns how many bytes were written.
pub(crate) fn write_once(fd: BorrowedFd<'_>, buf: &[u8]) -> SysResult<usize> {
    // SAFETY: `buf` is valid for `buf.len()` readable bytes.
    let r = unsafe { libc::write(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len()) };
    check(r as libc::c_long).map(|n| n as usize)
}

/// Takes ownership of a descriptor inherited from the parent process
/// (`glove-launcher`'s socket).
///
/// # Safety
///
/// `fd` must be open, inherited for this purpose, and owned by nothing
/// else in this process (no other `OwnedFd`, `File` or raw use of it), and
/// this must be called at most once for it: the returned `OwnedFd` closes
/// it when dropped.
pub unsafe fn adopt_inherited_fd(fd: RawFd) -> OwnedFd {
    // SAFETY: the caller guarantees sole ownership of an open descriptor.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Closes every descriptor except those in `keep` (with `close_range` over
/// the gaps). Called by the sandbox init before it builds the sandbox, so
/// nothing the launcher inherited lingers inside.
pub(crate) fn close_all_except(keep: &mut [RawFd]) -> SysResult<()> {
    keep.sort_unstable();
    let mut next: u32 = 0;
    for &k in keep.iter() {
        let k = k as u32;
        if k > next {
            // SAFETY: closes descriptors no live `OwnedFd` of this process
            // refers to: the caller lists every descriptor it still owns.
            check(unsafe { libc::syscall(libc::SYS_close_range, next, k - 1, 0u32) })?;
        }
        next = k + 1;
    }
    // SAFETY: as above.
    check(unsafe { libc::syscall(libc::SYS_close_range, next, u32::MAX, 0u32) })?;
    Ok(())
}

/// Opens `/dev/null` on whichever of descriptors 0, 1 and 2 are closed, so
/// that later descriptors (pipes, the PTY) never take those numbers.
pub(crate) fn fill_standard_streams() -> SysResult<()> {
    for target in 0..3 {
        // SAFETY: F_GETFD on a number only queries the descriptor table.
        if unsafe { libc::fcntl(target, libc::F_GETFD) } >= 0 {
            continue;
        }
        // SAFETY: the path is a NUL-terminated literal; the result is
        // checked and, being the lowest free number, lands on `target`.
        let fd = check_int(unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) })?;
        if fd != target {
            return Err(Errno(libc::EBADF));
        }
    }
    Ok(())
}

/// A new open file description of what `fd` refers to (a terminal or a
/// pipe), opened for writing with `O_NONBLOCK`, so that the caller's own
/// descriptor (shared with its parent) keeps its flags.
pub(crate) fn reopen_write_nonblocking(fd: BorrowedFd<'_>) -> SysResult<OwnedFd> {
    let path = super::cstr(&format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
    // SAFETY: `path` is NUL-terminated and alive for the call; the result
    // is owned at once.
    let r = check_int(unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_WRONLY | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY,
        )
    })?;
    // SAFETY: a fresh descriptor from open.
    Ok(unsafe { OwnedFd::from_raw_fd(r) })
}

/// One `send(2)` that never blocks and never raises `SIGPIPE`.
pub(crate) fn send_nonblocking(fd: BorrowedFd<'_>, buf: &[u8]) -> SysResult<usize> {
    // SAFETY: `buf` is valid for `buf.len()` readable bytes.
    let r = unsafe {
        libc::send(
            fd.as_raw_fd(),
            buf.as_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    check(r as libc::c_long).map(|n| n as usize)
}

/// One write that never blocks on a descriptor whose open file description
/// is shared and blocking (a terminal this process cannot reopen):
/// `O_NONBLOCK` is set for the one call and the flags put back at once.
pub(crate) fn write_once_nonblocking_shared(fd: BorrowedFd<'_>, buf: &[u8]) -> SysResult<usize> {
    // SAFETY: fcntl flag manipulation has no memory effects.
    let fl = check_int(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    if fl & libc::O_NONBLOCK == 0 {
        // SAFETY: as above.
        check_int(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK) })?;
    }
    let r = write_once(fd, buf);
    if fl & libc::O_NONBLOCK == 0 {
        // SAFETY: as above.
        let _ = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl) };
    }
    r
}
