//! The scripted model endpoint (`tests/model_stub/stub.py`) on host
//! loopback, killed on drop.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The stub; killed on drop.
pub(crate) struct Stub {
    child: std::process::Child,
    /// The loopback port it listens on.
    pub(crate) port: u16,
    /// Its request log (one JSON line per request).
    pub(crate) log: PathBuf,
}

impl Drop for Stub {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the stub with `extra` arguments, logging into `dir`.
pub(crate) fn start(dir: &Path, extra: &[&str]) -> Stub {
    let log = dir.join("requests.jsonl");
    let mut child = Command::new("/usr/bin/python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/model_stub/stub.py"))
        .args(extra)
        .args(["--port", "0", "--log"])
        .arg(&log)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut first = String::new();
    let out = child.stdout.take().expect("stdout");
    std::io::BufReader::new(out)
        .read_line(&mut first)
        .expect("the stub's port");
    let port = first.trim().parse().expect("a port");
    Stub { child, port, log }
}
