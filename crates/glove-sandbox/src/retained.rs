//! Retained images: the file system an agent's retained workspace lives on.
//!
//! A retained workspace is a regular file holding an ext4 file system of a
//! fixed size (the grant's byte quota), made by the host's own
//! `mkfs.ext4`. To use it, the image is attached to a loop device with
//! autoclear and mounted *detached* (`fsopen("ext4")` + `fsmount`): the
//! mount belongs to no mount table until the sandbox init attaches it at
//! its target inside the sandbox's own mount namespace. When the session
//! ends the namespace goes, the mount with it, and the kernel detaches the
//! loop device by itself once the last descriptor closes; the image file
//! stays, with the agent's work, across a service restart or a reboot.
//! Inspection mounts it again read-only from a read-only loop device.
//!
//! Only a supervisor with real `CAP_SYS_ADMIN` (root in the initial user
//! namespace) can mount ext4; [`support`] says whether this host and
//! process can, and why not.

use crate::error::SandboxError;
use crate::sys::{at as sys_at, loopdev, mount, Errno};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Smallest image: ext4 needs room for its own metadata.
pub const MIN_IMAGE_BYTES: u64 = 16 << 20;

/// Largest image (1 TiB).
pub const MAX_IMAGE_BYTES: u64 = 1 << 40;

/// The only `mkfs.ext4` Glove runs, in this order.
pub const MKFS_CANDIDATES: [&str; 2] = ["/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"];

/// How long [`Mounted::release`] waits for the last mount of a device to go.
pub const RELEASE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why retained images cannot be made here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsupported {
    /// For the operator.
    pub reason: String,
}

/// A checked `mkfs.ext4`: the resolved file and every directory above it
/// are owned by root and writable by no one else.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mkfs {
    path: PathBuf,
}

impl Mkfs {
    /// The resolved path that is run.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn root_owned_not_writable(p: &Path) -> Result<(), String> {
    let m = std::fs::symlink_metadata(p).map_err(|e| format!("{}: {e}", p.display()))?;
    if m.uid() != 0 {
        return Err(format!("{} is not owned by root", p.display()));
    }
    if m.permissions().mode() & 0o022 != 0 {
        return Err(format!(
            "{} is writable by its group or others",
            p.display()
        ));
    }
    Ok(())
}

/// Finds and checks `mkfs.ext4`: the first of [`MKFS_CANDIDATES`] that
/// exists, resolved (Debian's is a link to `mke2fs`), then the resolved
/// file must be a regular file and it and every directory above it owned
/// by root and not group- or world-writable. Nothing else is ever run.
pub fn find_mkfs() -> Result<Mkfs, Unsupported> {
    let mut why = Vec::new();
    for c in MKFS_CANDIDATES {
        let p = Path::new(c);
        if std::fs::symlink_metadata(p).is_err() {
            why.push(format!("{c} does not exist"));
            continue;
        }
        let real = std::fs::canonicalize(p).map_err(|e| Unsupported {
            reason: format!("{c}: {e}"),
        })?;
        let check = || -> Result<(), String> {
            let m = std::fs::symlink_metadata(&real).map_err(|e| e.to_string())?;
            if !m.file_type().is_file() {
                return Err(format!("{} is not a regular file", real.display()));
            }
            root_owned_not_writable(&real)?;
            for dir in real.ancestors().skip(1) {
                root_owned_not_writable(dir)?;
            }
            Ok(())
        };
        return match check() {
            Ok(()) => Ok(Mkfs { path: real }),
            Err(reason) => Err(Unsupported {
                reason: format!("{c} is not safe to run: {reason}"),
            }),
        };
    }
    Err(Unsupported {
        reason: format!("no mkfs.ext4 ({}); install e2fsprogs", why.join(", ")),
    })
}

/// Whether this process can make and mount retained images: root in the
/// initial user namespace, loop-control available, ext4 known to the
/// kernel, and a checked `mkfs.ext4`.
pub fn support() -> Result<Mkfs, Unsupported> {
    if rustix::process::geteuid().as_raw() != 0 {
        return Err(Unsupported {
            reason: "mounting an ext4 image needs root (the service user is not root)".into(),
        });
    }
    // The initial user namespace maps every id to itself.
    let map = std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
    let initial = map.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"];
    if !initial {
        return Err(Unsupported {
            reason: "mounting an ext4 image needs the initial user namespace".into(),
        });
    }
    let filesystems = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    if !filesystems
        .lines()
        .any(|l| l.trim_end().ends_with("\text4"))
    {
        return Err(Unsupported {
            reason: "the kernel has no ext4 file system".into(),
        });
    }
    loopdev::control_available().map_err(|e| Unsupported {
        reason: format!("no loop devices (/dev/loop-control: {e})"),
    })?;
    find_mkfs()
}

