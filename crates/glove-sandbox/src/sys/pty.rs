//! Pseudo-terminals: allocate from a devpts instance, make one the
//! controlling terminal, and get or set window sizes and modes.

use super::{check_int, cstr, SysResult};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// Opens `ptmx` (a path inside the sandbox's own devpts), unlocks it and
/// opens its slave: (master, slave).
pub(crate) fn open_pair(ptmx: &str, pts_dir: &str) -> SysResult<(OwnedFd, OwnedFd)> {
    let p = cstr(ptmx)?;
    // SAFETY: `p` is NUL-terminated; the descriptor is owned below.
    let m = check_int(unsafe {
        libc::open(p.as_ptr(), libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC)
    })?;
    // SAFETY: `m` is a fresh descriptor we own.
    let master = unsafe { OwnedFd::from_raw_fd(m) };
    let unlock: libc::c_int = 0;
    // SAFETY: TIOCSPTLCK reads one int from the valid pointer.
    check_int(unsafe { libc::ioctl(m, libc::TIOCSPTLCK, &unlock) })?;
    // The slave straight from the master (no path lookup in the devpts
    // that could meet another file); by its path only on kernels without
    // TIOCGPTPEER (before 4.13).
    let flags = libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC;
    // SAFETY: TIOCGPTPEER takes open flags as its integer argument and
    // returns a new descriptor, owned below.
    match check_int(unsafe { libc::ioctl(m, libc::TIOCGPTPEER, flags) }) {
        // SAFETY: a fresh descriptor we own.
        Ok(s) => return Ok((master, unsafe { OwnedFd::from_raw_fd(s) })),
        Err(e) if e.0 == libc::EINVAL || e.0 == libc::ENOTTY => {}
        Err(e) => return Err(e),
    }
    let mut n: libc::c_uint = 0;
    // SAFETY: TIOCGPTN writes one unsigned int to the valid pointer.
    check_int(unsafe { libc::ioctl(m, libc::TIOCGPTN, &mut n) })?;
    let sp = cstr(&format!("{pts_dir}/{n}"))?;
    // SAFETY: `sp` is NUL-terminated; the descriptor is owned below.
    let s = check_int(unsafe {
        libc::open(sp.as_ptr(), libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC)
    })?;
    // SAFETY: `s` is a fresh descriptor we own.
    Ok((master, unsafe { OwnedFd::from_raw_fd(s) }))
}

/// Gives the terminal `fd` to `uid`:`gid` with `mode` (ownership first, so
/// that the mode never applies to the previous owner).
pub(crate) fn give_to(
    fd: BorrowedFd<'_>,
    uid: libc::uid_t,
    gid: libc::gid_t,
    mode: libc::mode_t,
) -> SysResult<()> {
    // SAFETY: fchown and fchmod take a descriptor and integers only.
    check_int(unsafe { libc::fchown(fd.as_raw_fd(), uid, gid) })?;
    // SAFETY: as above.
    check_int(unsafe { libc::fchmod(fd.as_raw_fd(), mode) })?;
    Ok(())
}

/// Makes `fd` the controlling terminal of this (session-leader) process.
pub(crate) fn make_controlling(fd: BorrowedFd<'_>) -> SysResult<()> {
    // SAFETY: TIOCSCTTY takes an integer argument.
    check_int(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSCTTY, 0) })?;
    Ok(())
}

/// Sets the window size.
pub(crate) fn set_size(fd: BorrowedFd<'_>, rows: u16, cols: u16) -> SysResult<()> {
    let ws = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one winsize from the valid pointer.
    check_int(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSWINSZ, &ws) })?;
    Ok(())
}

/// Gets the window size, if `fd` is a terminal.
pub(crate) fn get_size(fd: BorrowedFd<'_>) -> Option<(u16, u16)> {
    // SAFETY: winsize is plain data; TIOCGWINSZ fills it.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes one winsize to the valid pointer.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) };
    (r == 0 && ws.ws_row > 0).then_some((ws.ws_row, ws.ws_col))
}

/// A terminal's saved mode.
pub struct SavedMode(libc::termios);

/// Puts a terminal into raw mode; returns the previous mode.
pub(crate) fn make_raw(fd: BorrowedFd<'_>) -> SysResult<SavedMode> {
    // SAFETY: termios is plain data filled by tcgetattr.
    let mut t: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: `t` is a valid out-parameter.
    check_int(unsafe { libc::tcgetattr(fd.as_raw_fd(), &mut t) })?;
    let saved = SavedMode(t);
    // SAFETY: cfmakeraw edits the valid `t` in place.
    unsafe { libc::cfmakeraw(&mut t) };
    // SAFETY: `t` is a valid termios.
    check_int(unsafe { libc::tcsetattr(fd.as_raw_fd(), libc::TCSANOW, &t) })?;
    Ok(saved)
}

/// Restores a mode saved by [`make_raw`].
pub(crate) fn restore_mode(fd: BorrowedFd<'_>, mode: &SavedMode) {
    // SAFETY: `mode.0` is a termios previously returned by tcgetattr.
    unsafe { libc::tcsetattr(fd.as_raw_fd(), libc::TCSANOW, &mode.0) };
}

/// Whether `fd` is a terminal.
pub(crate) fn is_tty(fd: BorrowedFd<'_>) -> bool {
    // SAFETY: isatty has no memory effects.
    unsafe { libc::isatty(fd.as_raw_fd()) == 1 }
}
