//! The launch-time resolver of a discovery template: which file runs.
//!
//! The template's `executable_search_paths` are tried in order (never the
//! inherited `PATH`). Each directory, and every ancestor, must be owned by
//! root or the service user and writable by nobody else; so must every
//! directory above the file the executable name leads to, and that file
//! itself. A missing directory or name moves on to the next directory; an
//! unsafe one fails the launch (an attacker-writable early directory must
//! not be skipped silently). An owner that is the overflow uid (an
//! unmapped owner seen from a user namespace) is refused, never taken for
//! root.
//!
//! The directories are walked from `/` one component at a time, each
//! opened without following links relative to the one before, and checked
//! through that descriptor; the selected file is opened the same way and
//! its identity (device, inode, change time) taken from the descriptor.
//! The sandbox then binds *that* inode over the path after checking the
//! identity again (`LaunchSpec::executable_pin`), so a swap after this
//! check fails the launch instead of changing what runs.

use glove_types::codes::control::{
    SESSION_EXECUTABLE_NOT_FOUND, SESSION_EXECUTABLE_UNSAFE, SESSION_SEARCH_PATH_UNSAFE,
};
use glove_types::policy::NativeRuntime;
use glove_types::{ErrorCode, Rejection};
use rustix::fs::{FileType, Mode, OFlags};
use std::os::fd::{AsFd, OwnedFd};

/// Most symbolic links followed from a search directory to the file.
const MAX_LINK_HOPS: usize = 16;

/// The file a discovery template runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// The canonical path of the file (also its path inside the sandbox).
    pub path: String,
    /// Its identity (`glove_sandbox::identity::file_identity`).
    pub identity: String,
}

fn overflow_uid() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/overflowuid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(65534)
}

fn refuse(code: ErrorCode, msg: String) -> Rejection {
    Rejection::new(code, msg).at("launch.executable_search_paths")
}

/// Why a directory or file with this owner and mode is not trusted.
fn untrusted(uid: u32, mode: u32, me: u32, overflow: u32) -> Option<String> {
    if uid == overflow && uid != me {
        return Some(format!(
            "is owned by the overflow uid {uid} (an owner unmapped in this user namespace)"
        ));
    }
    if uid != 0 && uid != me {
        return Some(format!(
            "is owned by uid {uid}, neither root nor the service user"
        ));
    }
    if mode & 0o020 != 0 {
        return Some("is group-writable".into());
    }
    if mode & 0o002 != 0 {
        return Some("is writable by others".into());
    }
    None
}

/// Opens the absolute canonical directory `dir` one component at a time
/// without following links, checking each level (`/` included). `Ok(None)`
/// when a component is missing.
fn walk_dir(dir: &str, code: ErrorCode) -> Result<Option<OwnedFd>, Rejection> {
    let me = rustix::process::geteuid().as_raw();
    let overflow = overflow_uid();
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let io = |p: &str, e: rustix::io::Errno| refuse(code, format!("{p}: {e}"));
    let mut cur = rustix::fs::open("/", flags, Mode::empty()).map_err(|e| io("/", e))?;
    let mut here = String::new();
    let check = |fd: &OwnedFd, p: &str| -> Result<(), Rejection> {
        let st = rustix::fs::fstat(fd).map_err(|e| io(p, e))?;
        match untrusted(st.st_uid, st.st_mode, me, overflow) {
            Some(why) => Err(refuse(code, format!("{p} {why}"))),
            None => Ok(()),
        }
    };
    check(&cur, "/")?;
    for comp in dir.split('/').filter(|c| !c.is_empty()) {
        if comp == "." || comp == ".." {
            return Err(refuse(code, format!("{dir} is not canonical")));
        }
        here.push('/');
        here.push_str(comp);
        cur = match rustix::fs::openat(cur.as_fd(), comp, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(rustix::io::Errno::NOTDIR) | Err(rustix::io::Errno::LOOP) => {
                return Err(refuse(
                    code,
                    format!("{here} is a symbolic link or not a directory"),
                ))
            }
            Err(e) => return Err(io(&here, e)),
        };
        check(&cur, &here)?;
    }
    Ok(Some(cur))
}

fn split(p: &str) -> (&str, &str) {
    match p.rsplit_once('/') {
        Some(("", n)) => ("/", n),
        Some((d, n)) => (d, n),
        None => ("/", p),
    }
}

