//! Path exposures in the service: the frozen exposure policy, a held
//! descriptor of each of its roots, the exposure journal, and a held
//! descriptor of every live lease's project.
//!
//! * **Enrollment** ([`Exposures::create`], the owner's `exposure_create`):
//!   the project path (canonical, absolute) must lie strictly beneath a
//!   root; it is opened from the root's held descriptor with `openat2`
//!   (`RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
//!   RESOLVE_NO_XDEV`, [`glove_fs::beneath`]), so a link anywhere below the
//!   root (`exposure_path_symlink`) or another file system
//!   (`exposure_path_crosses_mount`) is refused by the kernel, not by a
//!   string check. Its identity (device, inode) goes into the created
//!   record, and the descriptor is kept: a session later copies from that
//!   descriptor, never from the path.
//! * **Startup**: every live lease's project is opened again beneath its
//!   root and must have the recorded identity; one that does not (moved,
//!   replaced) is kept unusable (`exposure_identity_changed`) until the
//!   owner replaces the lease.
//! * **Use** ([`Exposures::check_plan`], [`Exposures::open_for_session`]):
//!   a plan names leases by id and generation; each must be the newest
//!   generation, live, allow the access asked and the plan's template.
//!   Checked when the session is created and again when it starts.
//! * **Catalog** ([`Exposures::catalog`]): the redacted entries only.
//!
//! A sandbox sees an exposure at `/work/<label>` ([`destination`]), as a
//! copy in a tmpfs of the lease mode's byte quota (read-only for
//! `read_only`).

use crate::held::HeldPaths;
use glove_fs::beneath::open_beneath;
use glove_fs::{Errno, OFlags};
use glove_journal::anchor_file::AnchorFile;
use glove_journal::exposure::{ExposureJournal, EXPOSURE_ANCHOR_DOMAIN};
use glove_journal::receipt::ReceiptKey;
use glove_journal::{JournalError, OpenReport};
use glove_types::codes::exposure::*;
use glove_types::exposure::lease::{scope_digest, CreatedRecord, Scope};
use glove_types::exposure::{ExposureMode, ExposurePolicy, LeaseState};
use glove_types::ids::{ExposureId, ExposureLabel, ExposureRootId, RuntimeTemplateId};
use glove_types::plan::PlanExposure;
use glove_types::policy::Access;
use glove_types::Rejection;
use rustix::fd::{AsFd, OwnedFd};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Mutex;

mod params;

pub use params::{CreateParams, RevokeParams, MAX_PARAM_ENTRIES};

/// Most entries one catalog answer lists (the newest generation of each
/// exposure, by id).
pub const MAX_CATALOG: usize = 512;

/// Where an exposure labelled `label` appears inside a sandbox.
pub fn destination(label: &ExposureLabel) -> String {
    format!("/work/{}", label.as_str())
}

/// A project opened for a session: its descriptor and how to materialize it.
#[derive(Debug)]
pub struct OpenedExposure {
    /// The project directory (a duplicate of the held descriptor).
    pub source: OwnedFd,
    /// Where it appears inside the sandbox.
    pub target: String,
    /// Mounted read-only.
    pub read_only: bool,
    /// The copy's byte quota.
    pub max_bytes: u64,
    /// A retained copy (an image kept for `glove diff` and `glove apply`,
    /// filled from [`OpenedExposure::source`]) rather than a tmpfs one.
    pub retained: bool,
    /// The exposure's label (names a retained stage).
    pub label: String,
    /// The project's path on this machine (for the stage record and apply,
    /// which re-open it and check its identity; never sent anywhere).
    pub project: std::path::PathBuf,
}

/// The service's exposures (see the module docs).
#[derive(Debug)]
pub struct Exposures {
    policy: ExposurePolicy,
    /// Each root that could be opened at startup, held for the process
    /// lifetime; a root missing then refuses enrollment beneath it.
    roots: BTreeMap<ExposureRootId, OwnedFd>,
    journal: Mutex<ExposureJournal>,
    /// The project of each live lease, opened beneath its root and checked
    /// against the recorded identity: what sessions copy from.
    projects: Mutex<HashMap<(ExposureId, u64), OwnedFd>>,
    /// Paths the service holds: no exposure may contain or lie in one.
    held: HeldPaths,
}

