//! Policy and plan to a launch spec, with the security refusals on the way.

use super::lease::LeaseHold;
use super::RuntimeConfig;
use glove_sandbox::spec::{
    Bind, BundleMount, Enforcement, Grant, GrantMode, LeaseFile, SeedFile, Terminal,
};

// One bound for a bundle on both sides of the launcher socket.
const _: () =
    assert!(glove_sandbox::spec::MAX_BUNDLE_BYTES == glove_types::bundle::MAX_BUNDLE_BYTES as u64);
use glove_sandbox::wire::SpecWire;
use glove_types::bundle::{expand_skills, LibraryBundle};
use glove_types::codes::control::*;
use glove_types::plan::AdmittedPlan;
use glove_types::policy::{Access, CreatePolicy, LaunchTarget, NativeRuntime, ValidatedPolicy};
use glove_types::receipt::{AdapterReceipt, LeaseReceipt, Projection};
use glove_types::Rejection;

/// The private home inside every managed sandbox.
pub const HOME: &str = "/home/agent";

/// A launch spec with what the receipt repeats and what the session holds.
#[derive(Debug)]
pub struct Built {
    /// The spec sent to the launcher.
    pub wire: SpecWire,
    /// The library projections.
    pub projections: Vec<Projection>,
    /// The native adapter's facts, for a native runtime.
    pub adapter: Option<AdapterReceipt>,
    /// The credential leases, held until the session ends.
    pub leases: Vec<LeaseHold>,
    /// The retained workspaces the plan's `retained_write` grants ask for.
    pub retained: Vec<RetainedGrant>,
}

/// A `retained_write` grant (of a path alias, or of a path exposure): an
/// ext4 stage filled from the host directory, kept after the session for
/// diff and apply.
#[derive(Clone, Debug)]
pub struct RetainedGrant {
    /// The path alias (names the stage).
    pub alias: String,
    /// The host directory it is filled from.
    pub host_path: String,
    /// Where it appears inside the sandbox.
    pub target: String,
    /// The image's size (the grant's byte quota).
    pub max_bytes: u64,
    /// Start empty when the host directory does not exist.
    pub create_if_missing: bool,
    /// The host directory already held open (a path exposure's project).
    pub source_fd: Option<std::sync::Arc<rustix::fd::OwnedFd>>,
}

/// The leases a plan's secret handles become: each handle needs a
/// credential source in the policy and a native adapter with a credential
/// path; one handle per adapter.
fn leases(
    policy: &ValidatedPolicy,
    admitted: &AdmittedPlan,
    native: Option<NativeRuntime>,
    cfg: &RuntimeConfig,
) -> Result<Vec<(LeaseHold, &'static str)>, Rejection> {
    // A handle the session's egress policy brokers is the proxy's, not a
    // lease (see `managed::egress`).
    let brokered = super::egress::brokered_handles(policy, admitted);
    let handles: Vec<&glove_types::ids::SecretHandle> = admitted
        .secret_handles()
        .iter()
        .filter(|h| !brokered.contains(h))
        .collect();
    if handles.is_empty() {
        return Ok(Vec::new());
    }
    let unsupported =
        |m: String| Rejection::new(SESSION_CREDENTIAL_UNSUPPORTED, m).at("secret_handles");
    let Some(native) = native else {
        return Err(unsupported(
            "the template's runtime has no native adapter to receive a credential".into(),
        ));
    };
    if handles.len() > 1 {
        return Err(unsupported(format!(
            "{} keeps one credential; the plan names {}",
            native.runtime_id(),
            handles.len()
        )));
    }
    let mut out = Vec::new();
    for h in handles {
        // Admission refuses a plan that names a brokered handle without
        // the egress policy that brokers it; should one get here all the
        // same, the key is not copied into the sandbox.
        if super::egress::brokered_by_any(policy, h) {
            return Err(unsupported(format!(
                "secret handle {} is brokered by an egress policy; it is never leased",
                h.as_str()
            )));
        }
        let source = policy
            .credential_sources()
            .iter()
            .find(|c| c.handle() == h)
            .ok_or_else(|| {
                unsupported(format!(
                    "secret handle {} has no credential source",
                    h.as_str()
                ))
            })?;
        if source.runtime_id().map(|r| r.as_str()) != Some(native.runtime_id()) {
            return Err(unsupported(format!(
                "the credential source of {} is not bound to runtime {} (its runtime_id)",
                h.as_str(),
                native.runtime_id()
            )));
        }
        let hold = LeaseHold::acquire(
            &cfg.materialization_root,
            h,
            std::path::Path::new(source.source_path()),
        )?;
        out.push((hold, native.credential_path()));
    }
    Ok(out)
}

