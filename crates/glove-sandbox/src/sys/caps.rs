//! Capabilities: empty the bounding and ambient sets and the process's own
//! sets before `execve`, so the agent starts with none.

use super::{check, check_int, Errno, SysResult};

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Drops every capability from the bounding set and clears the ambient set
/// (needs `CAP_SETPCAP`, so it runs before any uid change).
pub(crate) fn drop_bounding() -> SysResult<()> {
    for cap in 0..64 {
        // SAFETY: prctl with integer arguments has no memory effects.
        match check_int(unsafe {
            libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0)
        }) {
            Ok(_) => {}
            Err(Errno(libc::EINVAL)) => break,
            Err(e) => return Err(e),
        }
    }
    // SAFETY: as above.
    check_int(unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    })?;
    Ok(())
}

/// Sets the effective, permitted and inheritable sets to empty.
pub(crate) fn clear_sets() -> SysResult<()> {
    let hdr = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData::default(); 2];
    // SAFETY: `hdr` and the two-element `data` array have the layout capset
    // expects for version 3 and outlive the call.
    check(unsafe { libc::syscall(libc::SYS_capset, &hdr as *const CapHeader, data.as_ptr()) })?;
    Ok(())
}

/// `prctl(PR_SET_NO_NEW_PRIVS, 1)`.
pub(crate) fn set_no_new_privs() -> SysResult<()> {
    // SAFETY: prctl with integer arguments has no memory effects.
    check_int(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) })?;
    Ok(())
}