fn journal_err(path: &Path) -> impl Fn(JournalError) -> Rejection + '_ {
    move |e| {
        Rejection::new(
            e.code(),
            format!("the path-exposure journal {}: {e}", path.display()),
        )
    }
}

fn lock<T>(m: &Mutex<T>) -> Result<std::sync::MutexGuard<'_, T>, Rejection> {
    m.lock().map_err(|_| {
        Rejection::new(
            glove_types::codes::control::CONTROL_INTERNAL,
            "the exposure state is poisoned",
        )
    })
}

/// Opens `rel` beneath the held root `root` as a directory, mapping each
/// refusal to its code.
fn open_project(root: &OwnedFd, rel: &str) -> Result<(OwnedFd, (u64, u64)), Rejection> {
    let fd = open_beneath(root.as_fd(), rel, OFlags::PATH | OFlags::DIRECTORY).map_err(|e| {
        // A link as the last component fails O_DIRECTORY before the link
        // rule: asked again without it, the kernel says which it was.
        let e = match e {
            Errno::NOTDIR => match open_beneath(root.as_fd(), rel, OFlags::PATH) {
                Err(Errno::LOOP) => Errno::LOOP,
                Ok(fd)
                    if glove_fs::facts(fd.as_fd()).map(|f| f.kind)
                        == Ok(glove_fs::FileType::Symlink) =>
                {
                    Errno::LOOP
                }
                _ => Errno::NOTDIR,
            },
            other => other,
        };
        let (code, why) = match e {
            Errno::LOOP => (
                EXPOSURE_PATH_SYMLINK,
                "a component below the root is a symbolic link",
            ),
            Errno::XDEV => (
                EXPOSURE_PATH_CROSSES_MOUNT,
                "the path crosses onto another file system",
            ),
            Errno::NOENT => (EXPOSURE_PATH_NOT_FOUND, "the project does not exist"),
            Errno::NOTDIR => (
                EXPOSURE_PATH_NOT_DIRECTORY,
                "the project (or a component) is not a directory",
            ),
            _ => (
                EXPOSURE_PATH_IO,
                "the project could not be opened beneath its root",
            ),
        };
        Rejection::new(code, format!("{why} ({e})"))
    })?;
    let st = rustix::fs::fstat(&fd)
        .map_err(|e| Rejection::new(EXPOSURE_PATH_IO, format!("fstat: {e}")))?;
    if st.st_nlink == 0 {
        return Err(Rejection::new(
            EXPOSURE_PATH_NOT_FOUND,
            "the project was removed",
        ));
    }
    Ok((fd, (st.st_dev, st.st_ino)))
}

/// A random exposure id: `e` and 20 hex digits.
fn new_id() -> Result<ExposureId, Rejection> {
    let b: [u8; 10] = crate::random_bytes()?;
    ExposureId::new(format!("e{}", glove_types::digest::to_hex(&b)))
}

/// A label from the project's last component (`project` when nothing is
/// left once made an identifier).
fn default_label(path: &str) -> ExposureLabel {
    let last = path.rsplit('/').next().unwrap_or_default();
    let s: String = last
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .skip_while(|c| !c.is_ascii_alphanumeric())
        .take(64)
        .collect();
    ExposureLabel::new(s).unwrap_or_else(|_| ExposureLabel::new("project").expect("a valid label"))
}

