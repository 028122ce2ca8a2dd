//! `glove policy stage`: a harness's closure, content-addressed and copied
//! into a protected directory a launch resolver accepts.
//!
//! Package-manager trees are not launch authority (npm's directories are
//! often group-writable or someone else's). Staging reads the runtime's
//! files from an npm install ([`source`]), walks and hashes them into a
//! listing without following links ([`closure`]), and copies them into
//! `D/store/<digest>/` (a temporary directory in `D/store/`, synced, then
//! renamed into place; an existing digest directory is verified instead),
//! then links the entry point `D/bin/<name>` to the executable inside it,
//! relative and never overwriting. What a harness's closure holds is in
//! its file under `glove_types::harness` (its npm layout and `staging`); a
//! harness with a package cache made at stage time (copilot's, [`copilot`])
//! has it produced by the staged copy of its binary run inside a Glove
//! sandbox.
//!
//! [`plan`] does everything that writes nothing to `D` and runs nothing
//! (with a package cache its report covers the closure without the cache,
//! and says so); [`Plan::execute`] is the only step that writes, and for a
//! package cache the only one that runs anything. Nothing here prints: progress goes to
//! a [`Progress`].

pub mod closure;
pub mod copilot;
pub mod source;

use crate::harness::unsafe_reasons;
use closure::Listing;
use glove_types::codes::cli::CLI_INVALID_ARGUMENT;
use glove_types::codes::stage::{
    STAGE_COPILOT_CACHE, STAGE_DIRECTORY_UNSAFE, STAGE_ENTRY_POINT_EXISTS, STAGE_IO,
    STAGE_STORE_MISMATCH,
};
use glove_types::harness::{CacheProducer, Harness, PackageCache};
use glove_types::{Rejection, Sha256Digest};
use serde::Serialize;
use std::path::{Component, Path, PathBuf};

