//! Runtime templates: their ids, the resolution of a template against the
//! policy's aliases and destinations, and its launch section.

use super::*;
use crate::refinement::Evaluation;

/// The ids of a template alone (its own id, its aliases and destinations,
/// sorted and unique), without resolving them against a policy.
pub(crate) fn check_template_ids(t: &RawTemplate) -> Result<(), Rejection> {
    RuntimeTemplateId::new(t.runtime_template_id.clone())
        .map_err(|e| e.at("runtime_template_id"))?;
    ids(
        &t.allowed_path_aliases,
        "allowed_path_aliases",
        AliasId::new,
    )?;
    ids(
        &t.allowed_projection_destinations,
        "allowed_projection_destinations",
        AliasId::new,
    )?;
    Ok(())
}

pub(super) fn template(
    t: &RawTemplate,
    aliases: &[PathAlias],
    destinations: &[ProjectionDestination],
) -> Result<(RuntimeTemplate, Sha256Digest), Rejection> {
    let id = RuntimeTemplateId::new(t.runtime_template_id.clone())
        .map_err(|e| e.at("runtime_template_id"))?;
    let runtime_id = RuntimeId::new(t.runtime_id.clone()).map_err(|e| e.at("runtime_id"))?;
    let claimed = digest(&t.adapter_command_digest, "adapter_command_digest")?;
    let backend = SandboxBackend::parse(&t.sandbox_backend).ok_or_else(|| {
        r(
            POLICY_SANDBOX_BACKEND_UNKNOWN,
            format!("{:?} is not a sandbox backend", t.sandbox_backend),
        )
        .at("sandbox_backend")
    })?;
    let allowed_path_aliases = ids(
        &t.allowed_path_aliases,
        "allowed_path_aliases",
        AliasId::new,
    )?;
    for (i, a) in allowed_path_aliases.iter().enumerate() {
        if !aliases.iter().any(|x| &x.alias == a) {
            return Err(r(
                POLICY_ALIAS_UNRESOLVED,
                format!("path alias {a} is not defined"),
            )
            .at(idx("allowed_path_aliases", i)));
        }
    }
    let allowed_projection_destinations = ids(
        &t.allowed_projection_destinations,
        "allowed_projection_destinations",
        AliasId::new,
    )?;
    for (i, d) in allowed_projection_destinations.iter().enumerate() {
        if !destinations.iter().any(|x| &x.alias == d) {
            return Err(r(
                POLICY_DESTINATION_UNRESOLVED,
                format!("projection destination {d} is not defined"),
            )
            .at(idx("allowed_projection_destinations", i)));
        }
    }
    let launch = launch(&t.launch, &runtime_id).map_err(|e| e.at("launch"))?;
    let computed = adapter_command_digest(runtime_id.as_str(), &launch)?;
    let evaluation = evaluation(
        t.evaluation.as_deref(),
        backend,
        &allowed_path_aliases,
        &allowed_projection_destinations,
    )?;
    Ok((
        RuntimeTemplate {
            runtime_template_id: id,
            runtime_id,
            adapter_command_digest: claimed,
            sandbox_backend: backend,
            allowed_path_aliases,
            allowed_projection_destinations,
            launch,
            evaluation,
        },
        computed,
    ))
}

/// An evaluation template's evaluator and its rules: a known evaluator,
/// the local Linux backend, no path alias (an evaluation has no path
/// grant) and at least two projection destinations (the fixture's and the
/// skill's).
fn evaluation(
    name: Option<&str>,
    backend: SandboxBackend,
    aliases: &[AliasId],
    destinations: &[AliasId],
) -> Result<Option<Evaluation>, Rejection> {
    use crate::codes::refinement::{REFINEMENT_EVALUATION_UNKNOWN, REFINEMENT_TEMPLATE_INVALID};
    let Some(name) = name else {
        return Ok(None);
    };
    let e = Evaluation::parse(name).ok_or_else(|| {
        r(
            REFINEMENT_EVALUATION_UNKNOWN,
            format!("{name:?} is not an evaluator; the one defined is refinement-eval-v1"),
        )
        .at("evaluation")
    })?;
    if backend != SandboxBackend::LinuxProduction {
        return Err(r(
            REFINEMENT_TEMPLATE_INVALID,
            "an evaluation template runs on linux_production",
        )
        .at("sandbox_backend"));
    }
    if !aliases.is_empty() {
        return Err(r(
            REFINEMENT_TEMPLATE_INVALID,
            "an evaluation template allows no path alias",
        )
        .at("allowed_path_aliases"));
    }
    if destinations.len() < 2 {
        return Err(r(
            REFINEMENT_TEMPLATE_INVALID,
            "an evaluation template allows at least two projection destinations (fixture and skill)",
        )
        .at("allowed_projection_destinations"));
    }
    Ok(Some(e))
}