impl Exposures {
    /// Loads the policy (a protected file), opens its roots, opens or
    /// creates the journal (anchored with `key`) and re-opens every live
    /// lease's project.
    pub fn load(
        policy_path: &Path,
        journal_path: &Path,
        key: ReceiptKey,
        held: HeldPaths,
        now_ms: u64,
    ) -> Result<(Exposures, Option<OpenReport>), Rejection> {
        let bytes = crate::protected::read(policy_path, crate::protected::Requirements::POLICY)?;
        let policy = ExposurePolicy::decode(&bytes).map_err(|r| {
            let msg = format!(
                "the path-exposure policy {} is invalid: {}",
                policy_path.display(),
                r.message()
            );
            Rejection::new(r.code(), msg).at(r.location())
        })?;
        let mut roots = BTreeMap::new();
        for r in policy.roots() {
            match glove_fs::unconfined::open_dir_no_links(Path::new(r.path())) {
                Ok(fd) => {
                    roots.insert(r.id().clone(), fd);
                }
                Err(e) => {
                    tracing::warn!(root = r.id().as_str(), error = %e, "an exposure root could not be opened; nothing can be enrolled beneath it")
                }
            }
        }
        let anchor = AnchorFile::beside(journal_path, key, EXPOSURE_ANCHOR_DOMAIN)
            .map_err(journal_err(journal_path))?;
        let (journal, report) = if journal_path.symlink_metadata().is_ok() {
            let (j, r) = ExposureJournal::open(journal_path, Some(anchor))
                .map_err(journal_err(journal_path))?;
            (j, Some(r))
        } else {
            (
                ExposureJournal::create(journal_path, Some(anchor))
                    .map_err(journal_err(journal_path))?,
                None,
            )
        };
        let mut projects = HashMap::new();
        for lease in journal.leases().newest() {
            if lease.state(now_ms) != LeaseState::Live {
                continue;
            }
            let rec = lease.record();
            let opened = roots
                .get(&rec.root_id)
                .ok_or_else(|| Rejection::new(EXPOSURE_PATH_NOT_FOUND, "the root is gone"))
                .and_then(|root| open_project(root, &rec.relative_path));
            match opened {
                Ok((fd, id)) if id == (rec.dev, rec.ino) => {
                    projects.insert((rec.exposure_id.clone(), rec.generation), fd);
                }
                Ok(_) => tracing::warn!(exposure = rec.exposure_id.as_str(), "the exposed project is not the directory recorded; the lease is unusable until replaced"),
                Err(e) => tracing::warn!(exposure = rec.exposure_id.as_str(), code = e.code().as_str(), "{}", e.message()),
            }
        }
        Ok((
            Exposures {
                policy,
                roots,
                journal: Mutex::new(journal),
                projects: Mutex::new(projects),
                held,
            },
            report,
        ))
    }

