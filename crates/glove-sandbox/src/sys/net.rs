//! The sandbox's loopback interface and the egress forwarder's listeners.

use super::{check_int, Errno, SysResult};
use std::os::fd::{FromRawFd, OwnedFd};

/// Brings `lo` of the current network namespace up (`SIOCSIFFLAGS`), as
/// the sandbox init, which holds `CAP_NET_ADMIN` over the namespace it
/// made. Nothing else is configured: `lo` is the only interface there.
pub(crate) fn loopback_up() -> SysResult<()> {
    // SAFETY: a plain socket call; the result is checked.
    let s = check_int(unsafe {
        libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0)
    })?;
    // SAFETY: `s` is a fresh descriptor this function now owns.
    let s = unsafe { OwnedFd::from_raw_fd(s) };
    // SAFETY: ifreq is plain data; zeroed is a valid initial state.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, b) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *d = *b as libc::c_char;
    }
    use std::os::fd::AsRawFd;
    // SAFETY: `req` is a valid ifreq naming an interface; the kernel fills
    // its flags.
    check_int(unsafe { libc::ioctl(s.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) })?;
    // SAFETY: SIOCGIFFLAGS wrote the flags member of the union.
    let flags = unsafe { req.ifr_ifru.ifru_flags };
    req.ifr_ifru.ifru_flags = flags | (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    // SAFETY: as above; the kernel reads the flags.
    check_int(unsafe { libc::ioctl(s.as_raw_fd(), libc::SIOCSIFFLAGS, &req) })?;
    Ok(())
}

/// A listening TCP socket on the loopback address (`127.0.0.1`, or `::1`
/// with `v6`) at `port`, close-on-exec, with a backlog of 128.
pub(crate) fn listen_loopback(port: u16, v6: bool) -> SysResult<OwnedFd> {
    let domain = if v6 { libc::AF_INET6 } else { libc::AF_INET };
    // SAFETY: a plain socket call; the result is checked.
    let s = check_int(unsafe { libc::socket(domain, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `s` is a fresh descriptor this function now owns.
    let s = unsafe { OwnedFd::from_raw_fd(s) };
    use std::os::fd::AsRawFd;
    let fd = s.as_raw_fd();
    let one: libc::c_int = 1;
    let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `one` is a valid int option value of `len` bytes.
    check_int(unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            (&one as *const libc::c_int).cast(),
            len,
        )
    })?;
    let ret = if v6 {
        // SAFETY: as above.
        check_int(unsafe {
            libc::setsockopt(
                fd,
                libc::IPPROTO_IPV6,
                libc::IPV6_V6ONLY,
                (&one as *const libc::c_int).cast(),
                len,
            )
        })?;
        // SAFETY: sockaddr_in6 is plain data; zeroed is valid.
        let mut a: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
        a.sin6_family = libc::AF_INET6 as libc::sa_family_t;
        a.sin6_port = port.to_be();
        a.sin6_addr.s6_addr = std::net::Ipv6Addr::LOCALHOST.octets();
        // SAFETY: `a` is a valid sockaddr_in6 of the given length.
        unsafe {
            libc::bind(
                fd,
                (&a as *const libc::sockaddr_in6).cast(),
                std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
            )
        }
    } else {
        // SAFETY: sockaddr_in is plain data; zeroed is valid.
        let mut a: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        a.sin_family = libc::AF_INET as libc::sa_family_t;
        a.sin_port = port.to_be();
        a.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
        // SAFETY: `a` is a valid sockaddr_in of the given length.
        unsafe {
            libc::bind(
                fd,
                (&a as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        }
    };
    check_int(ret)?;
    // SAFETY: listen on our own bound socket.
    check_int(unsafe { libc::listen(fd, 128) })?;
    Ok(s)
}

/// `accept4` with close-on-exec; retries on `EINTR`.
pub(crate) fn accept(listener: std::os::fd::BorrowedFd<'_>) -> SysResult<OwnedFd> {
    use std::os::fd::AsRawFd;
    loop {
        // SAFETY: null address arguments are allowed; the result is checked.
        let r = unsafe {
            libc::accept4(
                listener.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_CLOEXEC,
            )
        };
        match check_int(r) {
            // SAFETY: a fresh descriptor this function now owns.
            Ok(fd) => return Ok(unsafe { OwnedFd::from_raw_fd(fd) }),
            Err(Errno(libc::EINTR)) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// A connected `SOCK_SEQPACKET` Unix socket pair, close-on-exec: the
/// egress channel (one message per passed connection).
pub(crate) fn seqpacket_pair() -> SysResult<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid two-element array for the kernel to fill.
    check_int(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    // SAFETY: on success both entries are fresh descriptors we now own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}