fn io(what: &str, e: impl std::fmt::Display) -> SandboxError {
    SandboxError::Io {
        detail: format!("retained image: {what}: {e}"),
    }
}

/// Makes the image file `name` in the directory `dir` (its path
/// `dir_path` only names it in errors): created exclusively with mode 0600,
/// sized to `bytes`, formatted as ext4 with its root directory owned by
/// `owner`.
/// Returns the image, open read-write.
pub fn create_image(
    mkfs: &Mkfs,
    dir: BorrowedFd<'_>,
    dir_path: &Path,
    name: &str,
    bytes: u64,
    owner: (u32, u32),
) -> Result<OwnedFd, SandboxError> {
    if !(MIN_IMAGE_BYTES..=MAX_IMAGE_BYTES).contains(&bytes) {
        return Err(io(
            "size",
            format!("{bytes} bytes is outside {MIN_IMAGE_BYTES}..={MAX_IMAGE_BYTES}"),
        ));
    }
    let file = glove_fs::create_in(
        dir,
        std::ffi::OsStr::new(name),
        glove_fs::OFlags::RDWR,
        0o600,
    )
    .map_err(|e| io(&format!("create {}", dir_path.join(name).display()), e))?;
    rustix::fs::ftruncate(&file, bytes).map_err(|e| io("size", e))?;
    // mkfs is given the open file itself (`/proc/self/fd/N` of a
    // descriptor it inherits), never a path: a directory above the store
    // swapped for a link between the create and the run cannot point it
    // at another file.
    let inherited = rustix::io::dup(&file).map_err(|e| io("dup", e))?;
    let target = format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&inherited)
    );
    // One inode per 4 KiB: a workspace is many small files.
    let out = std::process::Command::new(mkfs.path())
        .arg0("mkfs.ext4")
        .env_clear()
        .args([
            "-q",
            "-F",
            "-t",
            "ext4",
            "-m",
            "0",
            "-i",
            "4096",
            "-L",
            "glove-stage",
        ])
        .arg("-E")
        .arg(format!("root_owner={}:{},nodiscard", owner.0, owner.1))
        .arg(&target)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| io("run mkfs.ext4", e))?;
    drop(inherited);
    if !out.status.success() {
        return Err(io(
            "mkfs.ext4",
            format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ));
    }
    glove_fs::sync_data(&file).map_err(|e| io("sync", e))?;
    Ok(file)
}

use std::os::unix::process::CommandExt as _;

/// An image attached to a loop device and mounted, detached from every
/// mount table.
#[derive(Debug)]
pub struct Mounted {
    device: OwnedFd,
    number: u32,
    root: OwnedFd,
    writable: bool,
}

