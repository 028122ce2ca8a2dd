//! Startup from resolved [`Settings`]: opening (or creating) the session
//! store and the receipt journal a configuration names, and the paths the
//! service holds.

use super::*;

/// What startup built: the service and the pinned directories.
#[derive(Debug)]
pub struct Started {
    /// The service.
    pub service: Service,
    /// The runtime directory, checked, held open.
    pub runtime_dir: OwnedFd,
    /// Directories whose identity is pinned for the process lifetime.
    pub pinned: Vec<OwnedFd>,
    /// Retained stages older than this are removed (ms).
    pub stage_max_age_ms: Option<u64>,
}

fn at<'p>(path: &'p Path, what: &str) -> impl Fn(JournalError) -> Rejection + 'p {
    let what = what.to_owned();
    move |e| Rejection::new(e.code(), format!("{what} {}: {e}", path.display()))
}

fn exists(path: &Path) -> bool {
    path.symlink_metadata().is_ok()
}

/// Every path the service holds, which no path grant may expose: the
/// runtime directory, the materialization root, the keys, the policies,
/// and the journals with the files kept beside them.
pub fn held_paths(s: &Settings) -> super::super::held::HeldPaths {
    let mut h = super::super::held::HeldPaths::new();
    h.add(&s.runtime_dir).add(&s.receipt_key);
    h.add_journal(&s.receipt_journal);
    // The bundle store too: it holds refinement fixtures, which no agent
    // may read through a grant of an ancestor.
    for p in [
        &s.materialization_root,
        &s.start_auth_key,
        &s.session_policy,
        &s.library_bundle_root,
    ]
    .into_iter()
    .flatten()
    {
        h.add(p);
    }
    if let Some(store) = &s.session_store {
        h.add_journal(store);
    }
    if let Some((policy, journal)) = &s.path_exposure {
        h.add(policy).add_journal(journal);
    }
    h
}

/// Checks every configured path and builds the service (no socket yet).
///
/// Everything that can refuse a configuration is read and checked before
/// anything is made, so a refused start leaves nothing behind: the
/// journals are created only after the keys, anchors and trust policy
/// passed, and a runtime directory this start created is removed again.
pub fn start(s: &Settings) -> Result<Started, Rejection> {
    let made_runtime_dir = !exists(&s.runtime_dir);
    let r = start_checked(s);
    if r.is_err() && made_runtime_dir {
        // Only an empty directory goes: nothing of another run is touched.
        let _ = std::fs::remove_dir(&s.runtime_dir);
    }
    r
}