/// Where progress goes (the command line draws a bar on a terminal).
pub trait Progress {
    /// A phase of `total_bytes` begins (`hashing`, `copying`, `verifying`).
    fn phase(&self, name: &'static str, total_bytes: u64);
    /// `bytes` more of the phase are done.
    fn advance(&self, bytes: u64);
}

/// No progress reporting.
pub struct NoProgress;

impl Progress for NoProgress {
    fn phase(&self, _: &'static str, _: u64) {}
    fn advance(&self, _: u64) {}
}

/// What to stage.
#[derive(Clone, Debug)]
pub struct Request {
    /// The runtime id (`codex`, `claude-code`, `pi`, `copilot`, `opencode`).
    pub runtime: String,
    /// An absolute path: the install's `node_modules`, a `.bin` entry, or
    /// the real executable.
    pub source: PathBuf,
    /// The protected directory `D` (absolute).
    pub directory: PathBuf,
    /// `$HOME`, whose harness homes are refused as sources.
    pub home: Option<PathBuf>,
    /// The `glove` binary that runs copilot's extraction contained
    /// (`glove exec`); the caller knows where it is. Staging copilot with
    /// `None` fails (`stage_copilot_cache`) rather than run it uncontained.
    pub glove: Option<PathBuf>,
}

/// What staging did or would do.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The runtime id.
    pub runtime: String,
    /// The version the package declares.
    pub version: String,
    /// The canonical file staged as the executable.
    pub source: String,
    /// The closure digest (`glove.stage.closure.v1`), hex.
    pub digest: String,
    /// `D/store/<digest>`.
    pub store: String,
    /// `D/bin/<name>`.
    pub entry_point: String,
    /// The executable inside the store.
    pub executable: String,
    /// What `glove policy generate --ro` should be given.
    pub read_only_paths: Vec<String>,
    /// What `glove policy generate --env` should be given.
    pub environment: Vec<String>,
    /// Regular files in the closure.
    pub files: usize,
    /// Entries (directories, files, links) in the closure.
    pub entries: usize,
    /// The regular files' bytes.
    pub bytes: u64,
    /// Nothing was written.
    pub dry_run: bool,
    /// The store already held this digest (verified, not rewritten).
    pub already_stored: bool,
    /// The entry point already pointed at this executable.
    pub entry_point_existed: bool,
    /// copilot's package cache is not in this report: a dry run runs
    /// nothing, so the cache (extracted, contained, only when staging) is
    /// left out of `digest`, `files`, `entries` and `bytes`, and `store`,
    /// `executable`, `read_only_paths` and `environment` name the digest
    /// without it; the real stage's differ.
    pub package_cache_pending: bool,
}

/// A planned stage: the closure walked and hashed, `D` checked. Spent by
/// [`Plan::execute`].
#[must_use = "a plan writes nothing until it is executed"]
pub struct Plan {
    harness: &'static Harness,
    listing: Listing,
    report: Report,
    /// The canonical `D`, or where it will be.
    directory: PathBuf,
    executable_in_closure: String,
    /// The package cache still to be made when staging, with the `glove`
    /// binary to contain its producer.
    cache: Option<PendingCache>,
}

/// A package cache (copilot's), made by [`Plan::execute`].
struct PendingCache {
    cache: &'static PackageCache,
    version: String,
    glove: Option<PathBuf>,
}

fn bad_arg(m: String, at: &str) -> Rejection {
    Rejection::new(CLI_INVALID_ARGUMENT, m).at(at)
}

fn io(what: &str, p: &Path, e: &std::io::Error) -> Rejection {
    Rejection::new(STAGE_IO, format!("{what} {}: {e}", p.display()))
}

fn utf8(p: &Path) -> Result<String, Rejection> {
    p.to_str()
        .map(str::to_owned)
        .ok_or_else(|| bad_arg(format!("{} is not UTF-8", p.display()), "directory"))
}

/// `D` made canonical where it exists, and checked: it (or, while it is
/// missing, its nearest existing ancestor) and every ancestor must pass the
/// launch resolver's directory rule.
fn check_directory(d: &Path) -> Result<PathBuf, Rejection> {
    if !d.is_absolute()
        || d.components()
            .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
    {
        return Err(bad_arg(
            "--directory must be an absolute path without . or ..".into(),
            "directory",
        ));
    }
    let mut missing = Vec::new();
    let mut at = d.to_path_buf();
    let existing = loop {
        match std::fs::canonicalize(&at) {
            Ok(c) => break c,
            Err(_) => {
                let Some(name) = at.file_name() else {
                    return Err(bad_arg(
                        format!("{} has no existing ancestor", d.display()),
                        "directory",
                    ));
                };
                missing.push(name.to_owned());
                at.pop();
            }
        }
    };
    if !existing.is_dir() {
        return Err(bad_arg(
            format!("{} is not a directory", existing.display()),
            "directory",
        ));
    }
    let problems = unsafe_reasons(&existing);
    if !problems.is_empty() {
        return Err(Rejection::new(
            STAGE_DIRECTORY_UNSAFE,
            format!(
                "{} is not safe to launch from ({}); choose a directory owned by you or root \
                 that nobody else can write, down from /",
                d.display(),
                problems.join("; ")
            ),
        )
        .at("directory"));
    }
    Ok(missing.iter().rev().fold(existing, |p, n| p.join(n)))
}

/// Whether `D/bin/<name>` exists, and if so whether it is this closure's
/// executable.
enum EntryPoint {
    Missing,
    Same,
}

fn entry_point(entry: &Path, target: &str, executable: &Path) -> Result<EntryPoint, Rejection> {
    let Ok(m) = std::fs::symlink_metadata(entry) else {
        return Ok(EntryPoint::Missing);
    };
    let same = m.file_type().is_symlink()
        && (std::fs::read_link(entry).is_ok_and(|t| t == Path::new(target))
            || matches!(
                (std::fs::canonicalize(entry), std::fs::canonicalize(executable)),
                (Ok(a), Ok(b)) if a == b
            ));
    if same {
        return Ok(EntryPoint::Same);
    }
    let now = std::fs::read_link(entry)
        .map(|t| format!("a link to {}", t.display()))
        .unwrap_or_else(|_| "not a link".into());
    Err(Rejection::new(
        STAGE_ENTRY_POINT_EXISTS,
        format!(
            "{} already exists ({now}) and is not this closure's executable; it is never \
             overwritten: remove it yourself if it is stale, or stage into another directory",
            entry.display()
        ),
    )
    .at("directory"))
}

/// Plans a stage: resolves the source, walks and hashes the closure,
/// checks `D`. Writes nothing to `D`.
pub fn plan(req: &Request, progress: &dyn Progress) -> Result<Plan, Rejection> {
    let l = glove_types::harness::by_id(&req.runtime).ok_or_else(|| {
        bad_arg(
            format!(
                "{:?} is not a runtime staging knows ({})",
                req.runtime,
                glove_types::harness::all()
                    .map(|h| h.id)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            "runtime",
        )
    })?;
    let directory = check_directory(&req.directory)?;
    let src = source::resolve(l, &req.source, req.home.as_deref())?;
    // A package cache is not produced here: nothing from the source tree
    // runs in a plan (it is untrusted, and a dry run must be harmless).
    let cache = l.staging.package_cache.as_ref().map(|cache| PendingCache {
        cache,
        version: src.version.clone(),
        glove: req.glove.clone(),
    });
    let listing = Listing::of_trees(&src.trees, progress)?;
    let mut report = Report {
        runtime: l.id.to_owned(),
        version: src.version,
        source: utf8(&src.executable)?,
        digest: String::new(),
        read_only_paths: Vec::new(),
        store: String::new(),
        entry_point: String::new(),
        executable: String::new(),
        environment: Vec::new(),
        files: 0,
        entries: 0,
        bytes: 0,
        dry_run: true,
        already_stored: false,
        entry_point_existed: false,
        package_cache_pending: cache.is_some(),
    };
    let plan = Plan {
        harness: l,
        listing,
        report: report.clone(),
        directory,
        executable_in_closure: src.executable_in_closure,
        cache,
    };
    plan.describe(&mut report)?;
    if !report.package_cache_pending {
        // With the cache pending the entry point's target is not known
        // yet; staging checks it once it is.
        let target = format!("../store/{}/{}", report.digest, plan.executable_in_closure);
        let (entry, executable) = (
            PathBuf::from(&report.entry_point),
            PathBuf::from(&report.executable),
        );
        report.entry_point_existed =
            matches!(entry_point(&entry, &target, &executable)?, EntryPoint::Same);
        report.already_stored = Path::new(&report.store).is_dir();
    }
    Ok(Plan { report, ..plan })
}

/// Creates `d` (mode 0755) if missing.
fn ensure_dir(d: &Path) -> Result<(), Rejection> {
    match std::fs::symlink_metadata(d) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(bad_arg(
            format!("{} is not a directory", d.display()),
            "directory",
        )),
        Err(_) => {
            if let Some(p) = d.parent() {
                ensure_dir(p)?;
            }
            match std::fs::create_dir(d) {
                Ok(()) => closure::set_mode(d, 0o755),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
                Err(e) => Err(io("cannot create", d, &e)),
            }
        }
    }
}

impl Plan {
    /// Fills `r`'s digest, counts, paths and environment from the listing.
    fn describe(&self, r: &mut Report) -> Result<(), Rejection> {
        let digest = self.listing.digest()?.to_hex();
        let store = self.directory.join("store").join(&digest);
        let store_s = utf8(&store)?;
        let h = self.harness;
        r.environment = h.staging.environment(&h.npm.runs, &store_s);
        r.entry_point = utf8(&self.directory.join("bin").join(h.executable_name))?;
        r.executable = utf8(&store.join(&self.executable_in_closure))?;
        r.read_only_paths = vec![store_s.clone()];
        r.store = store_s;
        r.digest = digest;
        r.files = self.listing.files();
        r.entries = self.listing.entries();
        r.bytes = self.listing.bytes();
        Ok(())
    }

