//! Harness runtimes staged once per test process, shared by the tests that
//! run harnesses in managed sessions.
//!
//! A staged set of the five harnesses is about 1.6 GB. Each test staging its
//! own copy, with the tests running side by side, held three sets at once
//! and filled a CI machine's disk. Here every runtime is staged at most once
//! into one directory while any test holds a [`Lease`]; when the last lease
//! is dropped (a failing test drops its own too) the directory is removed,
//! so the disk holds at most one set per process. Sessions only read a
//! staged runtime, so sharing one between tests changes nothing they see.

use crate::common;
use serde_json::Value;
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

struct Shared {
    users: usize,
    /// Runtime id → its staging report.
    reports: BTreeMap<String, Value>,
}

static SHARED: Mutex<Shared> = Mutex::new(Shared {
    users: 0,
    reports: BTreeMap::new(),
});

fn base() -> PathBuf {
    common::safe_base().join(format!("staged-{}", std::process::id()))
}

fn lock() -> std::sync::MutexGuard<'static, Shared> {
    // A test that panicked while staging leaves the map as it was: the
    // runtime it was staging is simply not in it.
    SHARED.lock().unwrap_or_else(|e| e.into_inner())
}

/// A hold on the shared runtime directory.
pub(crate) struct Lease {
    runtimes: PathBuf,
}

/// Takes a lease: the first one makes the (empty) directory.
pub(crate) fn lease() -> Lease {
    let mut s = lock();
    let d = base();
    if s.users == 0 {
        let _ = std::fs::remove_dir_all(&d);
        s.reports.clear();
        std::fs::create_dir_all(&d).expect("mkdir staged");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    s.users += 1;
    Lease {
        runtimes: d.join("runtimes"),
    }
}

impl Lease {
    /// The runtime directory (`--directory` of `glove policy stage`).
    pub(crate) fn dir(&self) -> &Path {
        &self.runtimes
    }

    /// `glove policy stage --json --runtime RT --source NM --yes` into
    /// [`Lease::dir`], or the report of the earlier staging of RT in this
    /// process. `stage` runs the command and returns its report (the
    /// caller's helper asserts success). The seconds it took are `None`
    /// when the runtime was already staged.
    pub(crate) fn stage(
        &self,
        rt: &str,
        nm: &Path,
        stage: impl FnOnce(&[&str]) -> Value,
    ) -> (Value, Option<f64>) {
        let mut s = lock();
        if let Some(r) = s.reports.get(rt) {
            return (r.clone(), None);
        }
        let t = Instant::now();
        let (rds, nms) = (
            self.runtimes.display().to_string(),
            nm.display().to_string(),
        );
        let report = stage(&[
            "policy",
            "stage",
            "--json",
            "--runtime",
            rt,
            "--source",
            &nms,
            "--directory",
            &rds,
            "--yes",
        ]);
        s.reports.insert(rt.to_owned(), report.clone());
        (report, Some(t.elapsed().as_secs_f64()))
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut s = lock();
        s.users -= 1;
        if s.users == 0 {
            s.reports.clear();
            let _ = std::fs::remove_dir_all(base());
        }
    }
}

/// A fresh directory (mode 0755) under the safe test base, named for this
/// process, removed when dropped (a failing test drops it too).
pub(crate) struct Scratch(PathBuf);

impl Scratch {
    pub(crate) fn new(prefix: &str) -> Scratch {
        let d = common::safe_base().join(format!("{prefix}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("mkdir");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        Scratch(d)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