pub(crate) fn launch(l: &RawLaunch, runtime_id: &RuntimeId) -> Result<Launch, Rejection> {
    let pinned = l.executable_path.as_deref().filter(|p| !p.is_empty());
    let target = match (pinned, l.runtime_discovery.as_deref()) {
        (Some(exe), None) => {
            if l.executable_search_paths.is_some() {
                return Err(r(
                    POLICY_DISCOVERY_SEARCH_PATHS,
                    "executable_search_paths is only for runtime_discovery",
                )
                .at("executable_search_paths"));
            }
            LaunchTarget::Pinned {
                executable_path: path(exe, "executable_path")?,
            }
        }
        (None, Some(disc)) => {
            let runtime = NativeRuntime::parse(disc).ok_or_else(|| {
                r(
                    POLICY_DISCOVERY_UNSUPPORTED,
                    format!("{disc:?} has no native adapter; use a pinned executable_path"),
                )
                .at("runtime_discovery")
            })?;
            if runtime.runtime_id() != runtime_id.as_str() {
                return Err(r(
                    POLICY_DISCOVERY_RUNTIME_MISMATCH,
                    format!("runtime_discovery {disc} differs from runtime_id {runtime_id}"),
                )
                .at("runtime_discovery"));
            }
            let paths = l.executable_search_paths.as_deref().unwrap_or_default();
            if paths.is_empty() {
                return Err(r(
                    POLICY_DISCOVERY_SEARCH_PATHS,
                    "runtime_discovery needs a non-empty executable_search_paths",
                )
                .at("executable_search_paths"));
            }
            if paths.len() > MAX_ENTRIES {
                return Err(r(POLICY_TOO_MANY, format!("at most {MAX_ENTRIES} entries"))
                    .at("executable_search_paths"));
            }
            let mut out: Vec<String> = Vec::with_capacity(paths.len());
            for (i, p) in paths.iter().enumerate() {
                let p = path(p, idx("executable_search_paths", i))?;
                if out.contains(&p) {
                    return Err(r(POLICY_ARRAY_DUPLICATE, format!("{p:?} appears twice"))
                        .at(idx("executable_search_paths", i)));
                }
                out.push(p);
            }
            LaunchTarget::Discovery {
                runtime,
                executable_search_paths: out,
            }
        }
        _ => {
            return Err(r(
                POLICY_LAUNCH_EXECUTABLE,
                "set exactly one of a non-empty executable_path or runtime_discovery",
            )
            .at("executable_path"));
        }
    };

    if l.arguments.len() > MAX_ENTRIES {
        return Err(r(POLICY_TOO_MANY, format!("at most {MAX_ENTRIES} entries")).at("arguments"));
    }
    for (i, a) in l.arguments.iter().enumerate() {
        if a.contains('\0') || a.len() > MAX_STRING {
            return Err(r(
                POLICY_ARGUMENT_INVALID,
                format!("arguments must be at most {MAX_STRING} bytes without NUL"),
            )
            .at(idx("arguments", i)));
        }
    }

    check_sorted_unique(&l.environment, "environment", |s| s.clone())?;
    let mut names: Vec<&str> = Vec::with_capacity(l.environment.len());
    for (i, e) in l.environment.iter().enumerate() {
        let at = idx("environment", i);
        let (name, value) = e
            .split_once('=')
            .ok_or_else(|| r(POLICY_ENVIRONMENT_INVALID, "entries must be NAME=value").at(&at))?;
        let name_ok = name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !name_ok || value.contains('\0') || e.len() > MAX_STRING {
            return Err(r(POLICY_ENVIRONMENT_INVALID, "entries must be NAME=value, NAME in [A-Za-z_][A-Za-z0-9_]*, no NUL, at most 4096 bytes").at(&at));
        }
        if RESERVED_ENV.contains(&name)
            || name.starts_with("GLOVE_")
            || crate::harness::manages_variable(name)
        {
            return Err(r(
                POLICY_ENVIRONMENT_RESERVED,
                format!("{name} is set by Glove and cannot be configured"),
            )
            .at(&at));
        }
        if names.contains(&name) {
            return Err(r(POLICY_ENVIRONMENT_DUPLICATE, format!("{name} is set twice")).at(&at));
        }
        names.push(name);
    }

    check_sorted_unique(&l.read_only_paths, "read_only_paths", |s| s.clone())?;
    let mut ro = Vec::with_capacity(l.read_only_paths.len());
    for (i, p) in l.read_only_paths.iter().enumerate() {
        let p = path(p, idx("read_only_paths", i))?;
        if let LaunchTarget::Pinned { executable_path } = &target {
            if overlaps(&p, executable_path) {
                return Err(r(
                    POLICY_RUNTIME_PATH_OVERLAP,
                    format!("{p:?} overlaps the pinned executable"),
                )
                .at(idx("read_only_paths", i)));
            }
        }
        if let Some(prev) = ro.iter().find(|q: &&String| is_within(&p, q)) {
            return Err(r(
                POLICY_RUNTIME_PATH_OVERLAP,
                format!("{p:?} lies inside {prev:?}"),
            )
            .at(idx("read_only_paths", i)));
        }
        ro.push(p);
    }

    Ok(Launch {
        target,
        arguments: l.arguments.clone(),
        environment: l.environment.clone(),
        read_only_paths: ro,
    })
}