    /// `exposure_create` (owner only; the caller checked): enrolls the
    /// project `p.path` (see the module docs). Messages may name the path:
    /// only the owner sees them.
    pub fn create(&self, p: &CreateParams, now_ms: u64) -> Result<Value, Rejection> {
        glove_types::paths::check_canonical(&p.path).map_err(|r| {
            Rejection::new(EXPOSURE_PATH_INVALID, r.message().to_owned()).at("path")
        })?;
        let (root, rel) = self.policy.locate(&p.path)?.ok_or_else(|| {
            Rejection::new(
                EXPOSURE_PATH_OUTSIDE_ROOTS,
                format!("{} lies beneath no exposure root", p.path),
            )
        })?;
        let root_fd = self.roots.get(root.id()).ok_or_else(|| {
            Rejection::new(
                EXPOSURE_PATH_NOT_FOUND,
                format!(
                    "the exposure root {} could not be opened when gloved started",
                    root.id()
                ),
            )
        })?;
        let (fd, identity) = open_project(root_fd, &rel)
            .map_err(|r| Rejection::new(r.code(), format!("{}: {}", p.path, r.message())))?;
        let label = match &p.label {
            Some(l) => ExposureLabel::new(l.clone()).map_err(|r| r.at("label"))?,
            None => default_label(&p.path),
        };
        self.held
            .check_grant(label.as_str(), &p.path)
            .map_err(|_| {
                Rejection::new(
                    EXPOSURE_PATH_PROTECTED,
                    format!("{} holds or lies in a path the service keeps", p.path),
                )
            })?;
        let modes = p.modes(root.modes())?;
        let ttl = p.ttl_secs.unwrap_or(root.max_ttl_secs());
        if ttl == 0 || ttl > root.max_ttl_secs() {
            return Err(Rejection::new(
                EXPOSURE_TTL_INVALID,
                format!("ttl_secs must lie in 1..={}", root.max_ttl_secs()),
            )
            .at("ttl_secs"));
        }
        let runtimes = p.runtimes(self.policy.runtime_templates())?;
        let mut journal = lock(&self.journal)?;
        let (exposure_id, generation) = match journal.leases().next_for(root.id(), &rel) {
            Some(x) => x,
            None => (new_id()?, 1),
        };
        let nonce: [u8; 16] = crate::random_bytes()?;
        let scope = Scope {
            exposure_id: &exposure_id,
            generation,
            label: &label,
            root_id: root.id(),
            relative_path: &rel,
            identity,
            nonce: &nonce,
        };
        let rec = CreatedRecord {
            scope_digest: scope_digest(&scope)?,
            exposure_id: exposure_id.clone(),
            generation,
            scope_nonce: nonce,
            label,
            modes,
            created_at_ms: now_ms,
            expires_at_ms: now_ms.saturating_add(ttl.saturating_mul(1000)),
            runtimes,
            root_id: root.id().clone(),
            relative_path: rel,
            dev: identity.0,
            ino: identity.1,
        };
        let lease = journal
            .grant(rec, p.replace.unwrap_or(false), now_ms)
            .map_err(|e| match e {
                JournalError::Invalid { rejection, .. } => rejection,
                other => Rejection::new(other.code(), other.to_string()),
            })?;
        let entry = lease.catalog(now_ms);
        let dest = destination(&entry.label);
        let mut projects = lock(&self.projects)?;
        projects.retain(|(id, _), _| id != &exposure_id);
        projects.insert((exposure_id, generation), fd);
        tracing::info!(
            exposure = entry.exposure_id.as_str(),
            generation,
            "exposure created"
        );
        Ok(json!({"exposure": entry.to_json(), "destination": dest}))
    }

    /// `exposure_revoke` (owner only; the caller checked).
    pub fn revoke(&self, p: &RevokeParams, now_ms: u64) -> Result<Value, Rejection> {
        let id = ExposureId::new(p.exposure_id.clone()).map_err(|r| r.at("exposure_id"))?;
        let mut journal = lock(&self.journal)?;
        if let (Some(g), Some(newest)) = (p.generation, journal.leases().generations(&id).last()) {
            if newest.record().generation != g {
                return Err(Rejection::new(
                    EXPOSURE_GENERATION_STALE,
                    format!(
                        "exposure {id} is at generation {}, not {g}",
                        newest.record().generation
                    ),
                )
                .at("generation"));
            }
        }
        let lease = journal.revoke(&id, now_ms).map_err(|e| match e {
            JournalError::Invalid { rejection, .. } => rejection,
            other => Rejection::new(other.code(), other.to_string()),
        })?;
        let entry = lease.catalog(now_ms);
        lock(&self.projects)?.retain(|(x, _), _| x != &id);
        tracing::info!(
            exposure = id.as_str(),
            generation = entry.generation,
            "exposure revoked"
        );
        Ok(json!({"exposure": entry.to_json()}))
    }

    /// `exposure_catalog`: the newest generation of each exposure, redacted.
    pub fn catalog(&self, now_ms: u64) -> Result<Value, Rejection> {
        let journal = lock(&self.journal)?;
        let all: Vec<Value> = journal
            .leases()
            .newest()
            .map(|l| l.catalog(now_ms).to_json())
            .collect();
        let more = all.len().saturating_sub(MAX_CATALOG);
        let shown: Vec<Value> = all.into_iter().take(MAX_CATALOG).collect();
        Ok(json!({"exposures": shown, "omitted": more}))
    }

