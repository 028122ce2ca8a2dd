//! Descriptor-relative files: the one discipline every Glove crate that
//! keeps or makes files uses (the journals, the control core, the
//! sandbox's new root).
//!
//! A directory is opened once; everything inside it is then reached
//! relative to that descriptor, one component at a time, never following
//! a link in the last component (`O_NOFOLLOW`, `AT_SYMLINK_NOFOLLOW`),
//! never opening something that appeared meanwhile (`O_CREAT | O_EXCL`),
//! and the checks (type, owner, mode, links) run on the open descriptor
//! (`fstat`), so the check and the use see the same file.
//!
//! The few operations that take a whole path — where a directory is first
//! found, or an operator's file is read — are in [`unconfined`], named as
//! such: the kernel resolves every component of their path at each call.
//!
//! Walking a tree someone else controls (a retained workspace) goes
//! through [`beneath`]: `openat2` confined beneath a held directory.
//!
//! The crate has no error type of its own: operations return the
//! kernel's [`Errno`], checks a [`Fault`]; each caller maps them to its
//! own codes and messages.
#![forbid(unsafe_code)]

pub use rustix::fs::{FileType, Mode, OFlags};
pub use rustix::io::Errno;

use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{self as rfs, AtFlags, RenameFlags};
use std::ffi::OsStr;

pub mod beneath;
pub mod unconfined;

/// The effective user id: the owner every private file and directory must
/// have.
pub fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// What a placement check found wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Not a directory.
    NotDirectory,
    /// Not a regular file.
    NotRegular,
    /// Owned by another user.
    WrongOwner {
        /// The owner found.
        uid: u32,
    },
    /// Another permission mode.
    BadMode {
        /// The mode found (the low 12 bits).
        mode: u32,
    },
    /// More than one hard link (or none).
    LinkCount {
        /// The links found.
        links: u64,
    },
}

/// The facts of a file that the checks read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Facts {
    /// The file type.
    pub kind: FileType,
    /// The permission bits (the low 12 bits of the mode).
    pub mode: u32,
    /// The owner.
    pub uid: u32,
    /// The hard links.
    pub links: u64,
    /// The size in bytes.
    pub size: u64,
}

impl Facts {
    fn of(st: &rfs::Stat) -> Facts {
        #[expect(
            clippy::useless_conversion,
            reason = "st_nlink is u32 on some targets and u64 on others"
        )]
        let links = u64::from(st.st_nlink);
        Facts {
            kind: FileType::from_raw_mode(st.st_mode),
            mode: st.st_mode & 0o7777,
            uid: st.st_uid,
            links,
            size: u64::try_from(st.st_size).unwrap_or(u64::MAX),
        }
    }

    /// A private directory: a directory of this user with exactly `mode`.
    pub fn private_dir(&self, mode: u32) -> Result<(), Fault> {
        if self.kind != FileType::Directory {
            return Err(Fault::NotDirectory);
        }
        self.owner_and_mode(mode)
    }

    /// A private file: a regular file of this user with exactly `mode` and
    /// one hard link.
    pub fn private_file(&self, mode: u32) -> Result<(), Fault> {
        if self.kind != FileType::RegularFile {
            return Err(Fault::NotRegular);
        }
        self.owner_and_mode(mode)?;
        if self.links != 1 {
            return Err(Fault::LinkCount { links: self.links });
        }
        Ok(())
    }

    fn owner_and_mode(&self, mode: u32) -> Result<(), Fault> {
        if self.uid != euid() {
            return Err(Fault::WrongOwner { uid: self.uid });
        }
        if self.mode != mode {
            return Err(Fault::BadMode { mode: self.mode });
        }
        Ok(())
    }
}

/// The facts of an open file (`fstat`).
pub fn facts(fd: BorrowedFd<'_>) -> Result<Facts, Errno> {
    rfs::fstat(fd).map(|st| Facts::of(&st))
}

/// The facts of `name` in `dir`, not following a final link (`fstatat`
/// with `AT_SYMLINK_NOFOLLOW`).
pub fn facts_in(dir: BorrowedFd<'_>, name: &OsStr) -> Result<Facts, Errno> {
    rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).map(|st| Facts::of(&st))
}

/// Opens the existing `name` in `dir` with `access` (plus `O_NOFOLLOW`,
/// `O_CLOEXEC`, `O_NOCTTY`): a link in its place is `ELOOP`.
pub fn open_in(dir: BorrowedFd<'_>, name: &OsStr, access: OFlags) -> Result<OwnedFd, Errno> {
    rfs::openat(
        dir,
        name,
        access | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )
}

/// Creates `name` in `dir` as a new file with `mode` and opens it with
/// `access` (`O_CREAT | O_EXCL | O_NOFOLLOW`): an existing entry of any
/// kind, a link included, is `EEXIST`.
pub fn create_in(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    access: OFlags,
    mode: u32,
) -> Result<OwnedFd, Errno> {
    rfs::openat(
        dir,
        name,
        access
            | OFlags::CREATE
            | OFlags::EXCL
            | OFlags::NOFOLLOW
            | OFlags::CLOEXEC
            | OFlags::NOCTTY,
        Mode::from_raw_mode(mode),
    )
}

/// `mkdirat(dir, name, mode)`; an existing entry is `EEXIST`.
pub fn mkdir_in(dir: BorrowedFd<'_>, name: &OsStr, mode: u32) -> Result<(), Errno> {
    rfs::mkdirat(dir, name, Mode::from_raw_mode(mode))
}

/// `symlinkat(target, dir, name)`.
pub fn symlink_in(target: &OsStr, dir: BorrowedFd<'_>, name: &OsStr) -> Result<(), Errno> {
    rfs::symlinkat(target, dir, name)
}

/// Changes the owner of `name` in `dir` without following a final link;
/// an empty `name` changes `dir` itself.
pub fn chown_in(dir: BorrowedFd<'_>, name: &OsStr, uid: u32, gid: u32) -> Result<(), Errno> {
    let flags = if name.is_empty() {
        AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW
    } else {
        AtFlags::SYMLINK_NOFOLLOW
    };
    let uid = rustix::process::Uid::from_raw(uid);
    let gid = rustix::process::Gid::from_raw(gid);
    rfs::chownat(dir, name, Some(uid), Some(gid), flags)
}

/// Sets the permission bits of an open file (`fchmod`).
pub fn chmod(fd: BorrowedFd<'_>, mode: u32) -> Result<(), Errno> {
    rfs::fchmod(fd, Mode::from_raw_mode(mode))
}

/// Renames `from` to `to` within `dir`; with `no_replace`, an existing
/// `to` is `EEXIST`.
pub fn rename_in(
    dir: BorrowedFd<'_>,
    from: &OsStr,
    to: &OsStr,
    no_replace: bool,
) -> Result<(), Errno> {
    if no_replace {
        rfs::renameat_with(dir, from, dir, to, RenameFlags::NOREPLACE)
    } else {
        rfs::renameat(dir, from, dir, to)
    }
}

/// Removes the file `name` from `dir`; a missing one is fine.
pub fn unlink_in(dir: BorrowedFd<'_>, name: &OsStr) -> Result<(), Errno> {
    match rfs::unlinkat(dir, name, AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Makes `dir`'s entries durable (`fsync` of the directory).
pub fn sync_dir(dir: BorrowedFd<'_>) -> Result<(), Errno> {
    rfs::fsync(dir)
}

/// Makes a file's data durable (`fdatasync`).
pub fn sync_data(fd: impl AsFd) -> Result<(), Errno> {
    rfs::fdatasync(fd)
}

#[cfg(test)]
mod tests;
