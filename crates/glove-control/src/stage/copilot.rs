//! copilot's extracted package cache, produced at stage time, contained:
//! the I/O behind its descriptor's package cache
//! (`glove_types::harness::copilot`, [`CacheProducer::CopilotExtractOnly`]),
//! reached from [`super::Plan::execute`].
//!
//! [`CacheProducer::CopilotExtractOnly`]: glove_types::harness::CacheProducer::CopilotExtractOnly
//!
//! copilot's platform binary is a Node single-executable application that
//! carries its JavaScript as an embedded `copilot.tgz`. On each start its
//! loader looks for `$COPILOT_PKG_CACHE_HOME/pkg/linux-x64/<version>/` and
//! uses it when `.extraction-complete`, `index.js`, `app.js`, `cli-main.js`
//! and `prebuilds/linux-x64/runtime.node` are all there; otherwise it
//! unpacks the archive there first (about 235 MB), which needs a writable
//! disk. Its own extract-only mode (`COPILOT_SEA_EXTRACT_ONLY=1` with
//! `--binary-version`, which its loader uses for background extraction)
//! unpacks and exits without starting the CLI.
//!
//! The binary comes from an npm tree someone else may write, so it is
//! never run on the host: a dry run runs nothing, and `--yes` runs the
//! *staged copy* (the bytes just hashed into the temporary store
//! directory) inside a Glove sandbox (`glove exec`, offline, the
//! temporary directory bound read-only, bounded disk, memory, processes
//! and output), extracting into the sandbox's own `/tmp` and writing the
//! cache to stdout as a ustar stream. [`unpack`] reads that stream itself,
//! strictly (regular files and directories only, normalised relative
//! paths, bounded, created exclusively beneath descriptors it made, modes
//! normalised), into `<tmp>/pkg-cache`, which then joins the closure.
//! A session sets `COPILOT_PKG_CACHE_HOME=<store>/pkg-cache` and uses the
//! cache read only.

use super::closure::open_beneath;
use glove_types::codes::stage::{STAGE_COPILOT_CACHE, STAGE_IO};
use glove_types::Rejection;
use rustix::fs::{Mode, OFlags};
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// How long the contained extraction may take (about two seconds here).
pub const EXTRACT_TIMEOUT: Duration = Duration::from_secs(300);
/// Most bytes the cache's files may hold together (it is about 235 MB);
/// also the sandbox's writable disk.
pub const MAX_CACHE_BYTES: u64 = 1 << 30;
/// Most entries in the cache (it has about 320).
pub const MAX_CACHE_ENTRIES: usize = 20_000;
/// Longest path in the cache, in bytes (ustar's own limit is 255).
pub const MAX_CACHE_PATH_BYTES: usize = 255;
/// The cache's place in the closure (copilot's descriptor's).
pub const CACHE_DIR: &str = glove_types::harness::copilot::PACKAGE_CACHE_DIR;

/// Runs inside the sandbox: `$1` is the staged copilot.
const SCRIPT: &str = "command -v tar >/dev/null 2>&1 || \
{ echo 'glove-stage: tar is not available inside the sandbox (/usr/bin/tar)' >&2; exit 127; }; \
mkdir -p /tmp/c /tmp/h && \
COPILOT_SEA_EXTRACT_ONLY=1 COPILOT_PKG_CACHE_HOME=/tmp/c HOME=/tmp/h \"$1\" --binary-version \
>/dev/null 2>&1 || { echo 'glove-stage: copilot --binary-version (extract only) failed' >&2; exit 1; }; \
exec tar --format=ustar -C /tmp/c -cf - .";

fn failed(m: String) -> Rejection {
    Rejection::new(STAGE_COPILOT_CACHE, m)
}

fn errno(what: &str, p: &str, e: rustix::io::Errno) -> Rejection {
    Rejection::new(STAGE_IO, format!("{what} {p}: {}", std::io::Error::from(e)))
}

