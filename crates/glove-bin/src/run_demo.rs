//! `glove run demo`: a contained agent whose MCP tool calls are mediated,
//! in one command, with nothing to install.
//!
//! In a new private temporary directory (mode 0700 from its creation) it
//! writes a file to read and an MCP profile; the audit journal and the pin
//! file go there too. (`glove run` keeps its sockets in its own runtime
//! directory, removed when it ends.) The profile's one upstream, `demo`, is this
//! same binary as a small stdio MCP server (`glove mcp-demo-server`, on the
//! host like every upstream) with three tools: `echo`, `read_file` and
//! `delete_files` (which the policy does not allow; it only says what it
//! would do). It then runs
//! `glove run` with that profile, a new audit journal and a new pin file,
//! and as the contained command the scripted agent `glove mcp-demo-agent`
//! (the binary the sandbox already has at `/run/glove/bin/glove`). The
//! agent starts its stdio server the way a harness does, from the relay
//! `glove run` hands it, lists the tools it is shown, and makes five calls:
//! two that are allowed and three that the policy refuses (an argument
//! over its length rule, a path climbing out of the root, a tool that is
//! not allowed); the three refused never reach the server. Last, the audit
//! journal is shown (`glove audit show`). The directory is removed at the
//! end, also when SIGINT, SIGTERM or SIGHUP stops the demo (they are passed
//! to `glove run`, which passes them to the agent); not after SIGKILL.

use glove_mcp::demo::NOTE;
use serde_json::json;
use std::io::Write;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::process::Command;

/// The demo's wall-time limit: it takes well under a second.
const WALL_MS: &str = "60000";

/// `println!` that ignores a closed standard output (`… | head`).
macro_rules! out {
    ($($t:tt)*) => {{
        let _ = writeln!(std::io::stdout().lock(), $($t)*);
    }};
}

/// The demo's directory, removed when dropped.
struct Dir(crate::demo::TempDir);

impl Dir {
    fn path(&self) -> &Path {
        &self.0 .0
    }
}

fn fail(msg: impl std::fmt::Display) -> i32 {
    eprintln!("glove run demo: {msg}");
    1
}

/// Creates `p` (mode 0600), never following a link nor reusing a file.
fn write_new(p: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(open_flags::NOFOLLOW)
        .open(p)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// Open flags, as the platform numbers them.
mod open_flags {
    pub(super) const NOFOLLOW: i32 = rustix::fs::OFlags::NOFOLLOW.bits() as i32;
}

/// `glove run demo`.
pub fn run(json_out: bool) -> i32 {
    let Ok(glove) = std::env::current_exe() else {
        return fail("cannot find this glove binary");
    };
    let dir = match crate::demo::TempDir::with_prefix("glove-run-demo-") {
        Ok(d) => Dir(d),
        Err(e) => return fail(format!("temporary directory: {e}")),
    };
    let root = dir.path().join("files");
    let setup = std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&root)
        .and_then(|()| write_new(&root.join("notes.txt"), NOTE.as_bytes()));
    if let Err(e) = setup {
        return fail(format!("setting up {}: {e}", dir.path().display()));
    }
    // The profile names this path, which must be the directory itself.
    let Some(roots) = root.to_str().map(str::to_owned) else {
        return fail(format!(
            "the temporary directory {} is not a UTF-8 path (set TMPDIR)",
            root.display()
        ));
    };
    let profile = json!({
        "schema_version": 1,
        "servers": [{
            "server_id": "demo",
            "command": {
                "path": glove.display().to_string(),
                "arguments": ["mcp-demo-server", "--root", roots],
                "environment": [],
                "working_directory": "/",
            },
            "tools": [
                {"name": "echo", "arguments": {"message": {"required": true, "length": {"max": 64}}}},
                {"name": "read_file", "arguments": {"path": {"required": true, "path": {"roots": [roots], "no_symlinks": true}}}},
            ],
        }],
    });
    let profile_path = dir.path().join("profile.json");
    if let Err(e) = write_new(&profile_path, profile.to_string().as_bytes()) {
        return fail(format!("writing the profile: {e}"));
    }
    let audit = dir.path().join("audit.journal");
    if !json_out {
        out!("glove run demo: profile {}", profile_path.display());
        out!("  upstream `demo` (this glove as a stdio MCP server, on the host): echo, read_file, delete_files");
        out!("  allowed: echo (message of at most 64 characters), read_file (paths under {roots}, no links)");
        out!("  the contained agent: /run/glove/bin/glove mcp-demo-agent");
        out!();
    }
    let mut cmd = Command::new(&glove);
    cmd.arg("run")
        .arg("--profile")
        .arg(&profile_path)
        .arg("--audit-journal")
        .arg(&audit)
        .arg("--pins")
        .arg(dir.path().join("pins.json"))
        .args(["--wall-ms", WALL_MS]);
    if json_out {
        cmd.arg("--json");
    }
    cmd.args([
        "--",
        super::run::RELAY_EXECUTABLE,
        "mcp-demo-agent",
        "--root",
        &roots,
    ]);
    if json_out {
        // Standard output is the outcome record alone.
        cmd.arg("--to-stderr");
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return fail(format!("cannot run glove run: {e}")),
    };
    // SIGINT, SIGTERM and SIGHUP go to glove run, and the directory is
    // still removed once it ended.
    let forwarding = i32::try_from(child.id())
        .ok()
        .map(crate::exec::forward_signals);
    let status = child.wait();
    if let Some(f) = forwarding {
        f.store(false, std::sync::atomic::Ordering::SeqCst);
    }
    let code = match status {
        Ok(s) => s
            .code()
            .or_else(|| std::os::unix::process::ExitStatusExt::signal(&s).map(|n| 128 + n))
            .unwrap_or(1),
        Err(e) => return fail(format!("waiting for glove run: {e}")),
    };
    if code == 125 {
        eprintln!(
            "glove run demo: the sandbox could not be started (above); run as root, or allow \
             unprivileged user namespaces (`glove exec -- /bin/true` checks)"
        );
    }
    if code != 0 {
        eprintln!("glove run demo: glove run ended with {code}");
        return code;
    }
    if !json_out {
        out!();
        out!("glove run demo: the audit journal (glove audit show --journal FILE)");
        let shown = Command::new(&glove)
            .args(["audit", "show", "--journal"])
            .arg(&audit)
            .status();
        if !shown.is_ok_and(|s| s.success()) {
            return fail("glove audit show failed");
        }
    }
    0
}
