//! The `glove.service` unit: its fixed text, the checks on the paths it
//! names, and the one way it is written (atomically, mode 0644).
//!
//! The unit has no free parameter but two paths: the `gloved` executable
//! and its protected configuration file. Neither may need quoting or
//! escaping in a unit file (no whitespace, quotes, backslashes, `$` or `%`,
//! which systemd would split, expand or substitute): such a path is
//! refused, not escaped, so the `ExecStart=` line says exactly what runs.
//! Every other line is a constant; `docs/operations.md` ("glove daemon")
//! says why each is there.

use glove_types::codes::daemon::*;
use glove_types::Rejection;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The unit's file name (the unit name is fixed; nothing chooses it).
pub const UNIT_NAME: &str = "glove.service";

/// The first line of every unit this module writes: how `install` and
/// `uninstall` tell their own unit from someone else's.
pub const MARKER: &str = "# Written by `glove daemon install`";

/// Largest unit file read back (ours is well under 2 KiB).
const MAX_UNIT_BYTES: u64 = 64 * 1024;

/// Which service manager instance the unit belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The user's own manager (`systemctl --user`), for a non-root user.
    User,
    /// The system manager, for root.
    System,
}

impl Scope {
    /// `user` or `system`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::User => "user",
            Scope::System => "system",
        }
    }
}

/// Characters a path in the unit may hold: none of them is special to
/// systemd's command-line parsing (splitting, quoting, C escapes, `$`
/// variables, `%` specifiers, `;` separators).
fn plain(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | '+' | ',' | ':' | '@' | '=')
}

/// `path` as it may appear in the unit: absolute, normalized (no `.`,
/// `..`, `//` or trailing `/`), UTF-8, plain characters only.
pub fn unit_path<'a>(what: &str, path: &'a Path) -> Result<&'a str, Rejection> {
    let shown = path.display();
    let refuse = |why: &str| {
        Rejection::new(
            DAEMON_PATH_UNSUPPORTED,
            format!("{what} {shown} cannot be named in a unit file: {why}"),
        )
    };
    let s = path.to_str().ok_or_else(|| refuse("it is not UTF-8"))?;
    if !path.is_absolute() {
        return Err(refuse("it is not absolute"));
    }
    // Component by component on the text: `Path::components` would hide a
    // `.` in the middle and a doubled `/`.
    let normal = s
        .split('/')
        .skip(1)
        .all(|seg| !seg.is_empty() && seg != "." && seg != "..");
    if !normal {
        return Err(refuse("it is not normalized (., .., // or a trailing /)"));
    }
    if let Some(c) = s.chars().find(|c| !plain(*c)) {
        return Err(refuse(&format!(
            "it holds {c:?}; a unit names only paths of ASCII letters, digits and / . _ - + , : @ = (systemd would split, expand or unescape others)"
        )));
    }
    Ok(s)
}

/// The unit text for `gloved` at `gloved` reading `config`, in `scope`.
pub fn render(scope: Scope, gloved: &Path, config: &Path) -> Result<String, Rejection> {
    let exe = unit_path("the gloved executable", gloved)?;
    let cfg = unit_path("the gloved configuration", config)?;
    let mut u = String::new();
    u.push_str(MARKER);
    u.push_str("; it rewrites this file on install and removes it on uninstall.\n");
    u.push_str("# Why each line is here: docs/operations.md, \"glove daemon\".\n");
    u.push_str("[Unit]\nDescription=Glove control service (gloved)\n\n[Service]\n");
    u.push_str("Type=exec\n");
    u.push_str(&format!("ExecStart={exe} --config {cfg}\n"));
    u.push_str("Restart=on-failure\nRestartSec=2\n");
    u.push_str("KillMode=mixed\nTimeoutStopSec=30\n");
    u.push_str("Delegate=cpu memory pids\n");
    // Only a delegated unit may move gloved into its own leaf and enable
    // controllers for the sessions (crates/glove-sandbox/src/cgroup_leaf.rs).
    u.push_str("Environment=GLOVE_CGROUP_DELEGATED=1\n");
    // A user manager can only make a user namespace that maps the user
    // alone, where root's files look unowned and every launch-path
    // ownership check would fail closed: the user unit runs in the user's
    // own namespaces, each session in its own (docs/operations.md).
    if scope == Scope::System {
        u.push_str("PrivateMounts=yes\n");
    }
    u.push_str("NoNewPrivileges=yes\nUMask=0077\nLimitCORE=0\n");
    u.push_str("\n[Install]\n");
    u.push_str(match scope {
        Scope::User => "WantedBy=default.target\n",
        Scope::System => "WantedBy=multi-user.target\n",
    });
    Ok(u)
}

/// Why `path` (a file or a directory) and the directories above it are not
/// safe: each must be owned by root or the caller and writable by nobody
/// else (a symbolic link on the way is looked at itself, not followed;
/// callers pass canonical paths).
pub fn unsafe_reasons(path: &Path) -> Vec<String> {
    glove_control::harness::unsafe_reasons(path)
}

/// Checks the `gloved` executable at canonical path `exe`.
pub fn check_gloved(exe: &Path) -> Result<(), Rejection> {
    let shown = exe.display();
    let m = std::fs::symlink_metadata(exe).map_err(|e| {
        Rejection::new(
            DAEMON_GLOVED_NOT_FOUND,
            format!("cannot inspect the gloved executable {shown}: {e}"),
        )
    })?;
    let mut why = Vec::new();
    if !m.file_type().is_file() {
        why.push(format!("{shown} is not a regular file"));
    } else if m.mode() & 0o111 == 0 {
        why.push(format!("{shown} is not executable"));
    }
    why.extend(unsafe_reasons(exe));
    if why.is_empty() {
        Ok(())
    } else {
        Err(Rejection::new(
            DAEMON_GLOVED_UNSAFE,
            format!(
                "the gloved executable is not safe to run: {}",
                why.join("; ")
            ),
        ))
    }
}

