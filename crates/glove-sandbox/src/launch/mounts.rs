//! The sandbox's file system: mounts, binds, grants, copies and the new root.

use super::{PreparedFacts, INSIDE_ID, PTY_MAX, PTY_MODE, SCRATCH, USER_NS_LIMITS};
use crate::spec::{LaunchSpec, MAX_HOST_FILES_TOTAL, MAX_HOST_FILE_BYTES, MAX_LEASE_BYTES};
use crate::sys::at;
use crate::sys::process::{self};
use crate::sys::{fd, mount, resolve, trace, Errno};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// Builds the sandbox's file system view inside the new mount namespace.
pub(super) fn setup_fs(
    spec: &LaunchSpec,
    privileged: bool,
    net: Option<&mut process::NetUnsharer>,
    born_in_net: u64,
    leases: &mut Vec<HeldLease>,
) -> Result<PreparedFacts, (String, Errno)> {
    let owner = privileged.then_some((INSIDE_ID, INSIDE_ID));
    let mut facts = PreparedFacts::default();
    let step = |s: &str| {
        let s = s.to_owned();
        move |e: Errno| (s.clone(), e)
    };
    let nodev_nosuid = libc::MS_NOSUID | libc::MS_NODEV;
    mount::mount("", "/", "", libc::MS_REC | libc::MS_PRIVATE, "")
        .map_err(step("make / private"))?;
    let root_size = 16u64 << 20;
    let root_size = root_size + spec.bundles.len() as u64 * crate::spec::MAX_BUNDLE_BYTES;
    mount::mount(
        "tmpfs",
        "/tmp",
        "tmpfs",
        nodev_nosuid,
        &format!("size={root_size},nr_inodes=16384,mode=0755"),
    )
    .map_err(step("mount new root"))?;
    mount::mkdir("/tmp/oldroot", 0o700).map_err(step("mkdir oldroot"))?;
    mount::chdir("/tmp").map_err(step("chdir new root"))?;
    mount::pivot_root(".", "oldroot").map_err(step("pivot_root"))?;
    mount::chdir("/").map_err(step("chdir /"))?;

    trace::mark("v:pivoted");
    // The sandbox's own per-user budgets (inotify, fanotify), set in its
    // user namespace through the host's procfs, which is still reachable
    // under /oldroot: the user-namespace sysctls are those of the writer's
    // user namespace, where the init holds CAP_SYS_RESOURCE.
    for (knob, value) in USER_NS_LIMITS {
        let path = format!("/oldroot/proc/sys/user/{knob}");
        mount::write_existing(&path, value.as_bytes()).map_err(step(&format!("limit {knob}")))?;
    }
    // /proc of the new pid namespace: only the processes (no kernel knobs,
    // no host-wide files: `subset=pid`), and only those the reader may
    // trace (`hidepid=invisible`: the init is not visible to the agent).
    mount::mkdir("/proc", 0o555).map_err(step("mkdir /proc"))?;
    mount::mount(
        "proc",
        "/proc",
        "proc",
        nodev_nosuid | libc::MS_NOEXEC,
        "subset=pid,hidepid=invisible",
    )
    .map_err(step("mount /proc"))?;

    trace::mark("v:proc");
    // Read-only binds from descriptors opened without following any link
    // (the path was checked once by the caller; a link put in its way
    // since fails the launch instead of being followed at mount time).
    for b in &spec.read_only_binds {
        let what = |w: &str| format!("bind source {}: {w}", b.source);
        let src = resolve::open_no_links(&format!("/oldroot{}", b.source), libc::O_PATH)
            .map_err(|e| (what("open"), e))?;
        let m = resolve::meta(src.as_fd()).map_err(|e| (what("stat"), e))?;
        if at::on_kernel_fs(src.as_fd()).map_err(|e| (what("statfs"), e))? {
            return Err((
                what("a kernel file system (proc, sys, cgroup)"),
                Errno(libc::EACCES),
            ));
        }
        // The target, too, is reached without following links: it may lie
        // in an earlier bind whose host directory another user controls.
        let target = if m.is_dir() {
            if !crate::profile::is_system_tree(&b.source) {
                refuse_sockets(src.as_fd(), &format!("bind {}", b.source))?;
            }
            at::target_dir(&b.target, 0o755)
        } else if m.is_file() {
            at::target_file(&b.target, 0o444)
        } else {
            return Err((what("not a directory or regular file"), Errno(libc::EPERM)));
        }
        .map_err(step(&format!("mount target {}", b.target)))?;
        at::bind_tree(
            src.as_fd(),
            target.as_fd(),
            mount::MOUNT_ATTR_RDONLY | mount::MOUNT_ATTR_NOSUID | mount::MOUNT_ATTR_NODEV,
        )
        .map_err(step(&format!("bind {}", b.target)))?;
    }
    // Sockets exposed on purpose (Glove's own listeners): each source must
    // be a socket, opened without following links, bound over a file.
    for b in &spec.sockets {
        let what = |w: &str| format!("socket source {}: {w}", b.source);
        let src = resolve::open_no_links(&format!("/oldroot{}", b.source), libc::O_PATH)
            .map_err(|e| (what("open"), e))?;
        let m = resolve::meta(src.as_fd()).map_err(|e| (what("stat"), e))?;
        if !m.is_socket() {
            return Err((what("not a socket"), Errno(libc::EPERM)));
        }
        let target = at::target_file(&b.target, 0o444)
            .map_err(step(&format!("mount target {}", b.target)))?;
        at::bind_tree(
            src.as_fd(),
            target.as_fd(),
            mount::MOUNT_ATTR_RDONLY
                | mount::MOUNT_ATTR_NOSUID
                | mount::MOUNT_ATTR_NODEV
                | mount::MOUNT_ATTR_NOEXEC,
        )
        .map_err(step(&format!("bind {}", b.target)))?;
    }
    trace::mark("v:binds");
    // Grants and bundles, opened without following links and bound from
    // the held descriptors.
    crate::grants::apply_grants(&spec.grants, &spec.protected_paths, owner, &mut facts)?;
    // Retained images, mounted by the supervisor (ext4 needs the initial
    // user namespace), attached here from their descriptors.
    for r in &spec.retained {
        let target = at::target_dir(&r.target, 0o755)
            .map_err(step(&format!("mount target {}", r.target)))?;
        at::attach(r.mount.as_fd(), target.as_fd())
            .map_err(step(&format!("attach retained workspace {}", r.target)))?;
    }
    // Exposures, copied from the descriptors the supervisor opened.
    crate::exposures::apply_exposures(&spec.exposures, owner)?;
    let owner_inside = if privileged { 0 } else { INSIDE_ID };
    crate::grants::apply_bundles(&spec.bundles, owner_inside, &mut facts)?;
    // The pin last of the mounts over the root's tree (the spec keeps
    // grants and bundles off its path as well).
    if let Some(pin) = &spec.executable_pin {
        pin_executable(&spec.executable, pin)?;
    }

    trace::mark("v:grants");
    // A minimal /dev with its own devpts: a directory of the root, so it
    // becomes read-only with it (one mount fewer than a tmpfs of its own).
    mount::mkdir("/dev", 0o755).map_err(step("mkdir /dev"))?;
    for d in ["null", "zero", "full", "random", "urandom", "tty"] {
        let t = format!("/dev/{d}");
        mount::touch(&t, 0o666).map_err(step(&format!("create {t}")))?;
        mount::mount(&format!("/oldroot/dev/{d}"), &t, "", libc::MS_BIND, "")
            .map_err(step(&format!("bind {t}")))?;
    }
    mount::mkdir("/dev/pts", 0o755).map_err(step("mkdir /dev/pts"))?;
    mount::mount(
        "devpts",
        "/dev/pts",
        "devpts",
        libc::MS_NOSUID | libc::MS_NOEXEC,
        &format!("newinstance,ptmxmode=0666,mode={PTY_MODE:o},max={PTY_MAX}"),
    )
    .map_err(step("mount devpts"))?;
    mount::symlink("pts/ptmx", "/dev/ptmx").map_err(step("link /dev/ptmx"))?;
    for (l, t) in [
        ("/dev/fd", "/proc/self/fd"),
        ("/dev/stdin", "/proc/self/fd/0"),
        ("/dev/stdout", "/proc/self/fd/1"),
        ("/dev/stderr", "/proc/self/fd/2"),
    ] {
        mount::symlink(t, l).map_err(step(&format!("link {l}")))?;
    }
    mount::mkdir("/dev/shm", 0o1777).map_err(step("mkdir /dev/shm"))?;

    trace::mark("v:dev");
    // One quota-sized scratch tmpfs; every writable directory is a slice of it.
    let size = format!(
        "size={},nr_inodes={},mode=0755",
        spec.limits.disk_bytes,
        inodes(spec.limits.disk_bytes)
    );
    mount::mount("tmpfs", SCRATCH, "tmpfs", nodev_nosuid, &size).map_err(step("mount scratch"))?;
    // Held from here on: the slices are made and bound through descriptors.
    let scratch = resolve::open_no_links(SCRATCH, libc::O_PATH | libc::O_DIRECTORY)
        .map_err(step("open scratch"))?;
    let slices = spec
        .writable_dirs
        .iter()
        .map(String::as_str)
        .chain(std::iter::once("/dev/shm"));
    let mut slice_fds: Vec<(&str, OwnedFd)> = Vec::new();
    for (i, w) in slices.enumerate() {
        let name = i.to_string();
        let mode = if w == "/tmp" || w == "/dev/shm" {
            0o1777
        } else {
            0o755
        };
        at::mkdir(scratch.as_fd(), &name, mode).map_err(step("mkdir scratch slice"))?;
        if let Some((u, g)) = owner {
            at::chown(scratch.as_fd(), &name, u, g).map_err(step("chown scratch slice"))?;
        }
        let slice = at::open_beneath(scratch.as_fd(), &name, libc::O_PATH | libc::O_DIRECTORY)
            .map_err(step("open scratch slice"))?;
        let target = at::target_dir(w, 0o755).map_err(step(&format!("mount target {w}")))?;
        // A plain bind (it keeps the scratch's nosuid,nodev) from one held
        // descriptor onto another, through this sandbox's own /proc (no
        // target is ever on procfs, so nothing can be mounted over it).
        mount::mount(
            &resolve::proc_path(slice.as_fd()),
            &resolve::proc_path(target.as_fd()),
            "",
            libc::MS_BIND,
            "",
        )
        .map_err(step(&format!("bind {w}")))?;
        slice_fds.push((w, slice));
    }
    trace::mark("v:scratch");
    for c in &spec.copy_in {
        let what = |w: &str| format!("copy {}: {w}", c.source);
        let src = crate::copy::open_source(&c.source).map_err(|e| (what("open"), e))?;
        let m = resolve::meta(src.as_fd()).map_err(|e| (what("stat"), e))?;
        // The target lies in a writable directory (checked by the spec):
        // reached from that directory's slice, never by its path.
        let (w, slice) = slice_fds
            .iter()
            .filter(|(w, _)| glove_types::paths::is_within(&c.target, w))
            .max_by_key(|(w, _)| w.len())
            .ok_or_else(|| (what("target"), Errno(libc::EINVAL)))?;
        let rel = c.target[w.len()..].trim_start_matches('/');
        let dst = at::dir_creating(slice.as_fd(), rel, 0o755).map_err(|e| (what("mkdir"), e))?;
        let here = at::open_beneath(dst.as_fd(), ".", libc::O_RDONLY | libc::O_DIRECTORY)
            .map_err(|e| (what("open target"), e))?;
        at::chmod(here.as_fd(), (m.mode & 0o777) | 0o700).map_err(|e| (what("chmod"), e))?;
        if let Some((u, g)) = owner {
            at::chown(dst.as_fd(), "", u, g).map_err(|e| (what("chown"), e))?;
        }
        crate::copy::copy_tree(src.as_fd(), dst.as_fd(), owner).map_err(|(w, e)| (what(&w), e))?;
    }
    seed(spec, &slice_fds, owner, leases)?;
    drop(slice_fds);
    drop(scratch);

    trace::mark("v:copy+devro");

    // The host files to copy are read now; then nothing refers to the old
    // root any more.
    let old_root = resolve::open_no_links("/oldroot", libc::O_PATH | libc::O_DIRECTORY)
        .map_err(step("open old root"))?;
    let mut host_bodies = Vec::with_capacity(spec.host_files.len());
    let mut host_total = 0u64;
    for f in &spec.host_files {
        let what = format!("host file {}", f.source);
        // Resolved and checked as a path first: opening a device for
        // reading (a link may point at one) can have effects of its own.
        let at = resolve::open_in_root(old_root.as_fd(), &f.source, libc::O_PATH)
            .map_err(step(&what))?;
        let m = resolve::meta(at.as_fd()).map_err(step(&what))?;
        if !m.is_file() {
            return Err((what, Errno(libc::EINVAL)));
        }
        host_total = host_total.saturating_add(m.size);
        if m.size > MAX_HOST_FILE_BYTES || host_total > MAX_HOST_FILES_TOTAL {
            return Err((what, Errno(libc::EFBIG)));
        }
        let fd = resolve::reopen(
            at.as_fd(),
            libc::O_RDONLY | libc::O_NOCTTY | libc::O_NONBLOCK,
        )
        .map_err(step(&what))?;
        let body =
            resolve::read_all_sized(fd.as_fd(), m.size as usize, MAX_HOST_FILE_BYTES as usize)
                .map_err(step(&what))?;
        host_bodies.push(body);
    }
    drop(old_root);
    trace::mark("v:host files read");

    // Directories made for links and files so far (most files share /etc),
    // held as descriptors: links and files are made relative to them.
    let mut made: Vec<(String, OwnedFd)> = Vec::new();
    fn parent_of(
        made: &mut Vec<(String, OwnedFd)>,
        p: &str,
    ) -> Result<(usize, String), (String, Errno)> {
        let (dir, name) = at::split(p).map_err(|e| (format!("path {p}"), e))?;
        let i = match made.iter().position(|(m, _)| m == dir) {
            Some(i) => i,
            None => {
                let fd = at::target_dir(dir, 0o755).map_err(|e| (format!("mkdir {p}"), e))?;
                made.push((dir.to_owned(), fd));
                made.len() - 1
            }
        };
        Ok((i, name.to_owned()))
    }
    for (link, target) in &spec.symlinks {
        let (i, name) = parent_of(&mut made, link)?;
        at::symlink(target, made[i].1.as_fd(), &name).map_err(step(&format!("symlink {link}")))?;
    }
    let generated = spec.files.iter().map(|(p, b)| (p.as_str(), b.as_slice()));
    let copied = spec
        .host_files
        .iter()
        .zip(&host_bodies)
        .map(|(f, b)| (f.target.as_str(), b.as_slice()));
    for (path, body) in generated.chain(copied) {
        let (i, name) = parent_of(&mut made, path)?;
        let f = at::create_file(made[i].1.as_fd(), &name, 0o444)
            .map_err(step(&format!("write {path}")))?;
        fd::write_all(f.as_fd(), body).map_err(step(&format!("write {path}")))?;
    }
    trace::mark("v:files");
    // Detaching waits for an RCU grace period; the helper is normally
    // still making the network namespace meanwhile.
    mount::detach("/oldroot").map_err(step("detach old root"))?;
    trace::mark("v:detached");
    mount::rmdir("/oldroot").map_err(step("remove old root"))?;
    mount::mount(
        "",
        "/",
        "",
        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | nodev_nosuid,
        "",
    )
    .map_err(step("read-only /"))?;
    join_net(net, born_in_net).map_err(step("network namespace"))?;
    trace::mark("net joined");
    Ok(facts)
}