/// Follows `name` in `dir` through symbolic links (bounded) to a canonical
/// path, purely lexically from the link texts read through descriptors.
fn canonical_target(dir: &str, name: &str) -> Result<Option<String>, Rejection> {
    let code = SESSION_EXECUTABLE_UNSAFE;
    let mut path = format!("{}/{name}", dir.trim_end_matches('/'));
    for _ in 0..MAX_LINK_HOPS {
        let (d, n) = split(&path);
        let Some(dfd) = walk_dir(d, code)? else {
            return Ok(None);
        };
        match rustix::fs::readlinkat(dfd.as_fd(), n, Vec::new()) {
            Ok(target) => {
                let t = target.to_string_lossy().into_owned();
                let joined = if t.starts_with('/') {
                    t
                } else {
                    format!("{}/{t}", d.trim_end_matches('/'))
                };
                path = normalize(&joined)
                    .ok_or_else(|| refuse(code, format!("{joined} leaves the root")))?;
            }
            Err(rustix::io::Errno::INVAL) => return Ok(Some(path)),
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(e) => return Err(refuse(code, format!("{path}: {e}"))),
        }
    }
    Err(refuse(
        code,
        format!("more than {MAX_LINK_HOPS} symbolic links from {dir}/{name}"),
    ))
}

/// `.` and `..` removed lexically (a `..` above `/` is refused). Every
/// directory on the result is walked again without following links, so a
/// lexical `..` over a link cannot lead anywhere unchecked.
fn normalize(p: &str) -> Option<String> {
    let mut out: Vec<&str> = Vec::new();
    for c in p.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                out.pop()?;
            }
            c => out.push(c),
        }
    }
    Some(format!("/{}", out.join("/")))
}

/// Resolves `runtime`'s executable in the ordered `search_paths`.
pub fn resolve(runtime: NativeRuntime, search_paths: &[String]) -> Result<Resolved, Rejection> {
    let name = runtime.executable_name();
    let me = rustix::process::geteuid().as_raw();
    let overflow = overflow_uid();
    for dir in search_paths {
        if walk_dir(dir, SESSION_SEARCH_PATH_UNSAFE)?.is_none() {
            continue;
        }
        let Some(path) = canonical_target(dir, name)? else {
            continue;
        };
        let (d, n) = split(&path);
        let dfd = walk_dir(d, SESSION_EXECUTABLE_UNSAFE)?.ok_or_else(|| {
            refuse(
                SESSION_EXECUTABLE_UNSAFE,
                format!("{d} vanished while resolving"),
            )
        })?;
        let unsafe_file = |m: String| refuse(SESSION_EXECUTABLE_UNSAFE, format!("{path} {m}"));
        let fd = rustix::fs::openat(
            dfd.as_fd(),
            n,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| unsafe_file(format!("cannot be opened: {e}")))?;
        let st = rustix::fs::fstat(&fd).map_err(|e| unsafe_file(e.to_string()))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(unsafe_file("is not a regular file".into()));
        }
        if let Some(why) = untrusted(st.st_uid, st.st_mode, me, overflow) {
            return Err(unsafe_file(why));
        }
        if st.st_mode & 0o111 == 0 {
            return Err(unsafe_file("is not executable".into()));
        }
        let ctime_ns = i128::from(st.st_ctime) * 1_000_000_000 + i128::from(st.st_ctime_nsec);
        return Ok(Resolved {
            identity: glove_sandbox::identity::file_identity(st.st_dev, st.st_ino, ctime_ns),
            path,
        });
    }
    Err(refuse(
        SESSION_EXECUTABLE_NOT_FOUND,
        format!("{name} is in none of the template's search paths"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_is_lexical_and_bounded_by_root() {
        assert_eq!(normalize("/a/b/../c/./d").as_deref(), Some("/a/c/d"));
        assert_eq!(normalize("/a/.."), Some("/".into()));
        assert_eq!(normalize("/.."), None);
    }

    #[test]
    fn owners_and_modes() {
        assert!(untrusted(0, 0o755, 1000, 65534).is_none());
        assert!(untrusted(1000, 0o700, 1000, 65534).is_none());
        assert!(untrusted(1001, 0o755, 1000, 65534).is_some());
        assert!(untrusted(0, 0o775, 1000, 65534).is_some());
        assert!(untrusted(0, 0o757, 1000, 65534).is_some());
        assert!(untrusted(0, 0o1777, 1000, 65534).is_some());
        let o = untrusted(65534, 0o755, 1000, 65534).expect("overflow refused");
        assert!(o.contains("overflow"), "{o}");
    }
}
