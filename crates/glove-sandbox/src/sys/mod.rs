//! Every `unsafe` block and raw system call of Glove lives below this module,
//! one area per file. Each file states what its callers must uphold; every
//! block carries a `// SAFETY:` comment. Code above `sys` sees only safe
//! functions that take and return owned or borrowed descriptors and plain
//! values.
//!
//! Most of these functions are meant to run in a freshly cloned child of a
//! *single-threaded* process (see `crate::launch`): they do not allocate
//! unless documented, and report failure as an [`Errno`] value.
#![allow(unsafe_code)]

pub(crate) mod at;
pub(crate) mod caps;
pub(crate) mod fd;
pub(crate) mod loopdev;
pub(crate) mod mount;
pub(crate) mod net;
pub(crate) mod process;
pub(crate) mod pty;
pub(crate) mod resolve;
pub(crate) mod trace;

/// A raw `errno` value from a failed system call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(pub i32);

impl Errno {
    pub(crate) fn last() -> Self {
        // SAFETY: `__errno_location` returns this thread's errno slot, always valid.
        Errno(unsafe { *libc::__errno_location() })
    }
}

impl core::fmt::Display for Errno {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let s = std::io::Error::from_raw_os_error(self.0);
        write!(f, "{s}")
    }
}

pub(crate) type SysResult<T> = Result<T, Errno>;

/// Turns a `-1`-on-error return into a result.
pub(crate) fn check(ret: libc::c_long) -> SysResult<libc::c_long> {
    if ret < 0 {
        Err(Errno::last())
    } else {
        Ok(ret)
    }
}

/// Turns an `int`-returning call into a result.
pub(crate) fn check_int(ret: libc::c_int) -> SysResult<libc::c_int> {
    if ret < 0 {
        Err(Errno::last())
    } else {
        Ok(ret)
    }
}

/// A NUL-terminated copy of a path or string (allocates; call before cloning
/// where possible).
pub(crate) fn cstr(s: &str) -> SysResult<std::ffi::CString> {
    std::ffi::CString::new(s).map_err(|_| Errno(libc::EINVAL))
}