/// Binds the host file at `executable` over the same path inside, from a
/// descriptor opened without following links, after checking it is still
/// the file the caller resolved (`pin`, see
/// [`crate::identity::file_identity`]). Exec by that path then runs this
/// inode, whatever happens to the host path afterwards.
fn pin_executable(executable: &str, pin: &str) -> Result<(), (String, Errno)> {
    let changed = || {
        (
            "pinned executable changed since it was resolved".to_owned(),
            Errno(libc::ESTALE),
        )
    };
    let src = resolve::open_no_links(&format!("/oldroot{executable}"), libc::O_PATH)
        .map_err(|e| ("pinned executable open".to_owned(), e))?;
    let m = resolve::meta(src.as_fd()).map_err(|e| ("pinned executable stat".to_owned(), e))?;
    if !m.is_file() || crate::identity::file_identity(m.dev, m.ino, m.ctime_ns) != pin {
        return Err(changed());
    }
    let target = at::target_file(executable, 0o444)
        .map_err(|e| ("pinned executable target".to_owned(), e))?;
    at::bind_tree(
        src.as_fd(),
        target.as_fd(),
        mount::MOUNT_ATTR_RDONLY | mount::MOUNT_ATTR_NOSUID | mount::MOUNT_ATTR_NODEV,
    )
    .map_err(|e| ("pinned executable bind".to_owned(), e))
}

