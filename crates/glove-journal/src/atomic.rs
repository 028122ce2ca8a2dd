//! The one way Glove writes a small durable file whole: a fresh sibling
//! created with `O_EXCL` and mode 0600, the bytes, `fsync` of the file,
//! `rename` over the name, `fsync` of the directory. A reader sees the old
//! contents or the new, never a mix, and once the call returns the new
//! contents survive a crash. On an error the sibling is removed and the old
//! file is untouched.
//!
//! The anchor files and the ack use it inside this crate; `gloved` uses it
//! for the bootstrap secret, the remote backend's artifacts and the
//! launcher records.

use crate::error::{IoOp, JournalError};
use std::ffi::OsStr;
use std::os::fd::BorrowedFd;

/// Replaces `name` in `dir` with `bytes`, durably and atomically (see the
/// module docs). `name` is one component (no `/`); the directory is the
/// caller's open descriptor, so nothing is resolved again by path. A name
/// that is empty, `.`, `..` or holds a `/` is refused with `EINVAL`.
pub fn write_file(dir: BorrowedFd<'_>, name: &OsStr, bytes: &[u8]) -> Result<(), JournalError> {
    let b = name.as_encoded_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') {
        return Err(JournalError::Io {
            op: IoOp::Open,
            errno: rustix::io::Errno::INVAL,
        });
    }
    crate::placement::replace_file(dir, name, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn replaces_whole_and_refuses_a_path() {
        let t = tempfile::tempdir().expect("tempdir");
        let dir = std::fs::File::open(t.path()).expect("open dir");
        write_file(dir.as_fd(), OsStr::new("f"), b"one").expect("write");
        write_file(dir.as_fd(), OsStr::new("f"), b"two").expect("rewrite");
        assert_eq!(std::fs::read(t.path().join("f")).expect("read"), b"two");
        let names: Vec<_> = std::fs::read_dir(t.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["f"], "no sibling left behind");
        for bad in ["", ".", "..", "a/b"] {
            assert!(
                write_file(dir.as_fd(), OsStr::new(bad), b"x").is_err(),
                "{bad:?}"
            );
        }
    }
}