    /// What this plan would do (a dry run's report).
    pub fn report(&self) -> &Report {
        &self.report
    }

    /// The closure digest.
    pub fn digest(&self) -> Result<Sha256Digest, Rejection> {
        self.listing.digest()
    }

    /// Stages: writes the store directory (or verifies the one there) and
    /// links the entry point.
    pub fn execute(self, progress: &dyn Progress) -> Result<Report, Rejection> {
        let d = &self.directory;
        ensure_dir(d)?;
        let store = d.join("store");
        let bin = d.join("bin");
        ensure_dir(&store)?;
        ensure_dir(&bin)?;
        for dir in [d, &store, &bin] {
            let problems = unsafe_reasons(dir);
            if !problems.is_empty() {
                return Err(Rejection::new(
                    STAGE_DIRECTORY_UNSAFE,
                    format!("{} is not safe: {}", dir.display(), problems.join("; ")),
                )
                .at("directory"));
            }
        }
        let mut report = self.report.clone();
        report.dry_run = false;
        let target_dir = store.join(&report.digest);
        let mut plan = self;
        if plan.cache.is_none() && target_dir.exists() {
            plan.listing.verify(&target_dir, progress)?;
            report.already_stored = true;
        } else {
            let tmp_name: [u8; 8] = crate::random_bytes()?;
            let tmp = Tmp(store.join(format!(".tmp-{}", glove_types::digest::to_hex(&tmp_name))));
            std::fs::create_dir(&tmp.0).map_err(|e| io("cannot create", &tmp.0, &e))?;
            closure::set_mode(&tmp.0, 0o755)?;
            plan.listing.write_into(&tmp.0, progress)?;
            if let Some(cache) = plan.cache.take() {
                plan.add_cache(&cache, &tmp.0, progress)?;
                plan.describe(&mut report)?;
                report.package_cache_pending = false;
            }
            let target_dir = store.join(&report.digest);
            let placed = if target_dir.exists() {
                Ok(false)
            } else {
                match std::fs::rename(&tmp.0, &target_dir) {
                    Ok(()) => Ok(true),
                    // Staged concurrently by someone else: verify theirs.
                    Err(_) if target_dir.is_dir() => Ok(false),
                    Err(e) => Err(io("cannot rename into", &target_dir, &e)),
                }
            };
            if placed? {
                closure::sync_dir(&store)?;
                report.already_stored = false;
            } else {
                drop(tmp);
                plan.listing.verify(&target_dir, progress)?;
                report.already_stored = true;
            }
        }
        let hex = report.digest.clone();
        let target_dir = store.join(&hex);
        let entry = bin.join(plan.harness.executable_name);
        let target = format!("../store/{hex}/{}", plan.executable_in_closure);
        let executable = target_dir.join(&plan.executable_in_closure);
        match entry_point(&entry, &target, &executable)? {
            EntryPoint::Same => report.entry_point_existed = true,
            EntryPoint::Missing => {
                // symlink(2) never replaces: a name that appeared since is
                // refused like one that was there.
                match std::os::unix::fs::symlink(&target, &entry) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        entry_point(&entry, &target, &executable)?;
                    }
                    Err(e) => return Err(io("cannot link", &entry, &e)),
                }
                closure::sync_dir(&bin)?;
                report.entry_point_existed = false;
            }
        }
        if std::fs::canonicalize(&entry).ok().as_deref() != Some(executable.as_path()) {
            return Err(Rejection::new(
                STAGE_STORE_MISMATCH,
                format!(
                    "{} does not lead to {}",
                    entry.display(),
                    executable.display()
                ),
            ));
        }
        Ok(report)
    }
}