/// The writable directory's slice holding `path`, and `path` below it.
fn slice_of<'a>(slices: &'a [(&str, OwnedFd)], path: &'a str) -> Option<(BorrowedFd<'a>, &'a str)> {
    let (w, fd) = slices
        .iter()
        .filter(|(w, _)| glove_types::paths::is_within(path, w) && path != *w)
        .max_by_key(|(w, _)| w.len())?;
    Some((fd.as_fd(), path[w.len()..].trim_start_matches('/')))
}

/// The directory `rel` below `base`, each missing component made with
/// mode 0755 and given to `owner`; never follows a link.
fn owned_dir(base: BorrowedFd<'_>, rel: &str, owner: Option<(u32, u32)>) -> Result<OwnedFd, Errno> {
    let mut cur = at::open_beneath(base, ".", libc::O_PATH | libc::O_DIRECTORY)?;
    for comp in rel.split('/').filter(|c| !c.is_empty()) {
        if comp == "." || comp == ".." {
            return Err(Errno(libc::EINVAL));
        }
        let flags = libc::O_PATH | libc::O_DIRECTORY;
        cur = match at::open_beneath(cur.as_fd(), comp, flags) {
            Ok(fd) => fd,
            Err(Errno(libc::ENOENT)) => {
                at::mkdir(cur.as_fd(), comp, 0o755)?;
                if let Some((u, g)) = owner {
                    at::chown(cur.as_fd(), comp, u, g)?;
                }
                at::open_beneath(cur.as_fd(), comp, flags)?
            }
            Err(e) => return Err(e),
        };
    }
    Ok(cur)
}