/// Whether a loop device backed by `image` is still in use (a mount of
/// it lives, in this process's namespace or a sandbox's). Attaching the
/// image a second time then would put two file systems over one ext4.
pub fn image_in_use(image: BorrowedFd<'_>) -> Result<bool, SandboxError> {
    let st = rustix::fs::fstat(image).map_err(|e| io("stat the image", e))?;
    let devices =
        loopdev::backed_by(st.st_dev, st.st_ino).map_err(|e| io("list loop devices", e))?;
    for n in devices {
        if loopdev::in_use(n).map_err(|e| io("check a loop device", e))? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Attaches `image` and mounts it: read-write for a session, or read-only
/// (from a read-only loop device, mounted `ro`) to inspect or apply it.
/// Refused while another mount of the image lives ([`image_in_use`]). A
/// file system left unclean by a crash (`EROFS` on the read-only device:
/// its journal needs replaying) is mounted once read-write to replay it,
/// then read-only.
pub fn mount_image(image: BorrowedFd<'_>, writable: bool) -> Result<Mounted, SandboxError> {
    if image_in_use(image)? {
        return Err(io(
            "attach",
            "the image is still mounted (its session may still run)",
        ));
    }
    let attrs = mount::MOUNT_ATTR_NOSUID
        | mount::MOUNT_ATTR_NODEV
        | if writable {
            0
        } else {
            mount::MOUNT_ATTR_RDONLY | mount::MOUNT_ATTR_NOEXEC
        };
    let try_mount = |read_only_device: bool| -> Result<Result<Mounted, Errno>, SandboxError> {
        let (device, number) =
            loopdev::attach(image, read_only_device).map_err(|e| io("attach a loop device", e))?;
        let flags: &[&str] = if writable { &[] } else { &["ro"] };
        Ok(sys_at::new_mount(
            c"ext4",
            &[("source", format!("/dev/loop{number}"))],
            flags,
            attrs,
        )
        .map(|root| Mounted {
            device,
            number,
            root,
            writable,
        }))
    };
    let mounted = |r: Result<Mounted, Errno>| r.map_err(|e| io("mount", e));
    if writable {
        return mounted(try_mount(false)?);
    }
    match try_mount(true)? {
        Ok(m) => Ok(m),
        // ext4 refuses a read-only device whose journal needs replaying.
        Err(Errno(libc::EROFS)) => {
            let replay = mounted(try_mount(false)?)?;
            replay.release()?;
            mounted(try_mount(true)?)
        }
        Err(e) => Err(io("mount", e)),
    }
}

impl Mounted {
    /// The root directory of the mounted image (a descriptor of the
    /// detached mount).
    pub fn root(&self) -> BorrowedFd<'_> {
        self.root.as_fd()
    }

    /// The loop device's number.
    pub fn device_number(&self) -> u32 {
        self.number
    }

    /// Whether the mount is writable.
    pub fn writable(&self) -> bool {
        self.writable
    }

    /// Fills a new writable image from `source` (a host directory
    /// descriptor) by the same no-follow descriptor walk as copies, every
    /// entry given to `owner`; a `lost+found` made by `mkfs` is removed
    /// first unless the source has one.
    pub fn fill(
        &self,
        source: Option<BorrowedFd<'_>>,
        owner: (u32, u32),
    ) -> Result<(), SandboxError> {
        if !self.writable {
            return Err(io("fill", "the image is mounted read-only"));
        }
        let lost = std::ffi::OsStr::new("lost+found");
        if glove_fs::facts_in(self.root(), lost).is_ok() {
            rustix::fs::unlinkat(self.root(), "lost+found", rustix::fs::AtFlags::REMOVEDIR)
                .map_err(|e| io("remove lost+found", e))?;
        }
        if let Some(src) = source {
            crate::copy::copy_tree(src, self.root(), Some(owner))
                .map_err(|(w, e)| io(&format!("copy {w}"), e))?;
            // The root is a copy of the source's root too.
            let mode = rustix::fs::fstat(src)
                .map_err(|e| io("stat the source", e))?
                .st_mode
                & 0o7777;
            rustix::fs::chmodat(
                self.root(),
                ".",
                rustix::fs::Mode::from_raw_mode(mode),
                rustix::fs::AtFlags::empty(),
            )
            .map_err(|e| io("chmod the root", e))?;
        }
        let dir = rustix::fs::openat(
            self.root(),
            ".",
            rustix::fs::OFlags::RDONLY
                | rustix::fs::OFlags::DIRECTORY
                | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| io("open the root", e))?;
        rustix::fs::syncfs(&dir).map_err(|e| io("sync", e))?;
        Ok(())
    }

    /// Hands the mount to a launch: the sandbox init attaches it at
    /// `target`. The loop device stays held by the returned [`Held`], which
    /// [`Held::release`] waits on after the session.
    pub fn into_grant(self, target: String) -> (crate::spec::RetainedMount, Held) {
        (
            crate::spec::RetainedMount {
                target,
                mount: self.root,
            },
            Held {
                device: self.device,
                number: self.number,
            },
        )
    }

    /// Unmounts (drops the detached mount) and waits until the loop device
    /// is free, so the image can be attached again.
    pub fn release(self) -> Result<(), SandboxError> {
        let Mounted {
            device,
            number,
            root,
            ..
        } = self;
        drop(root);
        Held { device, number }.release(RELEASE_TIMEOUT)
    }
}

/// A loop device whose mount was handed to a sandbox.
#[derive(Debug)]
pub struct Held {
    device: OwnedFd,
    number: u32,
}

impl Held {
    /// Waits (at most `timeout`) until no mount holds the device any more,
    /// then lets it go (autoclear detaches it). A device still mounted
    /// after `timeout` is an error: attaching the image a second time
    /// while a writable mount of it lives would corrupt it.
    pub fn release(self, timeout: Duration) -> Result<(), SandboxError> {
        let start = Instant::now();
        let mut pause = Duration::from_micros(200);
        loop {
            match loopdev::in_use(self.number) {
                Ok(false) => break,
                Ok(true) if start.elapsed() < timeout => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
                Ok(true) => {
                    return Err(io(
                        "release",
                        format!(
                            "/dev/loop{} is still mounted after {timeout:?}",
                            self.number
                        ),
                    ))
                }
                Err(e) => return Err(io("release", e)),
            }
        }
        drop(self.device);
        Ok(())
    }
}

/// The state of a descriptor's file system: its used bytes.
pub fn used_bytes(root: BorrowedFd<'_>) -> Result<u64, Errno> {
    let s = rustix::fs::fstatvfs(root).map_err(|e| Errno(e.raw_os_error()))?;
    Ok((s.f_blocks - s.f_bfree) * s.f_frsize)
}
