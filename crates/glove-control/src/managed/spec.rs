//! Policy and plan to a launch spec, with the security refusals on the way.

use super::RuntimeConfig;
use glove_sandbox::spec::{Bind, BundleMount, Enforcement, Grant, GrantMode, Terminal};
use glove_sandbox::wire::SpecWire;
use glove_types::codes::control::*;
use glove_types::plan::AdmittedPlan;
use glove_types::policy::{Access, CreatePolicy, LaunchTarget, NativeRuntime, ValidatedPolicy};
use glove_types::receipt::Projection;
use glove_types::Rejection;

/// The launch spec and the receipt facts for an admitted plan.
pub fn build_spec(
    policy: &ValidatedPolicy,
    admitted: &AdmittedPlan,
    cfg: &RuntimeConfig,
    rows: u16,
    cols: u16,
) -> Result<(SpecWire, Vec<Projection>), Rejection> {
    let template = policy
        .template(admitted.runtime_template_id().as_str())
        .ok_or_else(|| Rejection::new(SESSION_PLAN_NOT_ADMITTED, "the template is gone"))?;
    let launch = template.launch();
    let executable = match launch.target() {
        LaunchTarget::Pinned { executable_path } => executable_path.clone(),
        LaunchTarget::Discovery {
            runtime,
            executable_search_paths,
        } => executable_search_paths
            .iter()
            .map(|d| format!("{}/{}", d.trim_end_matches('/'), runtime.executable_name()))
            .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file()))
            .ok_or_else(|| {
                Rejection::new(
                    SESSION_EXECUTABLE_NOT_FOUND,
                    format!(
                        "{} is in none of the template's search paths",
                        runtime.executable_name()
                    ),
                )
            })?,
    };
    let mut grants = Vec::new();
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
                return Err(Rejection::new(
                    SESSION_RETAINED_WRITE_UNSUPPORTED,
                    format!("the grant of {} asks for retained_write", g.alias.as_str()),
                )
                .at("path_grants"))
            }
        };
        cfg.held.check_grant(g.alias.as_str(), alias.host_path())?;
        if grants.is_empty() {
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
    for p in admitted.library_projections() {
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
    let mut environment: Vec<String> = launch.environment().to_vec();
    let mut set = |e: String| {
        let name = e.split('=').next().unwrap_or("").to_owned();
        environment.retain(|x| x.split('=').next() != Some(name.as_str()));
        environment.push(e);
    };
    set("HOME=/home/agent".into());
    if let Some(m) = NativeRuntime::parse(template.runtime_id().as_str())
        .and_then(NativeRuntime::managed_environment)
    {
        set(m.to_owned());
    }
    environment.sort();
    for p in launch.read_only_paths() {
        if !wire.read_only_binds.iter().any(|b| &b.target == p) {
            wire.read_only_binds.push(Bind {
                source: p.clone(),
                target: p.clone(),
            });
        }
    }
    wire.executable = executable;
    wire.arguments = launch.arguments().to_vec();
    wire.environment = environment;
    wire.working_directory = working_directory;
    wire.writable_dirs = vec!["/home/agent".into(), "/tmp".into()];
    wire.copy_in = vec![];
    wire.limits = *admitted.limits();
    wire.terminal = Terminal::Pty { rows, cols };
    wire.enforcement = Enforcement::Strict;
    wire.grants = grants;
    wire.bundles = bundles;
    wire.protected_paths = cfg.held.to_strings();
    wire.hold_for_release = true;
    Ok((wire, projections))
}
