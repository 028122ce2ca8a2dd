//! `glove setup`: everything a managed service needs on this machine, made
//! once, in the places [`crate::layout`] names.
//!
//! It makes the configuration, state and runtime directories (mode 0700),
//! the receipt key and the start-authorization key (32 bytes from the OS
//! RNG, mode 0600), the owner's apply signing key (and, for root, the apply
//! trust policy naming it), a starter session policy, the path-exposure
//! policy when `--path-root` is given, and `gloved.json`, the file
//! `gloved --config` reads. A file that exists is checked and kept: a key or
//! a policy is never overwritten (`--rotate-keys` moves keys aside and
//! makes new ones). A second run changes nothing and says so.

mod files;
mod policy;

use crate::layout::Layout;
use crate::report::{print_json, EXIT_OK};
use clap::Args;
use files::{create_new, private_dir, Action, Item};
use glove_types::codes::cli::{SETUP_KEY_INVALID, SETUP_NO_HOME};
use glove_types::ids::TrustKeyId;
use glove_types::Rejection;
use rustix::fd::OwnedFd;
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Arguments of `glove setup`.
#[derive(Debug, Args)]
pub struct SetupArgs {
    /// A directory to look for agent harnesses in, e.g. an npm
    /// `node_modules/.bin` (repeatable; the first one with a harness wins).
    /// Each found is staged into the state directory and given a template.
    #[arg(long = "search-path", value_name = "DIR")]
    pub search_paths: Vec<PathBuf>,
    /// A directory under which `glove init` may expose projects to
    /// sessions (repeatable; absolute; it must exist).
    #[arg(long = "path-root", value_name = "DIR")]
    pub path_roots: Vec<PathBuf>,
    /// Make new keys, moving each old one aside (`<name>.old-<seconds>`).
    /// The receipt key is kept while a receipt journal exists: the journal's
    /// receipts are authenticated with it.
    #[arg(long)]
    pub rotate_keys: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// What a run made, for the report.
struct Run {
    layout: Layout,
    items: Vec<Item>,
    rotate: bool,
}

impl Run {
    fn push(&mut self, what: &'static str, path: &Path, action: Action, note: Option<String>) {
        self.items.push(Item {
            what,
            path: path.display().to_string(),
            action,
            note,
        });
    }

    fn dir(&mut self, what: &'static str, path: &Path) -> Result<OwnedFd, Rejection> {
        let (fd, action) = private_dir(path, what)?;
        self.push(what, path, action, None);
        Ok(fd)
    }

    /// A 32-byte hex key, made if missing, checked if present.
    fn hex_key(
        &mut self,
        what: &'static str,
        dir: &OwnedFd,
        path: &Path,
        rotate: bool,
    ) -> Result<(), Rejection> {
        let mut action = Action::Created;
        let mut note = None;
        if files::exists(path) {
            let bytes = files::read_protected(path, 128)?;
            if !files::is_hex_key(&bytes) {
                return Err(Rejection::new(
                    SETUP_KEY_INVALID,
                    format!(
                        "{} is not 64 lowercase hex digits; move it away and run glove setup again",
                        path.display()
                    ),
                ));
            }
            if !rotate {
                self.push(what, path, Action::Unchanged, None);
                return Ok(());
            }
            let aside = files::move_aside(path)?;
            action = Action::Rotated;
            note = Some(format!("the old key is {}", aside.display()));
        }
        if !create_new(dir, path, &files::new_hex_key()?, 0o600)? {
            action = Action::Unchanged;
            note = Some("another glove setup made it at the same moment".into());
        }
        self.push(what, path, action, note);
        Ok(())
    }