/// What is at the unit path now.
#[derive(Debug, PartialEq, Eq)]
pub enum Existing {
    /// Nothing.
    Absent,
    /// A unit this module wrote, with its text and permission bits.
    Ours {
        /// The unit's text.
        text: String,
        /// Its permission bits.
        mode: u32,
    },
    /// Something else (another unit, a link, a directory): left alone.
    Foreign(String),
}

/// Looks at the unit path without following a final symbolic link.
pub fn existing(unit: &Path) -> Result<Existing, Rejection> {
    let shown = unit.display();
    let io =
        |e: std::io::Error| Rejection::new(DAEMON_UNIT_IO, format!("cannot read {shown}: {e}"));
    let m = match std::fs::symlink_metadata(unit) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Existing::Absent),
        Err(e) => return Err(io(e)),
        Ok(m) => m,
    };
    if !m.file_type().is_file() {
        return Ok(Existing::Foreign(format!("{shown} is not a regular file")));
    }
    if m.len() > MAX_UNIT_BYTES {
        return Ok(Existing::Foreign(format!(
            "{shown} is larger than any unit glove writes"
        )));
    }
    let text = std::fs::read_to_string(unit).map_err(io)?;
    if !text.starts_with(MARKER) {
        return Ok(Existing::Foreign(format!(
            "{shown} was not written by glove daemon install"
        )));
    }
    Ok(Existing::Ours {
        text,
        mode: m.mode() & 0o7777,
    })
}

/// Writes `text` to `unit` whole: a fresh sibling (`O_EXCL`, mode 0644),
/// `fsync`, `rename` over the name, `fsync` of the directory. A reader
/// (systemd) sees the old unit or the new one, never a mix. (The journal
/// crate's writer makes owner-only files; a unit must be readable by the
/// manager, hence this small twin.)
pub fn write_atomically(unit: &Path, text: &str) -> Result<(), Rejection> {
    let dir = unit.parent().unwrap_or(Path::new("/"));
    let name = unit
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(UNIT_NAME);
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let fail = |step: &str, e: std::io::Error| {
        Rejection::new(
            DAEMON_UNIT_IO,
            format!("cannot {step} {}: {e}", unit.display()),
        )
    };
    // A leftover of this same pid (a crash between create and rename of an
    // earlier process with this pid) is ours to replace.
    let _ = std::fs::remove_file(&tmp);
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&tmp)
            .map_err(|e| fail("create a temporary file beside", e))?;
        // The umask may have taken bits away: set them exactly.
        f.set_permissions(std::fs::Permissions::from_mode(0o644))
            .map_err(|e| fail("set the mode of the temporary file for", e))?;
        f.write_all(text.as_bytes())
            .map_err(|e| fail("write the temporary file for", e))?;
        f.sync_all()
            .map_err(|e| fail("sync the temporary file for", e))?;
        std::fs::rename(&tmp, unit).map_err(|e| fail("rename the temporary file to", e))?;
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| fail("sync the directory of", e))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Removes the unit file and syncs its directory.
pub fn remove(unit: &Path) -> Result<(), Rejection> {
    let fail = |e: std::io::Error| {
        Rejection::new(
            DAEMON_UNIT_IO,
            format!("cannot remove {}: {e}", unit.display()),
        )
    };
    std::fs::remove_file(unit).map_err(fail)?;
    std::fs::File::open(unit.parent().unwrap_or(Path::new("/")))
        .and_then(|d| d.sync_all())
        .map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_needing_escapes_are_refused_not_escaped() {
        for bad in [
            "rel/gloved",
            "/a b/gloved",
            "/a/$HOME/gloved",
            "/a/%h/gloved",
            "/a/\"q\"/gloved",
            "/a/'q'/gloved",
            "/a\\x20/gloved",
            "/a/;/gloved",
            "/a/./gloved",
            "/a/../gloved",
            "/a//gloved",
            "/a/gloved/",
            "/a/\ngloved",
            "/a/tab\tgloved",
            "/a/ü/gloved",
        ] {
            let e = unit_path("x", Path::new(bad)).unwrap_err();
            assert_eq!(e.code(), DAEMON_PATH_UNSUPPORTED, "{bad}");
        }
        for good in [
            "/usr/bin/gloved",
            "/home/a-b/.cargo/bin/gloved",
            "/x/y_z+1,2:3@4=5",
        ] {
            assert_eq!(unit_path("x", Path::new(good)).unwrap(), good);
        }
    }

    #[test]
    fn the_units_mark_delegation_and_only_the_system_unit_has_a_private_mount_namespace() {
        let g = Path::new("/usr/bin/gloved");
        let c = Path::new("/home/a/.config/glove/gloved.json");
        let u = render(Scope::User, g, c).unwrap();
        assert!(u.starts_with(MARKER));
        assert!(
            u.contains("\nExecStart=/usr/bin/gloved --config /home/a/.config/glove/gloved.json\n")
        );
        assert!(!u.contains("PrivateUsers"));
        assert!(!u.contains("PrivateMounts"));
        assert!(u.contains("\nDelegate=cpu memory pids\n"));
        assert!(u.contains("\nEnvironment=GLOVE_CGROUP_DELEGATED=1\n"));
        assert!(u.contains("\nWantedBy=default.target\n"));
        let s = render(Scope::System, g, Path::new("/etc/glove/gloved.json")).unwrap();
        assert!(!s.contains("PrivateUsers"));
        assert!(s.contains("\nPrivateMounts=yes\n"));
        assert!(s.contains("\nWantedBy=multi-user.target\n"));
    }
}