/// Runs the staged copilot `staged/<executable>` in extract-only mode
/// inside a sandbox started with `glove` (`glove exec`), and unpacks the
/// cache it produced into `staged/pkg-cache`, checking it is complete for
/// `version`.
pub(crate) fn extract_contained(
    glove: &Path,
    staged: &Path,
    executable: &str,
    version: &str,
) -> Result<(), Rejection> {
    let exe = staged.join(executable);
    let disk = MAX_CACHE_BYTES.to_string();
    // The stream: the files, a header per entry, and tar's padding.
    let output = (MAX_CACHE_BYTES + (MAX_CACHE_ENTRIES as u64 + 64) * 1024).to_string();
    let wall = EXTRACT_TIMEOUT.as_millis().to_string();
    let mut child = Command::new(glove)
        .arg("exec")
        .arg("--ro-bind")
        .arg(staged)
        .args(["--disk", &disk, "--output", &output, "--memory", "1G"])
        .args(["--pids", "256", "--wall-ms", &wall, "--cpu-ms", &wall])
        .args(["--raw-output", "--", "/bin/sh", "-c", SCRIPT, "sh"])
        .arg(&exe)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| failed(format!("cannot start {} exec: {e}", glove.display())))?;
    let (Some(stdout), Some(mut stderr)) = (child.stdout.take(), child.stderr.take()) else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(failed("glove exec has no output pipes".into()));
    };
    // stderr is drained beside the stream (kept to 16 KiB for the message)
    // so neither pipe can stall the other.
    let errs = std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = stderr.read(&mut buf) {
            if n == 0 {
                break;
            }
            let room = (16usize << 10).saturating_sub(kept.len());
            kept.extend_from_slice(&buf[..n.min(room)]);
        }
        // The sandboxed program's words, shown as inert text: anything
        // but printable ASCII (terminal escapes, bidi and other invisible
        // format characters) is escaped, and each of its lines is marked
        // as its own, so it cannot pass for Glove's output.
        String::from_utf8_lossy(&kept)
            .trim()
            .chars()
            .flat_map(|c| match c {
                '\n' => "\n  | ".chars().collect::<Vec<_>>(),
                ' '..='~' => vec![c],
                c => c.escape_default().collect(),
            })
            .collect::<String>()
    });
    let cache = staged.join(CACHE_DIR);
    let unpacked = make_dir(&cache).and_then(|root| unpack(stdout, root.as_fd()));
    if unpacked.is_err() {
        let _ = child.kill();
    }
    let status = child.wait();
    let said = errs.join().unwrap_or_default();
    // A host-side failure to write the cache (a full disk, say) is the
    // cause when it happens: the sandbox was then stopped here, and its
    // status would only say it was killed.
    if let Err(e) = &unpacked {
        if e.code() == STAGE_IO {
            return unpacked;
        }
    }
    let status = status.map_err(|e| failed(format!("waiting for glove exec: {e}")))?;
    if !status.success() {
        return Err(failed(format!(
            "extracting copilot's package cache in the sandbox failed ({status}){}{said}",
            if said.is_empty() { "" } else { ": " }
        )));
    }
    unpacked?;
    let complete = std::fs::read_dir(cache.join("pkg"))
        .into_iter()
        .flatten()
        .flatten()
        .any(|platform| {
            let v = platform.path().join(version);
            [".extraction-complete", "index.js", "app.js", "cli-main.js"]
                .iter()
                .all(|f| v.join(f).is_file())
        });
    if !complete {
        return Err(failed(format!(
            "the staged copilot left no complete pkg/<platform>/{version} cache"
        )));
    }
    Ok(())
}

/// Creates the empty directory `p` (mode 0755) and opens it.
fn make_dir(p: &Path) -> Result<OwnedFd, Rejection> {
    let io = |e: rustix::io::Errno| errno("cannot create", &p.display().to_string(), e);
    rustix::fs::mkdir(p, Mode::from_raw_mode(0o700)).map_err(io)?;
    let fd = rustix::fs::open(
        p,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io)?;
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o755)).map_err(io)?;
    Ok(fd)
}

/// A tar path made a normalised relative path: `./` and empty components
/// dropped; absolute paths, `..`, names that are not UTF-8 or hold a
/// control character, and over-long paths refused. `None`: the root.
fn normalise(raw: &[u8]) -> Result<Option<Vec<String>>, Rejection> {
    let shown = String::from_utf8_lossy(raw).into_owned();
    let bad = |why: &str| failed(format!("the cache stream has the path {shown:?}: {why}"));
    if raw.len() > MAX_CACHE_PATH_BYTES {
        return Err(bad("too long"));
    }
    if raw.first() == Some(&b'/') {
        return Err(bad("absolute"));
    }
    let s = std::str::from_utf8(raw).map_err(|_| bad("not UTF-8"))?;
    if s.chars().any(char::is_control) {
        return Err(bad("a control character"));
    }
    let mut parts = Vec::new();
    for c in s.split('/') {
        match c {
            "" | "." => {}
            ".." => return Err(bad("it climbs with ..")),
            n => parts.push(n.to_owned()),
        }
    }
    Ok((!parts.is_empty()).then_some(parts))
}