/// A lease to take back after the session: its path inside and the host
/// file it goes back to.
#[derive(Debug)]
pub(super) struct HeldLease {
    target: String,
    returned: OwnedFd,
}

/// Writes each lease back (see [`crate::spec::LeaseFile`]), once no process
/// of the sandbox is left: the file at its path inside, reached without
/// following links, a regular file of at most [`MAX_LEASE_BYTES`], then its
/// SHA-256. Anything else leaves the return file as it was (empty).
pub(super) fn take_back(held: &[HeldLease]) {
    use sha2::Digest;
    for h in held {
        let Ok(fd) = resolve::open_no_links(
            &h.target,
            libc::O_RDONLY | libc::O_NOCTTY | libc::O_NONBLOCK,
        ) else {
            continue;
        };
        let Ok(m) = resolve::meta(fd.as_fd()) else {
            continue;
        };
        if !m.is_file() || m.size > MAX_LEASE_BYTES as u64 {
            continue;
        }
        let Ok(mut body) = resolve::read_all_sized(fd.as_fd(), m.size as usize, MAX_LEASE_BYTES)
        else {
            continue;
        };
        let digest = sha2::Sha256::digest(&body);
        body.extend_from_slice(&digest);
        let _ = fd::replace_contents(h.returned.as_fd(), &body);
    }
}

