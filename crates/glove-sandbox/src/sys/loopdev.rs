//! Loop devices for retained images: `LOOP_CTL_GET_FREE` and
//! `LOOP_CONFIGURE` with `LO_FLAGS_AUTOCLEAR`, so a device is detached by
//! the kernel as soon as its last user (a mount, or the descriptor held
//! here) lets go, and nothing is left attached after a crash.
//!
//! Callers hold the returned device descriptor for as long as they need
//! the number to stay theirs; [`in_use`] tells whether anything else (a
//! mount) still holds the device.

use super::{check_int, Errno, SysResult};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
const LOOP_GET_STATUS64: libc::c_ulong = 0x4C05;
const LO_FLAGS_READ_ONLY: u32 = 1;
const LO_FLAGS_AUTOCLEAR: u32 = 4;

/// `struct loop_info64` (linux/loop.h).
#[repr(C)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; 64],
    lo_crypt_name: [u8; 64],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

/// `struct loop_config` (linux/loop.h).
#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

fn own(fd: libc::c_int) -> OwnedFd {
    // SAFETY: a fresh descriptor returned by the kernel, owned by nothing
    // else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

fn open(path: &std::ffi::CStr, flags: libc::c_int) -> SysResult<OwnedFd> {
    // SAFETY: a NUL-terminated path alive for the call; the result is
    // owned at once.
    check_int(unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) }).map(own)
}

fn device_path(number: u32) -> std::ffi::CString {
    // A decimal number never holds a NUL.
    std::ffi::CString::new(format!("/dev/loop{number}")).unwrap_or_default()
}

/// Whether `/dev/loop-control` can be opened for writing.
pub(crate) fn control_available() -> SysResult<()> {
    open(c"/dev/loop-control", libc::O_RDWR).map(|_| ())
}

/// Attaches `backing` (a regular file opened read-write, or read-only when
/// `read_only`) to a free loop device with autoclear; returns the device's
/// descriptor and number. A device another process configured between the
/// lookup and the configuration (`EBUSY`) is skipped; after 16 such races
/// the error is returned.
pub(crate) fn attach(backing: BorrowedFd<'_>, read_only: bool) -> SysResult<(OwnedFd, u32)> {
    let control = open(c"/dev/loop-control", libc::O_RDWR)?;
    let mut last = Errno(libc::EBUSY);
    for _ in 0..16 {
        // SAFETY: LOOP_CTL_GET_FREE takes no argument and returns a number.
        let number =
            check_int(unsafe { libc::ioctl(control.as_raw_fd(), LOOP_CTL_GET_FREE as _, 0) })?
                as u32;
        let mode = if read_only {
            libc::O_RDONLY
        } else {
            libc::O_RDWR
        };
        let dev = match open(&device_path(number), mode) {
            Ok(d) => d,
            Err(e) => {
                last = e;
                continue;
            }
        };
        let mut flags = LO_FLAGS_AUTOCLEAR;
        if read_only {
            flags |= LO_FLAGS_READ_ONLY;
        }
        let config = LoopConfig {
            fd: backing.as_raw_fd() as u32,
            block_size: 0,
            info: LoopInfo64 {
                lo_device: 0,
                lo_inode: 0,
                lo_rdevice: 0,
                lo_offset: 0,
                lo_sizelimit: 0,
                lo_number: 0,
                lo_encrypt_type: 0,
                lo_encrypt_key_size: 0,
                lo_flags: flags,
                lo_file_name: [0; 64],
                lo_crypt_name: [0; 64],
                lo_encrypt_key: [0; 32],
                lo_init: [0; 2],
            },
            reserved: [0; 8],
        };
        // SAFETY: `config` is a correctly laid out `struct loop_config`
        // that lives across the call; the kernel only reads it.
        match check_int(unsafe {
            libc::ioctl(
                dev.as_raw_fd(),
                LOOP_CONFIGURE as _,
                &config as *const LoopConfig,
            )
        }) {
            Ok(_) => return Ok((dev, number)),
            Err(e @ Errno(libc::EBUSY)) => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

/// Whether something other than the caller's own descriptors (a mount, in
/// practice) holds loop device `number`: an exclusive open fails with
/// `EBUSY` while a file system is mounted from it.
pub(crate) fn in_use(number: u32) -> SysResult<bool> {
    match open(&device_path(number), libc::O_RDONLY | libc::O_EXCL) {
        Ok(_) => Ok(false),
        Err(Errno(libc::EBUSY)) => Ok(true),
        Err(e) => Err(e),
    }
}

/// The loop devices whose backing file is the file `(dev, ino)`: every
/// `loopN` of `/sys/block` is opened read-only and asked
/// (`LOOP_GET_STATUS64`); an unbound device (`ENXIO`) or one that vanished
/// is skipped.
pub(crate) fn backed_by(dev: u64, ino: u64) -> SysResult<Vec<u32>> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir("/sys/block")
        .map_err(|e| Errno(e.raw_os_error().unwrap_or(libc::EIO)))?;
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(n) = name
            .to_str()
            .and_then(|s| s.strip_prefix("loop"))
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let fd = match open(&device_path(n), libc::O_RDONLY) {
            Ok(fd) => fd,
            Err(_) => continue,
        };
        // SAFETY: an all-zero `loop_info64` is a valid value to be filled.
        let mut info: LoopInfo64 = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is a correctly laid out `struct loop_info64` that
        // lives across the call; the kernel writes into it.
        let r = unsafe {
            libc::ioctl(
                fd.as_raw_fd(),
                LOOP_GET_STATUS64 as _,
                &mut info as *mut LoopInfo64,
            )
        };
        if r == 0 && info.lo_device == dev && info.lo_inode == ino {
            out.push(n);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_match_the_kernel_headers() {
        assert_eq!(std::mem::size_of::<LoopInfo64>(), 232);
        assert_eq!(std::mem::size_of::<LoopConfig>(), 304);
    }
}