fn start_checked(s: &Settings) -> Result<Started, Rejection> {
    let runtime_dir = placement::ensure_dir(&s.runtime_dir, "the runtime directory")?;
    let mut pinned = Vec::new();
    let policy = match &s.session_policy {
        None => None,
        Some(p) => {
            placement::require_absolute(p, "the session policy")?;
            let bytes = protected::read(p, Requirements::POLICY)?;
            Some(ValidatedPolicy::from_json(&bytes).map_err(|r| {
                let msg = format!(
                    "the session policy {} is invalid: {}",
                    p.display(),
                    r.message()
                );
                Rejection::new(r.code(), msg).at(r.location())
            })?)
        }
    };
    // Read even without a managed runtime: a bad file is refused, never
    // ignored.
    for f in &s.egress_ca {
        placement::require_absolute(f, "an --egress-ca file")?;
    }
    let egress_extra_roots = crate::egress::read_extra_roots(&s.egress_ca)?;
    let remote = policy.as_ref().and_then(ValidatedPolicy::remote_backend);
    if let (Some(_), Some(root)) = (remote, &s.materialization_root) {
        return Err(Rejection::new(
            CONTROL_REMOTE_BACKEND_CONFLICT,
            format!(
                "the policy names a remote_backend, which excludes the materialization root {}",
                root.display()
            ),
        ));
    }
    if let Some(root) = &s.materialization_root {
        pinned.push(placement::open_dir(root, "the materialization root")?);
    }
    let library_bundle_store = match &s.library_bundle_root {
        None => false,
        Some(root) => {
            pinned.push(placement::open_dir(root, "the library bundle root")?);
            true
        }
    };
    placement::require_absolute(&s.receipt_key, "the receipt key")?;
    let key_bytes = protected::read(
        &s.receipt_key,
        Requirements {
            max_bytes: 128,
            mode: 0o600,
        },
    )?;
    let key =
        ReceiptKey::from_key_file(&key_bytes).map_err(at(&s.receipt_key, "the receipt key"))?;
    let anchor = ReceiptHead::parse(&s.receipt_anchor).map_err(|e| {
        Rejection::new(
            e.code(),
            "--receipt-anchor must be <seq>:<64 lowercase hex>",
        )
    })?;
    // The start-authorization key and the apply trust policy are read now,
    // before any journal is made.
    let start_key = match (&s.materialization_root, &s.start_auth_key) {
        (Some(_), Some(key_path)) => {
            placement::require_absolute(key_path, "the start-authorization key")?;
            Some(super::super::managed::read_key(key_path)?)
        }
        _ => None,
    };
    let trust = match &s.apply_trust {
        Some(path) => {
            placement::require_absolute(path, "the apply trust policy")?;
            Some(glove_control::apply::TrustPolicy::load(
                path,
                rustix::process::geteuid().as_raw(),
            )?)
        }
        None => None,
    };
    // The exposure policy (a protected file) and its journal (anchored
    // with the receipt key, like the other journals): loaded, replayed and
    // every live lease's project opened again, or the start is refused.
    let exposures = match &s.path_exposure {
        None => None,
        Some((policy_path, journal_path)) => {
            placement::require_absolute(policy_path, "the path-exposure policy")?;
            placement::check_parent(journal_path, "the path-exposure journal")?;
            if exists(journal_path) {
                placement::check_file(journal_path, "the path-exposure journal")?;
            }
            let (x, report) = glove_control::exposures::Exposures::load(
                policy_path,
                journal_path,
                key.clone(),
                held_paths(s),
                s.clock.now_ms(),
            )?;
            if let Some(r) = report {
                if r.unanchored {
                    tracing::warn!(path = ?journal_path, "the path-exposure journal had no anchor file; one is kept from now on");
                }
                if let Some(torn) = r.torn {
                    tracing::warn!(path = ?journal_path, torn = ?torn, "path-exposure journal had a torn tail; it was cut off and a copy kept");
                }
            }
            tracing::info!(path = ?journal_path, "path exposures loaded");
            Some(x)
        }
    };
    // The store and the receipt journal each keep an anchor file beside
    // them (`<file>.anchor`, keyed with the receipt key), rewritten after
    // every durable append; opening checks the file against it, and a
    // missing file whose anchor or ack is still there is refused, never
    // recreated.
    let store = match &s.session_store {
        None => None,
        Some(p) => {
            placement::check_parent(p, "the session store")?;
            let what = "the session store";
            let anchor_file =
                AnchorFile::beside(p, key.clone(), STORE_ANCHOR_DOMAIN).map_err(at(p, what))?;
            let store = if exists(p) {
                let (store, report) =
                    SessionStore::open_anchored(p, anchor_file).map_err(at(p, what))?;
                if report.unanchored {
                    tracing::warn!(path = ?p, "the session store had no anchor file; nothing could be checked against one on this start (one is kept from now on)");
                }
                if let Some(torn) = report.torn {
                    tracing::warn!(path = ?p, torn = ?torn, "session store had a torn tail; it was cut off and a copy kept");
                }
                tracing::info!(path = ?p, sessions = store.index().len(), "session store replayed");
                store
            } else {
                tracing::info!(path = ?p, "session store created");
                SessionStore::create_anchored(p, anchor_file).map_err(at(p, what))?
            };
            Some(store)
        }
    };
    let rj = &s.receipt_journal;
    placement::check_parent(rj, "the receipt journal")?;
    let receipts = if exists(rj) {
        let (mut j, report) = ReceiptJournal::open(rj, key, &anchor, s.receipt_config)
            .map_err(at(rj, "the receipt journal"))?;
        if report.unanchored {
            tracing::warn!(path = ?rj, "the receipt journal had no anchor file; nothing could be checked against one on this start (one is kept from now on)");
        }
        if let Some(torn) = report.torn {
            tracing::warn!(path = ?rj, torn = ?torn, "receipt journal had a torn tail; it was cut off and a copy kept");
        }
        tracing::info!(path = ?rj, head_seq = j.head().seq, "receipt journal replayed");
        // Acknowledged receipts a previous run left are compacted away now,
        // so start-up stays bounded by what is unacknowledged.
        glove_control::ports::compact_if_due(&mut j).map_err(at(rj, "the receipt journal"))?;
        j
    } else {
        tracing::info!(path = ?rj, "receipt journal created");
        ReceiptJournal::create(rj, key, &anchor, s.receipt_config)
            .map_err(at(rj, "the receipt journal"))?
    };
    let remote_backend = match remote {
        None => None,
        Some(r) => {
            super::super::remote::prepare(&runtime_dir, &s.runtime_dir, r)?;
            tracing::info!(
                "remote backend constructed (construction only; lifecycle not operational)"
            );
            Some(RemoteBackendDiagnostic {
                container_image_digest: r.container_image_digest().to_hex(),
                ssh_artifacts_prepared: true,
            })
        }
    };
    let runtime = match (&s.materialization_root, &s.start_auth_key) {
        (None, _) => None,
        (Some(_), None) => {
            tracing::info!("materialization root checked; without --start-auth-key no managed runtime is constructed, so lifecycle methods stay unadvertised");
            None
        }
        (Some(mat_root), Some(_)) => {
            let Some(key) = start_key else {
                return Err(Rejection::new(
                    CONTROL_INTERNAL,
                    "the start-authorization key was not read",
                ));
            };
            let launcher = std::env::current_exe()
                .ok()
                .and_then(|p| p.parent().map(|d| d.join("glove-launcher")))
                .unwrap_or_else(|| PathBuf::from("glove-launcher"));
            let ok = match super::super::managed::probe(&launcher) {
                Ok(()) => {
                    tracing::info!("managed runtime constructed: strict sandbox probe passed; lifecycle methods advertised");
                    true
                }
                Err(r) => {
                    tracing::warn!(
                        code = r.code().as_str(),
                        reason = r.message(),
                        "managed runtime probe failed; lifecycle methods stay unadvertised"
                    );
                    false
                }
            };
            let cfg = super::super::managed::RuntimeConfig {
                launcher,
                bundle_root: s.library_bundle_root.clone(),
                runtime_dir: s.runtime_dir.clone(),
                held: held_paths(s),
                materialization_root: mat_root.clone(),
                transcript_bytes: s.transcript_bytes,
                egress_extra_roots,
            };
            Some((cfg, key, ok))
        }
    };
    let service = Service::new(Parts {
        policy,
        store,
        receipts: Some(receipts),
        components: Components {
            library_bundle_store,
            remote_backend,
            ..Components::default()
        },
        clock: s.clock,
        max_frame_bytes: s.limits.max_frame_bytes,
    });
    let service = match exposures {
        Some(x) => service.with_exposures(x),
        None => service,
    };
    let service = match runtime {
        Some((cfg, key, ok)) => service.with_runtime(cfg, key, ok),
        None => service,
    };
    let service = match trust {
        Some(trust) => service.with_apply(trust)?,
        None => service,
    };
    for r in service.recover() {
        tracing::warn!(recovered = %r, "recovered an interrupted session");
    }
    for r in service.recover_stages() {
        tracing::warn!(recovered = %r, "recovered a retained stage");
    }
    for r in service.recover_applies() {
        tracing::warn!(recovered = %r, "recovered an interrupted apply");
    }
    let stage_max_age_ms = s.stage_max_age_secs.map(|x| x.saturating_mul(1000));
    if let Some(age) = stage_max_age_ms {
        for r in service.prune_stages(age) {
            tracing::info!(pruned = %r, "a retained stage past its age");
        }
    }
    Ok(Started {
        service,
        runtime_dir,
        pinned,
        stage_max_age_ms,
    })
}
