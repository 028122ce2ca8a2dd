//! The caller's terminal: size, raw mode, and whether a descriptor is one.

use crate::sys::pty;
use std::os::fd::BorrowedFd;

pub use crate::sys::pty::SavedMode;

/// Window size (rows, columns) of a terminal.
pub fn size(fd: BorrowedFd<'_>) -> Option<(u16, u16)> {
    pty::get_size(fd)
}

/// Whether `fd` is a terminal.
pub fn is_tty(fd: BorrowedFd<'_>) -> bool {
    pty::is_tty(fd)
}

/// Raw mode for interactive forwarding; restore with [`restore`].
pub fn make_raw(fd: BorrowedFd<'_>) -> Option<SavedMode> {
    pty::make_raw(fd).ok()
}

/// Restores a mode saved by [`make_raw`].
pub fn restore(fd: BorrowedFd<'_>, mode: &SavedMode) {
    pty::restore_mode(fd, mode)
}
