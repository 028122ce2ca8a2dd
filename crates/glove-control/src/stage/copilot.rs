//! copilot's extracted package cache, produced at stage time.
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
//! Staging runs that mode once, uncontained, on the platform binary being
//! staged, with an empty environment except `HOME` (an empty scratch
//! directory) and `COPILOT_PKG_CACHE_HOME` (the scratch cache), and copies
//! the result into the closure as `pkg-cache/`. A session then sets
//! `COPILOT_PKG_CACHE_HOME=<store>/pkg-cache`, and the cache is used read
//! only: nothing is written.

use glove_types::codes::stage::{STAGE_COPILOT_CACHE, STAGE_IO};
use glove_types::Rejection;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long the extraction may take (it takes about a second here).
pub const EXTRACT_TIMEOUT: Duration = Duration::from_secs(300);

/// A private scratch directory, removed when dropped.
pub(crate) struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    /// The extracted cache (`COPILOT_PKG_CACHE_HOME`).
    pub(crate) fn cache(&self) -> PathBuf {
        self.dir.join("cache")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn failed(m: String) -> Rejection {
    Rejection::new(STAGE_COPILOT_CACHE, m)
}

/// Extracts `executable`'s package cache for `version` into a new scratch
/// directory under `parent`.
pub(crate) fn extract(
    executable: &Path,
    version: &str,
    parent: &Path,
) -> Result<Scratch, Rejection> {
    let name: [u8; 8] = crate::random_bytes()?;
    let dir = parent.join(format!(
        "glove-stage-copilot-{}",
        glove_types::digest::to_hex(&name)
    ));
    let io = |p: &Path, e: std::io::Error| {
        Rejection::new(STAGE_IO, format!("cannot create {}: {e}", p.display()))
    };
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| io(&dir, e))?;
    }
    let scratch = Scratch { dir };
    let home = scratch.dir.join("home");
    std::fs::create_dir(&home).map_err(|e| io(&home, e))?;
    std::fs::create_dir(scratch.cache()).map_err(|e| io(&scratch.cache(), e))?;
    let mut child = Command::new(executable)
        .arg("--binary-version")
        .env_clear()
        .env("HOME", &home)
        .env("COPILOT_PKG_CACHE_HOME", scratch.cache())
        .env("COPILOT_SEA_EXTRACT_ONLY", "1")
        .current_dir(&scratch.dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| failed(format!("cannot run {}: {e}", executable.display())))?;
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if start.elapsed() > EXTRACT_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(failed(format!(
                    "{} did not finish extracting within {} s",
                    executable.display(),
                    EXTRACT_TIMEOUT.as_secs()
                )));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(failed(format!("waiting for the extraction: {e}"))),
        }
    };
    if !status.success() {
        return Err(failed(format!(
            "{} --binary-version (extract only) failed: {status}",
            executable.display()
        )));
    }
    let complete = std::fs::read_dir(scratch.cache().join("pkg"))
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
            "{} left no complete pkg/<platform>/{version} cache",
            executable.display()
        )));
    }
    Ok(scratch)
}