/// The directory `parts` beneath `root`, created (0755) where missing.
fn dir_beneath(root: BorrowedFd<'_>, parts: &[String]) -> Result<Option<OwnedFd>, Rejection> {
    let mut at: Option<OwnedFd> = None;
    for (i, name) in parts.iter().enumerate() {
        let shown = parts[..=i].join("/");
        let here = at.as_ref().map_or(root, AsFd::as_fd);
        match rustix::fs::mkdirat(here, name.as_str(), Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(errno("cannot create", &shown, e)),
        }
        let fd = open_beneath(here, name, OFlags::RDONLY | OFlags::DIRECTORY)
            .map_err(|e| errno("cannot open", &shown, e))?;
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o755))
            .map_err(|e| errno("cannot chmod", &shown, e))?;
        at = Some(fd);
    }
    Ok(at)
}

/// Unpacks a tar stream beneath `root` (an empty directory made by the
/// caller): regular files and directories only, nothing else (links, hard
/// links, devices, FIFOs are refused); each file created exclusively
/// (`O_EXCL | O_NOFOLLOW`) beneath directories made here, its mode
/// normalised (0755 when any execute bit is set, else 0644); entries,
/// bytes and path lengths bounded. Never `tar::Archive::unpack`.
pub(crate) fn unpack(stream: impl Read, root: BorrowedFd<'_>) -> Result<(), Rejection> {
    let mut archive = tar::Archive::new(stream);
    let bad = |e: std::io::Error| failed(format!("the cache stream is not a tar archive: {e}"));
    let (mut entries, mut bytes) = (0usize, 0u64);
    // Raw entries: GNU long-name and PAX extension headers are not read
    // into memory and merged; they come through as entries of their own
    // kind and are refused below (the producer writes plain ustar).
    for entry in archive.entries().map_err(bad)?.raw(true) {
        let mut entry = entry.map_err(bad)?;
        entries += 1;
        if entries > MAX_CACHE_ENTRIES {
            return Err(failed(format!(
                "the cache has more than {MAX_CACHE_ENTRIES} entries"
            )));
        }
        let kind = entry.header().entry_type();
        let raw = entry.path_bytes().into_owned();
        let parts = normalise(&raw)?;
        let shown = String::from_utf8_lossy(&raw).into_owned();
        if kind.is_dir() {
            if let Some(parts) = parts {
                dir_beneath(root, &parts)?;
            }
            continue;
        }
        if !kind.is_file() {
            return Err(failed(format!(
                "the cache stream holds {shown:?}, which is not a regular file or a directory \
                 ({kind:?}); links and special files are refused"
            )));
        }
        let Some(parts) = parts else {
            return Err(failed(format!(
                "the cache stream holds a file named {shown:?}"
            )));
        };
        let size = entry.size();
        bytes = bytes.saturating_add(size);
        if bytes > MAX_CACHE_BYTES {
            return Err(failed(format!(
                "the cache is larger than {MAX_CACHE_BYTES} bytes"
            )));
        }
        let mode = entry.header().mode().map_err(bad)?;
        let Some((name, dirs)) = parts.split_last() else {
            return Err(failed(format!(
                "the cache stream holds a file named {shown:?}"
            )));
        };
        let parent = dir_beneath(root, dirs)?;
        let at = parent.as_ref().map_or(root, AsFd::as_fd);
        let fd = rustix::fs::openat(
            at,
            name.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| match e {
            rustix::io::Errno::EXIST => failed(format!("the cache stream holds {shown:?} twice")),
            e => errno("cannot create", &shown, e),
        })?;
        let mut out = std::fs::File::from(fd);
        let copied = std::io::copy(&mut (&mut entry).take(size), &mut out)
            .map_err(|e| failed(format!("reading {shown:?} from the cache stream: {e}")))?;
        if copied != size {
            return Err(failed(format!("the cache stream ends inside {shown:?}")));
        }
        out.flush()
            .map_err(|e| Rejection::new(STAGE_IO, format!("cannot write {shown}: {e}")))?;
        let normal = if mode & 0o111 != 0 { 0o755 } else { 0o644 };
        rustix::fs::fchmod(&out, Mode::from_raw_mode(normal))
            .map_err(|e| errno("cannot chmod", &shown, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(kind: tar::EntryType, size: u64, mode: u32) -> tar::Header {
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(kind);
        h.set_size(size);
        h.set_mode(mode);
        h
    }

    /// A stream of `(path, kind, body)`; paths are written raw so that
    /// hostile ones can be made.
    fn stream(items: &[(&str, tar::EntryType, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, kind, body) in items {
            let mut h = header(*kind, body.len() as u64, 0o700);
            let name = &mut h.as_old_mut().name;
            name[..path.len()].copy_from_slice(path.as_bytes());
            if *kind == tar::EntryType::Symlink || *kind == tar::EntryType::Link {
                h.set_link_name("/etc/shadow").expect("link name");
            }
            h.set_cksum();
            b.append(&h, *body).expect("append");
        }
        b.into_inner().expect("finish")
    }

    fn unpacked(
        items: &[(&str, tar::EntryType, &[u8])],
    ) -> (tempfile::TempDir, Result<(), Rejection>) {
        let t = tempfile::tempdir().expect("tempdir");
        let root = make_dir(&t.path().join("c")).expect("root");
        let r = unpack(stream(items).as_slice(), root.as_fd());
        (t, r)
    }

    #[test]
    fn files_and_directories_unpack_with_normalised_modes() {
        use std::os::unix::fs::PermissionsExt;
        use tar::EntryType::{Directory, Regular};
        let (t, r) = unpacked(&[
            ("./", Directory, b""),
            ("./pkg/", Directory, b""),
            ("./pkg/a.js", Regular, b"a"),
            ("pkg/deep/x/run", Regular, b"#!"),
        ]);
        r.expect("unpacked");
        let c = t.path().join("c");
        assert_eq!(std::fs::read(c.join("pkg/a.js")).expect("a"), b"a");
        let mode = |p: &str| {
            std::fs::metadata(c.join(p))
                .expect("stat")
                .permissions()
                .mode()
                & 0o7777
        };
        assert_eq!(mode("pkg/a.js"), 0o755, "0700 has an execute bit");
        assert_eq!(mode("pkg/deep/x"), 0o755);
        assert_eq!(mode(""), 0o755);
    }

    #[test]
    fn links_specials_climbing_absolute_and_duplicate_paths_are_refused() {
        use tar::EntryType::{Block, Char, Fifo, Link, Regular, Symlink};
        for kind in [Symlink, Link, Char, Block, Fifo] {
            let (_t, r) = unpacked(&[("x", kind, b"")]);
            assert_eq!(
                r.err().map(|e| e.code()),
                Some(STAGE_COPILOT_CACHE),
                "{kind:?}"
            );
        }
        for path in ["../x", "a/../../x", "/etc/x", "a/\u{1b}x"] {
            let (t, r) = unpacked(&[(path, Regular, b"x")]);
            assert_eq!(
                r.err().map(|e| e.code()),
                Some(STAGE_COPILOT_CACHE),
                "{path}"
            );
            assert!(!t.path().join("x").exists(), "{path}");
        }
        let (_t, r) = unpacked(&[("a", Regular, b"1"), ("./a", Regular, b"2")]);
        assert_eq!(r.err().map(|e| e.code()), Some(STAGE_COPILOT_CACHE));
    }

    #[test]
    fn gnu_long_names_and_pax_headers_are_refused_unread() {
        use tar::EntryType::{GNULongName, XGlobalHeader, XHeader};
        // A name longer than ustar holds: the builder writes a GNU
        // long-name entry first, which is never merged or buffered.
        let mut b = tar::Builder::new(Vec::new());
        let mut h = header(tar::EntryType::Regular, 1, 0o644);
        b.append_data(&mut h, "d/".repeat(200) + "f", &b"x"[..])
            .expect("append");
        let long = b.into_inner().expect("finish");
        let t = tempfile::tempdir().expect("tempdir");
        let root = make_dir(&t.path().join("c")).expect("root");
        let r = unpack(long.as_slice(), root.as_fd());
        assert_eq!(r.err().map(|e| e.code()), Some(STAGE_COPILOT_CACHE));
        for kind in [GNULongName, XHeader, XGlobalHeader] {
            let (_t, r) = unpacked(&[("x", kind, b"20 path=a/../../x\n")]);
            assert_eq!(
                r.err().map(|e| e.code()),
                Some(STAGE_COPILOT_CACHE),
                "{kind:?}"
            );
        }
    }

    #[test]
    fn a_link_planted_under_the_root_is_not_followed() {
        use tar::EntryType::Regular;
        let t = tempfile::tempdir().expect("tempdir");
        let root = make_dir(&t.path().join("c")).expect("root");
        std::fs::create_dir(t.path().join("elsewhere")).expect("mkdir");
        std::os::unix::fs::symlink(t.path().join("elsewhere"), t.path().join("c/d")).expect("ln");
        let r = unpack(stream(&[("d/f", Regular, b"x")]).as_slice(), root.as_fd());
        assert!(r.is_err());
        assert!(!t.path().join("elsewhere/f").exists());
    }

    #[test]
    fn not_a_tar_stream_is_refused() {
        let t = tempfile::tempdir().expect("tempdir");
        let root = make_dir(&t.path().join("c")).expect("root");
        let r = unpack(&[1u8; 700][..], root.as_fd());
        assert_eq!(r.err().map(|e| e.code()), Some(STAGE_COPILOT_CACHE));
    }
}