/// Seeded directories and files, and the credential leases, all inside
/// writable directories (checked by the spec), reached from the slices'
/// descriptors and owned by the agent.
fn seed(
    spec: &LaunchSpec,
    slices: &[(&str, OwnedFd)],
    owner: Option<(u32, u32)>,
    held: &mut Vec<HeldLease>,
) -> Result<(), (String, Errno)> {
    fn place<'a>(
        slices: &'a [(&str, OwnedFd)],
        p: &'a str,
    ) -> Result<(BorrowedFd<'a>, &'a str), (String, Errno)> {
        slice_of(slices, p).ok_or_else(|| (format!("seed {p}"), Errno(libc::EINVAL)))
    }
    for d in &spec.seed_dirs {
        let (slice, rel) = place(slices, d)?;
        owned_dir(slice, rel, owner).map_err(|e| (format!("seed {d}"), e))?;
    }
    for f in &spec.seed_files {
        let what = |e| (format!("seed {}", f.path), e);
        let (slice, rel) = place(slices, &f.path)?;
        let (dir, name) = match rel.rsplit_once('/') {
            Some((d, n)) => (d, n),
            None => ("", rel),
        };
        let dir = owned_dir(slice, dir, owner).map_err(what)?;
        let mode = if f.executable { 0o755 } else { 0o644 };
        let fd = at::create_file(dir.as_fd(), name, mode).map_err(what)?;
        fd::write_all(fd.as_fd(), f.text.as_bytes()).map_err(what)?;
        at::chmod(fd.as_fd(), mode).map_err(what)?;
        if let Some((u, g)) = owner {
            at::chown(fd.as_fd(), "", u, g).map_err(what)?;
        }
    }
    for l in &spec.leases {
        let what = |s: &'static str| move |e| (format!("lease {}: {s}", l.target), e);
        // The lease, read now; the return file, held for the end. Neither
        // is ever visible inside.
        let src = resolve::open_no_links(
            &format!("/oldroot{}", l.source),
            libc::O_RDONLY | libc::O_NOCTTY | libc::O_NONBLOCK,
        )
        .map_err(what("open"))?;
        let m = resolve::meta(src.as_fd()).map_err(what("stat"))?;
        if !m.is_file() || m.nlink != 1 || m.size > MAX_LEASE_BYTES as u64 {
            return Err(what("not a regular file with one link of at most 1 MiB")(
                Errno(libc::EPERM),
            ));
        }
        let body = resolve::read_all_sized(src.as_fd(), m.size as usize, MAX_LEASE_BYTES)
            .map_err(what("read"))?;
        let ret = resolve::open_no_links(
            &format!("/oldroot{}", l.returned),
            libc::O_WRONLY | libc::O_NOCTTY | libc::O_NONBLOCK,
        )
        .map_err(what("open return"))?;
        let rm = resolve::meta(ret.as_fd()).map_err(what("stat return"))?;
        if !rm.is_file() || rm.nlink != 1 {
            return Err(what("return not a regular file with one link")(Errno(
                libc::EPERM,
            )));
        }
        let (slice, rel) = place(slices, &l.target)?;
        let (dir, name) = match rel.rsplit_once('/') {
            Some((d, n)) => (d, n),
            None => ("", rel),
        };
        let dir = owned_dir(slice, dir, owner).map_err(what("mkdir"))?;
        let fd = at::create_file(dir.as_fd(), name, 0o600).map_err(what("create"))?;
        fd::write_all(fd.as_fd(), &body).map_err(what("write"))?;
        at::chmod(fd.as_fd(), 0o600).map_err(what("chmod"))?;
        if let Some((u, g)) = owner {
            at::chown(fd.as_fd(), "", u, g).map_err(what("chown"))?;
        }
        held.push(HeldLease {
            target: l.target.clone(),
            returned: ret,
        });
    }
    Ok(())
}