    /// The apply signing key; for root, the trust policy naming it.
    fn apply_key(&mut self, dir: &OwnedFd) -> Result<Option<PathBuf>, Rejection> {
        use glove_control::apply::{keygen, load_signing_key};
        let path = self.layout.apply_key();
        let trust = self.layout.config.join("apply-trust.json");
        let mut action = Action::Created;
        let mut note = None;
        let key = if files::exists(&path) {
            let key = load_signing_key(&path)?;
            if self.rotate {
                let aside = files::move_aside(&path)?;
                action = Action::Rotated;
                note = Some(format!("the old key is {}", aside.display()));
                keygen(&path, key.id().clone())?
            } else {
                action = Action::Unchanged;
                key
            }
        } else {
            keygen(&path, TrustKeyId::new("owner")?)?
        };
        self.push("apply signing key", &path, action, note);
        if !self.layout.root {
            // Only root can make the trust policy gloved accepts; it goes in
            // a directory of its own, apart from root's /etc/glove (0700).
            let uid = rustix::process::geteuid().as_raw();
            let installed = PathBuf::from(format!("/etc/glove-trust/uid-{uid}.json"));
            if files::exists(&installed) {
                self.push("apply trust policy", &installed, Action::Unchanged, None);
                return Ok(Some(installed));
            }
            self.push(
                "apply trust policy",
                &installed,
                Action::Skipped,
                Some(format!(
                    "root installs it: glove apply trust-policy | sudo install -D -m 0644 \
                     -o root -g root /dev/stdin {}; run glove setup again after moving \
                     gloved.json aside, or add \"apply_trust\" to it",
                    installed.display()
                )),
            );
            return Ok(None);
        }
        let bytes = glove_types::Sha256Digest::parse(&key.public_key_hex())
            .map(|d| glove_types::apply::TrustedKey::new(key.id().clone(), *d.as_bytes()))
            .and_then(|k| glove_types::apply::ApplyTrustPolicy::new(vec![k]))
            .and_then(|p| p.encode())?;
        let mut action = Action::Created;
        let mut note = None;
        if files::exists(&trust) {
            if self.rotate && action_of(&self.items, "apply signing key") == Action::Rotated {
                let aside = files::move_aside(&trust)?;
                action = Action::Rotated;
                note = Some(format!("the old policy is {}", aside.display()));
            } else {
                self.push("apply trust policy", &trust, Action::Unchanged, None);
                return Ok(Some(trust));
            }
        }
        let mut text = bytes;
        text.push(b'\n');
        let made = create_new(dir, &trust, &text, 0o644)?;
        let action = if made { action } else { Action::Unchanged };
        self.push("apply trust policy", &trust, action, note);
        Ok(Some(trust))
    }
}

/// `Created` when `create_new` placed the file, `Unchanged` when another
/// run placed one first (then it is that run's, and is not touched).
fn placed(created: bool) -> Action {
    if created {
        Action::Created
    } else {
        Action::Unchanged
    }
}

fn action_of(items: &[Item], what: &str) -> Action {
    items
        .iter()
        .rev()
        .find(|i| i.what == what)
        .map_or(Action::Skipped, |i| i.action)
}

fn absolute_existing_dir(p: &Path, flag: &str) -> Result<PathBuf, Rejection> {
    use glove_types::codes::cli::CLI_INVALID_ARGUMENT;
    let bad = |m: String| Rejection::new(CLI_INVALID_ARGUMENT, m).at(flag);
    if !p.is_absolute() {
        return Err(bad(format!("{} is not absolute", p.display())));
    }
    if !p.is_dir() {
        return Err(bad(format!("{} is not a directory", p.display())));
    }
    Ok(p.to_path_buf())
}

fn setup(a: &SetupArgs) -> Result<(Run, u128), Rejection> {
    let t0 = Instant::now();
    let layout = Layout::current().ok_or_else(|| {
        Rejection::new(
            SETUP_NO_HOME,
            "HOME is not set to an absolute path (nor XDG_CONFIG_HOME and XDG_STATE_HOME)",
        )
    })?;
    let search: Vec<PathBuf> = a
        .search_paths
        .iter()
        .map(|p| absolute_existing_dir(p, "search_path"))
        .collect::<Result<_, _>>()?;
    let roots: Vec<PathBuf> = a
        .path_roots
        .iter()
        .map(|p| absolute_existing_dir(p, "path_root"))
        .collect::<Result<_, _>>()?;
    // Nobody else may plant or swap a directory that `glove init` would
    // then expose (a root under /tmp, or someone else's directory).
    for r in &roots {
        let why = std::fs::canonicalize(r)
            .map(|c| glove_control::harness::unsafe_reasons(&c))
            .unwrap_or_default();
        if !why.is_empty() {
            return Err(Rejection::new(
                glove_types::codes::cli::SETUP_ANCESTOR_UNSAFE,
                format!(
                    "--path-root {} is not safe to expose from: {}",
                    r.display(),
                    why.join("; ")
                ),
            )
            .at("path_root"));
        }
    }
    // Keys, policies and the config go nowhere someone else could swap a
    // directory on the way (a root shell that kept a user's XDG variables,
    // a home under /tmp).
    for top in [&layout.config, &layout.state, &layout.runtime] {
        let mut above = top.parent();
        while let Some(p) = above.filter(|p| !p.exists()) {
            above = p.parent();
        }
        let why = above
            .map(glove_control::harness::unsafe_reasons)
            .unwrap_or_default();
        if !why.is_empty() {
            return Err(Rejection::new(
                glove_types::codes::cli::SETUP_ANCESTOR_UNSAFE,
                format!(
                    "{} cannot hold Glove's files: {}",
                    top.display(),
                    why.join("; ")
                ),
            ));
        }
    }
    let mut run = Run {
        layout: layout.clone(),
        items: Vec::new(),
        rotate: a.rotate_keys,
    };
    let config = run.dir("config directory", &layout.config)?;
    let state = run.dir("state directory", &layout.state)?;
    drop(state);
    // The runtime directory's parent (/run/user/UID) comes with a login
    // session; without one, a private directory in the state directory
    // stands in (gloved.json names it, so every client finds it there).
    let runtime_dir = if layout.runtime.parent().is_some_and(Path::exists) {
        layout.runtime.clone()
    } else {
        layout.state.join("run")
    };
    run.dir("runtime directory", &runtime_dir)?;
    if runtime_dir != layout.runtime {
        if let Some(i) = run.items.last_mut() {
            i.note = Some(format!(
                "{} does not exist (no login session); gloved.json names this one instead",
                layout
                    .runtime
                    .parent()
                    .map_or_else(String::new, |p| p.display().to_string())
            ));
        }
    }
    for (what, p) in [
        ("session store directory", layout.session_store()),
        ("receipt journal directory", layout.receipt_journal()),
        ("exposure journal directory", layout.exposure_journal()),
    ] {
        if let Some(parent) = p.parent() {
            run.dir(what, parent)?;
        }
    }
    run.dir("materialization root", &layout.materialization_root())?;

    // Keys. The receipt key authenticates every receipt in the journal: it
    // is rotated only while there is no journal.
    let journal_exists = files::exists(&layout.receipt_journal());
    let rotate_receipt = a.rotate_keys && !journal_exists;
    run.hex_key(
        "receipt key",
        &config,
        &layout.receipt_key(),
        rotate_receipt,
    )?;
    if a.rotate_keys && journal_exists {
        if let Some(i) = run.items.last_mut() {
            i.note = Some("kept: the receipt journal's receipts are authenticated with it".into());
        }
    }
    run.hex_key(
        "start-authorization key",
        &config,
        &layout.start_auth_key(),
        a.rotate_keys,
    )?;
    let trust = run.apply_key(&config)?;

    // The starter session policy, unless one is there (then it is checked).
    let policy_path = layout.session_policy();
    if files::exists(&policy_path) {
        let bytes = files::read_protected(&policy_path, 1024 * 1024)?;
        glove_types::policy::ValidatedPolicy::from_json(&bytes)?;
        let note = (!search.is_empty()).then(|| {
            "kept as it is; harnesses are staged only into a new policy (move it aside to remake it)"
                .to_owned()
        });
        run.push("session policy", &policy_path, Action::Unchanged, note);
    } else {
        let templates =
            policy::stage_harnesses(&search, &layout.harness_root(), a.json, &mut run.items)?;
        let mut bytes = policy::starter(templates)?;
        bytes.push(b'\n');
        let made = create_new(&config, &policy_path, &bytes, 0o600)?;
        run.push("session policy", &policy_path, placed(made), None);
    }

    // The path-exposure policy.
    let exposure = if roots.is_empty() && !files::exists(&layout.exposure_policy()) {
        None
    } else {
        exposure_policy(&mut run, &config, &roots)?
    };

    // gloved.json: every path above.
    let mut cfg = Map::new();
    let mut put = |k: &str, p: &Path| {
        cfg.insert(k.into(), Value::String(p.display().to_string()));
    };
    put("runtime_dir", &runtime_dir);
    put("session_policy", &policy_path);
    put("session_store", &layout.session_store());
    put("receipt_journal", &layout.receipt_journal());
    put("receipt_key", &layout.receipt_key());
    put("start_auth_key", &layout.start_auth_key());
    put("materialization_root", &layout.materialization_root());
    if let Some(t) = &trust {
        put("apply_trust", t);
    }
    if exposure.is_some() {
        put("path_exposure_policy", &layout.exposure_policy());
        put("path_exposure_journal", &layout.exposure_journal());
    }
    let mut text = serde_json::to_vec_pretty(&Value::Object(cfg))
        .map_err(|e| Rejection::new(glove_types::codes::cli::SETUP_IO, e.to_string()))?;
    text.push(b'\n');
    let cfg_path = layout.gloved_config();
    if files::exists(&cfg_path) {
        let old = files::read_protected(&cfg_path, super::control::config::MAX_CONFIG_BYTES)?;
        let note = (old != text).then(|| {
            "kept as it is; it differs from what setup would write now (move it aside to remake it)"
                .to_owned()
        });
        run.push("gloved config", &cfg_path, Action::Unchanged, note);
    } else {
        let made = create_new(&config, &cfg_path, &text, 0o600)?;
        run.push("gloved config", &cfg_path, placed(made), None);
    }
    Ok((run, t0.elapsed().as_millis()))
}

/// The exposure policy: made from `--path-root` when missing; kept (and
/// its roots compared) when present.
fn exposure_policy(
    run: &mut Run,
    config: &OwnedFd,
    roots: &[PathBuf],
) -> Result<Option<()>, Rejection> {
    let path = run.layout.exposure_policy();
    if files::exists(&path) {
        files::read_protected(&path, 1024 * 1024)?;
        let note = (!roots.is_empty()).then(|| {
            "kept as it is; --path-root applies only to a new policy (move it aside to remake it)"
                .to_owned()
        });
        run.push("path-exposure policy", &path, Action::Unchanged, note);
        return Ok(Some(()));
    }
    let mut bytes = exposure_starter(roots, &run.layout.session_policy())?;
    bytes.push(b'\n');
    let made = create_new(config, &path, &bytes, 0o600)?;
    run.push("path-exposure policy", &path, placed(made), None);
    Ok(Some(()))
}

/// The exposure policy's bytes for these roots (canonical paths; every
/// mode the defaults allow), usable by every template of the session
/// policy.
fn exposure_starter(roots: &[PathBuf], session_policy: &Path) -> Result<Vec<u8>, Rejection> {
    use glove_types::codes::cli::CLI_INVALID_ARGUMENT;
    use glove_types::exposure::{starter, StarterRoot};
    let mut canonical = Vec::new();
    for r in roots {
        let c = std::fs::canonicalize(r).map_err(|e| {
            Rejection::new(CLI_INVALID_ARGUMENT, format!("{}: {e}", r.display())).at("path_root")
        })?;
        canonical.push((c, StarterRoot::default()));
    }
    let bytes = files::read_protected(session_policy, 1024 * 1024)?;
    let v: Value = serde_json::from_slice(&bytes)
        .map_err(|e| Rejection::new(glove_types::codes::cli::SETUP_IO, e.to_string()))?;
    let templates = v["runtime_templates"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["runtime_template_id"].as_str())
        .map(glove_types::ids::RuntimeTemplateId::new)
        .collect::<Result<Vec<_>, _>>()?;
    starter(&canonical, &templates)
}

fn next_steps(run: &Run) -> Vec<String> {
    let cfg = run.layout.show(&run.layout.gloved_config());
    let mut out = vec![
        "glove daemon install --now".to_owned(),
        format!("(or in a terminal: gloved --config {cfg})"),
    ];
    let exposure = if files::exists(&run.layout.exposure_policy()) {
        out.push("glove init DIR            (a project beneath a --path-root)".into());
        " --exposure ID:GEN"
    } else {
        ""
    };
    out.push(format!(
        "glove plan new --template {} --profile small{exposure} --out plan.json",
        policy::SHELL_TEMPLATE
    ));
    out.push("glove session run plan.json".into());
    out
}

/// Runs `glove setup`.
pub fn run(a: &SetupArgs) -> i32 {
    let (run, ms) = match setup(a) {
        Ok(v) => v,
        Err(e) => return crate::cli::fail(&e, a.json, None),
    };
    let changed = run
        .items
        .iter()
        .filter(|i| i.action != Action::Unchanged && i.action != Action::Skipped)
        .count();
    let next = next_steps(&run);
    if a.json {
        print_json(&json!({
            "changed": changed,
            "items": run.items,
            "config": run.layout.gloved_config().display().to_string(),
            "next": next,
            "elapsed_ms": ms,
        }));
        return EXIT_OK;
    }
    if changed == 0 {
        println!("glove setup: nothing to do, everything is in place");
    } else {
        println!("glove setup: made {changed} things in {ms} ms");
    }
    for i in &run.items {
        let action = match i.action {
            Action::Created => "created",
            Action::Unchanged => "ok",
            Action::Rotated => "rotated",
            Action::Skipped => "skipped",
        };
        let note = i
            .note
            .as_deref()
            .map(|n| format!("\n    {n}"))
            .unwrap_or_default();
        println!(
            "  {action:<8} {:<27} {}{note}",
            i.what,
            run.layout.show(Path::new(&i.path))
        );
    }
    println!("next:");
    for n in &next {
        println!("  {n}");
    }
    EXIT_OK
}