/// The launch spec and the receipt facts for an admitted plan.
pub fn build_spec(
    policy: &ValidatedPolicy,
    admitted: &AdmittedPlan,
    cfg: &RuntimeConfig,
    rows: u16,
    cols: u16,
) -> Result<Built, Rejection> {
    let template = policy
        .template(admitted.runtime_template_id().as_str())
        .ok_or_else(|| Rejection::new(SESSION_PLAN_NOT_ADMITTED, "the template is gone"))?;
    let launch = template.launch();
    let (executable, executable_pin) = match launch.target() {
        LaunchTarget::Pinned { executable_path } => (executable_path.clone(), None),
        LaunchTarget::Discovery {
            runtime,
            executable_search_paths,
        } => {
            let r = super::discovery::resolve(*runtime, executable_search_paths)?;
            (r.path, Some(r.identity))
        }
    };
    let mut grants = Vec::new();
    let mut retained = Vec::new();
    let mut working_directory = "/home/agent".to_owned();
    for g in admitted.path_grants() {
        let alias = policy
            .path_alias(g.alias.as_str())
            .ok_or_else(|| Rejection::new(SESSION_PLAN_NOT_ADMITTED, "a path alias is gone"))?;
        let tuple = alias.access().iter().find(|t| t.access == g.access);
        let mode = match g.access {
            Access::ReadOnly => GrantMode::ReadOnly,
            Access::EphemeralWrite => GrantMode::EphemeralCopy {
                max_bytes: g.max_bytes,
            },
            Access::DirectWrite => {
                return Err(Rejection::new(
                    SESSION_DIRECT_WRITE_REFUSED,
                    format!("the grant of {} asks for direct_write", g.alias.as_str()),
                )
                .at("path_grants"))
            }
            Access::RetainedWrite => {
                if let Err(why) = crate::assembly::retained::supported() {
                    return Err(Rejection::new(
                        SESSION_RETAINED_WRITE_UNSUPPORTED,
                        format!(
                            "the grant of {} asks for retained_write, which this host cannot give: {why}",
                            g.alias.as_str()
                        ),
                    )
                    .at("path_grants"));
                }
                cfg.held.check_grant(g.alias.as_str(), alias.host_path())?;
                if grants.is_empty() && retained.is_empty() {
                    working_directory = alias.target_path().to_owned();
                }
                retained.push(RetainedGrant {
                    alias: g.alias.as_str().to_owned(),
                    host_path: alias.host_path().to_owned(),
                    target: alias.target_path().to_owned(),
                    max_bytes: g.max_bytes,
                    create_if_missing: tuple
                        .is_some_and(|t| t.create_policy == CreatePolicy::EmptyDirectory),
                    source_fd: None,
                });
                continue;
            }
        };
        cfg.held.check_grant(g.alias.as_str(), alias.host_path())?;
        if grants.is_empty() && retained.is_empty() {
            working_directory = alias.target_path().to_owned();
        }
        grants.push(Grant {
            host_path: alias.host_path().to_owned(),
            target: alias.target_path().to_owned(),
            mode,
            create_if_missing: tuple
                .is_some_and(|t| t.create_policy == CreatePolicy::EmptyDirectory),
        });
    }
    let mut bundles = Vec::new();
    let mut projections = Vec::new();
    // Every projected bundle is read and decoded here too (unknown kinds
    // and bad layouts fail the start); the sandbox mounts the raw bytes it
    // rehashes itself. Each distinct digest once.
    let mut decoded: Vec<LibraryBundle> = Vec::new();
    for p in admitted.library_projections() {
        // A refinement evaluation's fixture is the supervisor's alone: it
        // is read before launch (`evaluation::read_fixture`), never
        // mounted.
        if admitted
            .refinement()
            .is_some_and(|b| b.fixture().projection_id == p.projection_id)
        {
            continue;
        }
        let root = cfg.bundle_root.as_ref().ok_or_else(|| {
            Rejection::new(
                SESSION_BUNDLE_ROOT_MISSING,
                "the plan projects a library bundle; start gloved with --library-bundle-root",
            )
        })?;
        let dest = policy
            .destination(p.destination_alias.as_str())
            .ok_or_else(|| Rejection::new(SESSION_PLAN_NOT_ADMITTED, "a destination is gone"))?;
        let target = format!(
            "{}/{}",
            dest.target_path().trim_end_matches('/'),
            p.projection_id.as_str()
        );
        if !decoded.iter().any(|b| b.sha256() == &p.sha256) {
            let bytes = crate::protected::read(
                &root.join(p.sha256.to_hex()),
                crate::protected::Requirements {
                    max_bytes: glove_sandbox::spec::MAX_BUNDLE_BYTES,
                    mode: 0o600,
                },
            )
            .map_err(|r| r.at("library_projections"))?;
            decoded.push(
                LibraryBundle::verify(&bytes, &p.sha256)
                    .map_err(|r| r.at("library_projections"))?,
            );
        }
        bundles.push(BundleMount {
            root: root.display().to_string(),
            sha256: p.sha256.to_hex(),
            target: target.clone(),
        });
        projections.push(Projection {
            projection_id: p.projection_id.clone(),
            destination_alias: p.destination_alias.clone(),
            target,
            sha256: p.sha256,
        });
    }
    // System directories, /etc and the generated files of the default
    // profile; everything the agent runs is the template's.
    let base = glove_sandbox::profile::exec_spec(glove_sandbox::profile::ExecRequest {
        limits: *admitted.limits(),
        pty: Some((rows, cols)),
        strict_limits: true,
        ..glove_sandbox::profile::ExecRequest::new(vec!["/bin/true".into()])
    })
    .map_err(|e| Rejection::new(SESSION_LAUNCH_FAILED, e.to_string()))?;
    let mut wire = SpecWire::from_spec(&base)
        .ok_or_else(|| Rejection::new(SESSION_LAUNCH_FAILED, "base spec"))?;
    let native = NativeRuntime::parse(template.runtime_id().as_str());
    let cpu_rate = policy
        .profile(admitted.profile_id().as_str())
        .and_then(|p| p.cpu_rate_millicpus());
    let mut environment: Vec<String> = launch.environment().to_vec();
    let mut managed = vec![format!("HOME={HOME}")];
    if let Some(n) = native {
        managed.extend(n.managed_environment().iter().map(|e| (*e).to_owned()));
    }
    managed.sort();
    for e in &managed {
        let name = e.split('=').next().unwrap_or("");
        environment.retain(|x| x.split('=').next() != Some(name));
        environment.push(e.clone());
    }
    environment.sort();
    let held = leases(policy, admitted, native, cfg)?;
    for p in launch.read_only_paths() {
        if !wire.read_only_binds.iter().any(|b| &b.target == p) {
            wire.read_only_binds.push(Bind {
                source: p.clone(),
                target: p.clone(),
            });
        }
    }
    wire.executable = executable;
    wire.executable_pin = executable_pin;
    wire.arguments = launch.arguments().to_vec();
    wire.environment = environment;
    wire.working_directory = working_directory;
    wire.writable_dirs = vec![HOME.into(), "/tmp".into()];
    wire.copy_in = vec![];
    wire.limits = *admitted.limits();
    wire.terminal = Terminal::Pty { rows, cols };
    wire.enforcement = Enforcement::Strict;
    wire.grants = grants;
    wire.bundles = bundles;
    wire.protected_paths = cfg.held.to_strings();
    wire.hold_for_release = true;
    wire.cpu_rate_millicpus = cpu_rate;
    // The private home: the adapter's directories, then its skills
    // expanded from the projected bundles (non-skill entries stay in the
    // raw bundles, which are mounted all the same).
    let mut skills = None;
    if let Some(n) = native {
        wire.seed_dirs = n
            .home_directories()
            .iter()
            .map(|d| (*d).to_owned())
            .collect();
        let refs: Vec<&LibraryBundle> = decoded.iter().collect();
        let x =
            expand_skills(&refs, n.skill_directory()).map_err(|r| r.at("library_projections"))?;
        if !x.skill_names().is_empty() {
            wire.seed_dirs.extend(x.directories().iter().cloned());
            wire.seed_files = x
                .files()
                .iter()
                .map(|f| SeedFile {
                    path: f.path().to_owned(),
                    text: f.text().to_owned(),
                    executable: f.executable(),
                })
                .collect();
            skills = Some((x.digest().to_hex(), x.skill_names().to_vec()));
        }
    }
    wire.leases = held
        .iter()
        .map(|(h, target)| LeaseFile {
            source: h.file().display().to_string(),
            returned: h.returned().display().to_string(),
            target: (*target).to_owned(),
        })
        .collect();
    let adapter = native.map(|n| AdapterReceipt {
        runtime: n.runtime_id().to_owned(),
        home: HOME.to_owned(),
        managed_environment: managed,
        skills_digest: skills.as_ref().map(|s| s.0.clone()),
        skills: skills.as_ref().map(|s| s.1.clone()).unwrap_or_default(),
        leases: held
            .iter()
            .map(|(h, _)| LeaseReceipt {
                secret_handle: h.handle().as_str().to_owned(),
                version_at_start: h.version(),
                version_at_end: None,
            })
            .collect(),
        cpu_rate_millicpus: cpu_rate,
    });
    // Said here with its own code rather than as a frame error later.
    let seeded: usize = wire.seed_files.iter().map(|f| f.text.len()).sum();
    let encoded = serde_json::to_vec(&wire)
        .map(|v| v.len())
        .unwrap_or(usize::MAX);
    if seeded > glove_sandbox::spec::MAX_SEED_BYTES
        || wire.seed_dirs.len() + wire.seed_files.len() > glove_sandbox::spec::MAX_SEED_ENTRIES
        || encoded > glove_sandbox::wire::MAX_FRAME
    {
        return Err(Rejection::new(
            SESSION_SPEC_TOO_LARGE,
            format!(
                "the launch spec is {encoded} bytes with {seeded} bytes of skills; the bounds are {} and {}",
                glove_sandbox::wire::MAX_FRAME,
                glove_sandbox::spec::MAX_SEED_BYTES
            ),
        )
        .at("library_projections"));
    }
    Ok(Built {
        wire,
        projections,
        adapter,
        leases: held.into_iter().map(|(h, _)| h).collect(),
        retained,
    })
}