    /// Whether the plan's exposures may be used by `template` at `now_ms`
    /// (see the module docs). Messages name exposure ids only.
    pub fn check_plan(
        &self,
        exposures: &[PlanExposure],
        template: &RuntimeTemplateId,
        now_ms: u64,
    ) -> Result<Vec<(CreatedRecord, ExposureMode)>, Rejection> {
        let journal = lock(&self.journal)?;
        let mut out: Vec<(CreatedRecord, ExposureMode)> = Vec::with_capacity(exposures.len());
        for (i, e) in exposures.iter().enumerate() {
            let at = format!("path_exposures[{i}]");
            let rec = journal
                .leases()
                .usable(&e.exposure_id, e.generation, now_ms)
                .map_err(|r| r.at(&at))?;
            if !self.policy.runtime_templates().contains(template)
                || !rec.runtimes.contains(template)
            {
                return Err(Rejection::new(
                    EXPOSURE_RUNTIME_NOT_ALLOWED,
                    format!(
                        "exposure {} may not be used by template {template}",
                        e.exposure_id
                    ),
                )
                .at(&at));
            }
            let mode = *rec.mode(e.access).ok_or_else(|| {
                Rejection::new(
                    EXPOSURE_ACCESS_NOT_ALLOWED,
                    format!(
                        "exposure {} does not allow {}",
                        e.exposure_id,
                        e.access.as_str()
                    ),
                )
                .at(format!("{at}.access"))
            })?;
            if out.iter().any(|(r, _)| r.label == rec.label) {
                return Err(Rejection::new(
                    EXPOSURE_LABEL_CONFLICT,
                    format!("two exposures are labelled {}", rec.label),
                )
                .at(&at));
            }
            out.push((rec.clone(), mode));
        }
        Ok(out)
    }

    /// The plan's exposures, checked again and opened for a session: each
    /// project's held descriptor (duplicated), its identity checked against
    /// the record once more.
    pub fn open_for_session(
        &self,
        exposures: &[PlanExposure],
        template: &RuntimeTemplateId,
        now_ms: u64,
    ) -> Result<Vec<OpenedExposure>, Rejection> {
        let checked = self.check_plan(exposures, template, now_ms)?;
        let projects = lock(&self.projects)?;
        let mut out = Vec::with_capacity(checked.len());
        for (rec, mode) in checked {
            let changed = || {
                Rejection::new(
                    EXPOSURE_IDENTITY_CHANGED,
                    format!(
                        "exposure {} no longer names the directory it was granted for (it was moved, replaced or applied to); `glove init --replace` grants the directory there now",
                        rec.exposure_id
                    ),
                )
            };
            let held = projects
                .get(&(rec.exposure_id.clone(), rec.generation))
                .ok_or_else(changed)?;
            let st = rustix::fs::fstat(held).map_err(|_| changed())?;
            if (st.st_dev, st.st_ino) != (rec.dev, rec.ino) || st.st_nlink == 0 {
                return Err(changed());
            }
            // The project's place beneath its root must still be this very
            // directory: one moved away, replaced (an apply swaps in a new
            // directory) or deleted is not exposed from its old inode.
            let here = self
                .roots
                .get(&rec.root_id)
                .ok_or_else(changed)
                .and_then(|root| open_project(root, &rec.relative_path).map_err(|_| changed()))?;
            if here.1 != (rec.dev, rec.ino) {
                return Err(Rejection::new(
                    EXPOSURE_IDENTITY_CHANGED,
                    format!(
                        "exposure {} no longer names the directory it was granted for (it was moved, replaced or applied to); `glove init --replace` grants the directory there now",
                        rec.exposure_id
                    ),
                ));
            }
            let source = rustix::io::fcntl_dupfd_cloexec(held, 3)
                .map_err(|e| Rejection::new(EXPOSURE_COPY_FAILED, format!("dup: {e}")))?;
            let project = self
                .policy
                .roots()
                .iter()
                .find(|r| r.id() == &rec.root_id)
                .map(|r| std::path::Path::new(r.path()).join(&rec.relative_path))
                .ok_or_else(changed)?;
            out.push(OpenedExposure {
                source,
                target: destination(&rec.label),
                read_only: mode.access == Access::ReadOnly,
                max_bytes: mode.max_bytes,
                retained: mode.access == Access::RetainedWrite,
                label: rec.label.as_str().to_owned(),
                project,
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