/// A temporary store directory, removed when dropped unless it was renamed
/// into place.
struct Tmp(PathBuf);

impl Drop for Tmp {
    fn drop(&mut self) {
        if self.0.exists() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl Plan {
    /// Makes the package cache from the staged copy in `tmp`, contained,
    /// in `tmp/<its directory>`, and adds it to the listing (walked and
    /// hashed from what was unpacked).
    fn add_cache(
        &mut self,
        cache: &PendingCache,
        tmp: &Path,
        progress: &dyn Progress,
    ) -> Result<(), Rejection> {
        let dir = cache.cache.directory;
        match cache.cache.producer {
            CacheProducer::CopilotExtractOnly => {
                let glove = cache.glove.as_deref().ok_or_else(|| {
                    Rejection::new(
                        STAGE_COPILOT_CACHE,
                        "no glove binary to contain copilot's extraction; it is never run uncontained",
                    )
                })?;
                copilot::extract_contained(
                    glove,
                    tmp,
                    &self.executable_in_closure,
                    &cache.version,
                )?;
            }
        }
        let listed = Listing::of_dir_at(&tmp.join(dir), dir, progress)?;
        self.listing.merge(listed)
    }
}

/// The closure digest of the tree at `root`, as a copy of it would have:
/// what `docs/digests.md` defines, for its test vector.
pub fn closure_digest(root: &Path) -> Result<Sha256Digest, Rejection> {
    Listing::of_dir(root)?.digest()
}

/// The canonical listing the closure digest of `root` is taken over.
pub fn closure_listing(root: &Path) -> Result<serde_json::Value, Rejection> {
    Ok(Listing::of_dir(root)?.document())
}