/// Fails when a socket lies below `dir` (see [`crate::copy::find_socket`]);
/// the step names `what` and the socket (its path below the source).
pub(crate) fn refuse_sockets(dir: BorrowedFd<'_>, what: &str) -> Result<(), (String, Errno)> {
    match crate::copy::find_socket(dir) {
        Ok(None) => Ok(()),
        Ok(Some(found)) => Err((
            format!("socket {found} in {what} (a connect() would reach its listener)"),
            Errno(libc::EACCES),
        )),
        Err((w, e)) => Err((format!("socket check of {what}: {w}"), e)),
    }
}

pub(super) fn inodes(bytes: u64) -> u64 {
    (bytes / 4096).clamp(1024, 1 << 20)
}

/// In the init: waits until the helper (if any: none when the init was
/// born in a namespace from the pool) has created the network namespace
/// and joins it; either way refuses to go on in the supervisor's network
/// namespace, `born_in` (fails closed whatever went wrong).
fn join_net(helper: Option<&mut process::NetUnsharer>, born_in: u64) -> Result<(), Errno> {
    use std::os::unix::fs::MetadataExt;
    if let Some(helper) = helper {
        helper.wait_ready()?;
        process::setns(helper.pidfd(), libc::CLONE_NEWNET)?;
        helper.release();
    }
    let now = std::fs::metadata("/proc/self/ns/net")
        .map(|m| m.ino())
        .map_err(|e| Errno(e.raw_os_error().unwrap_or(libc::EIO)))?;
    if now == born_in {
        return Err(Errno(libc::EEXIST));
    }
    Ok(())
}
