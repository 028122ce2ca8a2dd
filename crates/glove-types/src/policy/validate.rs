//! The policy rules. Each check returns the first broken rule with its code
//! and the location of the offending field.

use super::launch::adapter_command_digest;
use super::model::*;
use super::raw::*;
use super::ValidatedPolicy;
use crate::canon;
use crate::codes::policy::*;
use crate::digest::Sha256Digest;
use crate::egress::settings::{self, EgressSettings};
use crate::ids::{AliasId, PolicyId, ProfileId, RuntimeId, RuntimeTemplateId, SecretHandle};
use crate::paths::{
    check_canonical, check_not_restricted, is_within, overlaps, RESTRICTED_HOST_ROOTS,
    RESTRICTED_TARGET_ROOTS,
};
use crate::Rejection;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

mod network;
mod templates;

use network::{egress, remote};
use templates::template;
pub(crate) use templates::{check_template_ids, launch};

/// Entries per top-level or nested array.
pub(crate) const MAX_ENTRIES: usize = 256;
/// Longest argument or environment entry, bytes.
pub(crate) const MAX_STRING: usize = 4096;
/// Longest `max_plan_ttl_ms` (25 hours).
pub(crate) const MAX_PLAN_TTL_MS: u64 = 90_000_000;
/// Longest alias TTL (24 hours).
pub(crate) const MAX_ALIAS_TTL_SECS: u64 = 86_400;

/// Upper bounds of the six limits.
pub(crate) const MAX_CPU_TIME_MS: u64 = 86_400_000;
pub(crate) const MAX_WALL_TIME_MS: u64 = 86_400_000;
pub(crate) const MAX_MEMORY_BYTES: u64 = 1 << 40;
pub(crate) const MAX_PIDS: u64 = 65_536;
pub(crate) const MAX_DISK_BYTES: u64 = 1 << 44;
pub(crate) const MAX_TERMINAL_OUTPUT_BYTES: u64 = 1 << 32;
pub(crate) const MAX_QUOTA_BYTES: u64 = 1 << 44;
/// Smallest CPU rate, thousandths of a CPU (1% of one CPU).
pub const MIN_CPU_RATE_MILLICPUS: u64 = 10;
/// Largest CPU rate, thousandths of a CPU (1,024 CPUs).
pub const MAX_CPU_RATE_MILLICPUS: u64 = 1024 * 1000;

/// Environment names Glove sets itself; `GLOVE_*` and every variable a
/// harness's private home manages ([`crate::harness::manages_variable`])
/// are reserved too.
pub(crate) const RESERVED_ENV: &[&str] = &["HOME", "LD_AUDIT", "LD_LIBRARY_PATH", "LD_PRELOAD"];

fn r(code: crate::ErrorCode, msg: impl Into<String>) -> Rejection {
    Rejection::new(code, msg)
}

fn idx(field: &str, i: usize) -> String {
    format!("{field}[{i}]")
}

/// Checks that `items` is strictly increasing under `key`: sorted and unique.
fn check_sorted_unique<T, K: Ord + std::fmt::Debug>(
    items: &[T],
    field: &str,
    key: impl Fn(&T) -> K,
) -> Result<(), Rejection> {
    if items.len() > MAX_ENTRIES {
        return Err(r(POLICY_TOO_MANY, format!("at most {MAX_ENTRIES} entries")).at(field));
    }
    for (i, w) in items.windows(2).enumerate() {
        let (a, b) = (key(&w[0]), key(&w[1]));
        if a == b {
            return Err(
                r(POLICY_ARRAY_DUPLICATE, format!("{b:?} appears twice")).at(idx(field, i + 1))
            );
        }
        if a > b {
            return Err(r(
                POLICY_ARRAY_NOT_CANONICAL,
                format!("{b:?} must sort before {a:?}"),
            )
            .at(idx(field, i + 1)));
        }
    }
    Ok(())
}

fn ids<T>(
    items: &[String],
    field: &str,
    make: impl Fn(String) -> Result<T, Rejection>,
) -> Result<Vec<T>, Rejection> {
    check_sorted_unique(items, field, |s| s.clone())?;
    items
        .iter()
        .enumerate()
        .map(|(i, s)| make(s.clone()).map_err(|e| e.at(idx(field, i))))
        .collect()
}

fn path(p: &str, at: impl AsRef<str>) -> Result<String, Rejection> {
    check_canonical(p).map_err(|e| e.at(at))?;
    Ok(p.to_owned())
}

fn digest(s: &str, at: &str) -> Result<Sha256Digest, Rejection> {
    Sha256Digest::parse(s).map_err(|e| e.at(at))
}

/// A template whose claimed adapter digest differs from the computed one
/// (collected instead of failing only for `explain`).
pub(crate) type DigestMismatch = (RuntimeTemplateId, Sha256Digest);

pub(crate) fn validate(
    raw: RawPolicy,
    tolerate_digest_mismatch: bool,
) -> Result<(ValidatedPolicy, Vec<DigestMismatch>), Rejection> {
    if raw.schema_version != 1 {
        return Err(r(
            POLICY_SCHEMA_VERSION,
            format!(
                "schema_version {} is not supported; expected 1",
                raw.schema_version
            ),
        )
        .at("schema_version"));
    }
    if raw.revision == 0 {
        return Err(r(POLICY_REVISION_INVALID, "revision must be at least 1").at("revision"));
    }
    if raw.max_plan_ttl_ms == 0 || raw.max_plan_ttl_ms > MAX_PLAN_TTL_MS {
        return Err(r(
            POLICY_PLAN_TTL_INVALID,
            format!("max_plan_ttl_ms must lie in 1..={MAX_PLAN_TTL_MS}"),
        )
        .at("max_plan_ttl_ms"));
    }

    // Named id lists.
    let egress_policy_ids = ids(&raw.egress_policy_ids, "egress_policy_ids", PolicyId::new)?;
    let tool_policy_ids = ids(&raw.tool_policy_ids, "tool_policy_ids", PolicyId::new)?;
    let secret_handles = ids(&raw.secret_handles, "secret_handles", SecretHandle::new)?;

    // Resource profiles.
    if raw.resource_profiles.is_empty() {
        return Err(
            r(POLICY_EMPTY, "at least one resource profile is required").at("resource_profiles")
        );
    }
    check_sorted_unique(&raw.resource_profiles, "resource_profiles", |p| {
        p.profile_id.clone()
    })?;
    let mut resource_profiles = Vec::with_capacity(raw.resource_profiles.len());
    for (i, p) in raw.resource_profiles.iter().enumerate() {
        let at = idx("resource_profiles", i);
        resource_profiles.push(profile(p, raw.max_plan_ttl_ms).map_err(|e| e.at(&at))?);
    }

    // Path aliases.
    check_sorted_unique(&raw.path_aliases, "path_aliases", |a| a.alias.clone())?;
    let mut path_aliases = Vec::with_capacity(raw.path_aliases.len());
    for (i, a) in raw.path_aliases.iter().enumerate() {
        path_aliases.push(alias(a).map_err(|e| e.at(idx("path_aliases", i)))?);
    }
    for (i, a) in path_aliases.iter().enumerate() {
        for b in path_aliases.iter().skip(i + 1) {
            if overlaps(&a.host_path, &b.host_path) {
                return Err(r(
                    POLICY_ALIAS_OVERLAP,
                    format!(
                        "aliases {} and {} have overlapping host paths",
                        a.alias, b.alias
                    ),
                )
                .at("path_aliases"));
            }
        }
    }

    // Projection destinations.
    check_sorted_unique(
        &raw.library_projection_destinations,
        "library_projection_destinations",
        |d| d.alias.clone(),
    )?;
    let mut destinations = Vec::with_capacity(raw.library_projection_destinations.len());
    for (i, d) in raw.library_projection_destinations.iter().enumerate() {
        let at = idx("library_projection_destinations", i);
        let id = AliasId::new(d.alias.clone()).map_err(|e| e.at(format!("{at}.alias")))?;
        let target = path(&d.target_path, format!("{at}.target_path"))?;
        check_not_restricted(&target, RESTRICTED_TARGET_ROOTS)
            .map_err(|e| e.at(format!("{at}.target_path")))?;
        destinations.push(ProjectionDestination {
            alias: id,
            target_path: target,
        });
    }

    // Sandbox targets must not overlap one another.
    let targets: Vec<(&str, &str)> = path_aliases
        .iter()
        .map(|a| (a.alias.as_str(), a.target_path.as_str()))
        .chain(
            destinations
                .iter()
                .map(|d| (d.alias.as_str(), d.target_path.as_str())),
        )
        .collect();
    for (i, (na, ta)) in targets.iter().enumerate() {
        for (nb, tb) in targets.iter().skip(i + 1) {
            if overlaps(ta, tb) {
                return Err(r(
                    POLICY_TARGET_OVERLAP,
                    format!("targets of {na} and {nb} overlap"),
                )
                .at("path_aliases"));
            }
        }
    }

    // Credential sources.
    check_sorted_unique(&raw.credential_sources, "credential_sources", |c| {
        c.secret_handle.clone()
    })?;
    let mut credential_sources = Vec::with_capacity(raw.credential_sources.len());
    for (i, c) in raw.credential_sources.iter().enumerate() {
        let at = idx("credential_sources", i);
        let h = SecretHandle::new(c.secret_handle.clone())
            .map_err(|e| e.at(format!("{at}.secret_handle")))?;
        if !secret_handles.contains(&h) {
            return Err(r(
                POLICY_SECRET_UNRESOLVED,
                format!("secret handle {h} is not listed in secret_handles"),
            )
            .at(format!("{at}.secret_handle")));
        }
        let p = path(&c.source_path, format!("{at}.source_path"))?;
        let runtime_id = c
            .runtime_id
            .as_ref()
            .map(|r| RuntimeId::new(r.clone()).map_err(|e| e.at(format!("{at}.runtime_id"))))
            .transpose()?;
        credential_sources.push(CredentialSource {
            secret_handle: h,
            source_path: p,
            runtime_id,
        });
    }

    // Egress policies.
    check_sorted_unique(&raw.egress_policies, "egress_policies", |e| {
        e.egress_policy_id.clone()
    })?;
    let mut egress_policies = Vec::with_capacity(raw.egress_policies.len());
    for (i, e) in raw.egress_policies.iter().enumerate() {
        let at = idx("egress_policies", i);
        egress_policies
            .push(egress(e, &egress_policy_ids, &credential_sources).map_err(|x| x.at(&at))?);
    }

    // Tool policy definitions.
    check_sorted_unique(&raw.tool_policies, "tool_policies", |t| {
        t.tool_policy_id.clone()
    })?;
    let mut tool_policies = Vec::with_capacity(raw.tool_policies.len());
    for (i, t) in raw.tool_policies.iter().enumerate() {
        let at = idx("tool_policies", i);
        let id = PolicyId::new(t.tool_policy_id.clone())
            .map_err(|x| x.at(format!("{at}.tool_policy_id")))?;
        if !tool_policy_ids.contains(&id) {
            return Err(r(
                POLICY_TOOL_UNRESOLVED,
                format!("tool policy {id} is not listed in tool_policy_ids"),
            )
            .at(format!("{at}.tool_policy_id")));
        }
        let profile_path = path(&t.profile_path, format!("{at}.profile_path"))?;
        tool_policies.push(ToolPolicy {
            tool_policy_id: id,
            profile_path,
        });
    }

    // Remote backend.
    let remote_backend = match &raw.remote_backend {
        Some(rb) => Some(remote(rb).map_err(|e| e.at("remote_backend"))?),
        None => None,
    };

    // Runtime templates.
    if raw.runtime_templates.is_empty() {
        return Err(
            r(POLICY_EMPTY, "at least one runtime template is required").at("runtime_templates")
        );
    }
    check_sorted_unique(&raw.runtime_templates, "runtime_templates", |t| {
        t.runtime_template_id.clone()
    })?;
    let mut runtime_templates = Vec::with_capacity(raw.runtime_templates.len());
    let mut mismatches = Vec::new();
    for (i, t) in raw.runtime_templates.iter().enumerate() {
        let at = idx("runtime_templates", i);
        let (tpl, computed) = template(t, &path_aliases, &destinations).map_err(|e| e.at(&at))?;
        if computed != tpl.adapter_command_digest {
            if !tolerate_digest_mismatch {
                return Err(r(
                    POLICY_ADAPTER_DIGEST_MISMATCH,
                    format!(
                        "adapter_command_digest is {} but the launch fields digest to {computed}",
                        tpl.adapter_command_digest
                    ),
                )
                .at(format!("{at}.adapter_command_digest")));
            }
            mismatches.push((tpl.runtime_template_id.clone(), computed));
        }
        let remote_tpl = tpl.sandbox_backend == SandboxBackend::RemoteLinuxContainer;
        if remote_tpl != remote_backend.is_some() {
            let msg = if remote_tpl {
                "a remote_linux_container template needs a remote_backend"
            } else {
                "remote_backend excludes local (linux_production) templates"
            };
            return Err(r(POLICY_REMOTE_BACKEND_CONFLICT, msg).at(format!("{at}.sandbox_backend")));
        }
        runtime_templates.push(tpl);
    }

    Ok((
        ValidatedPolicy {
            schema_version: raw.schema_version,
            revision: raw.revision,
            max_plan_ttl_ms: raw.max_plan_ttl_ms,
            runtime_templates,
            path_aliases,
            library_projection_destinations: destinations,
            resource_profiles,
            egress_policy_ids,
            egress_policies,
            tool_policy_ids,
            tool_policies,
            secret_handles,
            credential_sources,
            remote_backend,
        },
        mismatches,
    ))
}

fn profile(p: &RawProfile, max_plan_ttl_ms: u64) -> Result<ResourceProfile, Rejection> {
    let id = ProfileId::new(p.profile_id.clone()).map_err(|e| e.at("profile_id"))?;
    let bounds: [(&str, u64, u64); 6] = [
        ("cpu_time_ms", p.cpu_time_ms, MAX_CPU_TIME_MS),
        ("memory_bytes", p.memory_bytes, MAX_MEMORY_BYTES),
        ("pids", p.pids, MAX_PIDS),
        ("wall_time_ms", p.wall_time_ms, MAX_WALL_TIME_MS),
        ("disk_bytes", p.disk_bytes, MAX_DISK_BYTES),
        (
            "terminal_output_bytes",
            p.terminal_output_bytes,
            MAX_TERMINAL_OUTPUT_BYTES,
        ),
    ];
    for (name, v, max) in bounds {
        if v == 0 || v > max {
            return Err(r(
                POLICY_LIMIT_INVALID,
                format!("{name} must lie in 1..={max}"),
            )
            .at(name));
        }
    }
    if max_plan_ttl_ms < p.wall_time_ms.saturating_add(1000) {
        return Err(r(
            POLICY_PLAN_TTL_TOO_SHORT,
            format!(
                "max_plan_ttl_ms ({max_plan_ttl_ms}) must be at least wall_time_ms + 1000 ({}) so the profile can launch",
                p.wall_time_ms + 1000
            ),
        )
        .at("wall_time_ms"));
    }
    if let Some(rate) = p.cpu_rate_millicpus {
        if !(MIN_CPU_RATE_MILLICPUS..=MAX_CPU_RATE_MILLICPUS).contains(&rate) {
            return Err(r(
                POLICY_LIMIT_INVALID,
                format!(
                    "cpu_rate_millicpus must lie in {MIN_CPU_RATE_MILLICPUS}..={MAX_CPU_RATE_MILLICPUS}"
                ),
            )
            .at("cpu_rate_millicpus"));
        }
    }
    Ok(ResourceProfile {
        cpu_rate_millicpus: p.cpu_rate_millicpus,
        profile_id: id,
        limits: ResourceLimits {
            cpu_time_ms: p.cpu_time_ms,
            memory_bytes: p.memory_bytes,
            pids: p.pids,
            wall_time_ms: p.wall_time_ms,
            disk_bytes: p.disk_bytes,
            terminal_output_bytes: p.terminal_output_bytes,
        },
    })
}

fn alias(a: &RawAlias) -> Result<PathAlias, Rejection> {
    let id = AliasId::new(a.alias.clone()).map_err(|e| e.at("alias"))?;
    let host = path(&a.host_path, "host_path")?;
    check_not_restricted(&host, RESTRICTED_HOST_ROOTS).map_err(|e| e.at("host_path"))?;
    let target = path(&a.target_path, "target_path")?;
    check_not_restricted(&target, RESTRICTED_TARGET_ROOTS).map_err(|e| e.at("target_path"))?;
    if a.max_ttl_secs == 0 || a.max_ttl_secs > MAX_ALIAS_TTL_SECS {
        return Err(r(
            POLICY_ALIAS_TTL_INVALID,
            format!("max_ttl_secs must lie in 1..={MAX_ALIAS_TTL_SECS}"),
        )
        .at("max_ttl_secs"));
    }
    if a.access.is_empty() {
        return Err(r(POLICY_EMPTY, "an alias needs at least one access tuple").at("access"));
    }
    if a.access.len() > 4 {
        return Err(r(POLICY_TOO_MANY, "at most one tuple per access mode (4)").at("access"));
    }
    let mut access = Vec::with_capacity(a.access.len());
    for (i, t) in a.access.iter().enumerate() {
        access.push(tuple(t).map_err(|e| e.at(idx("access", i)))?);
    }
    for (i, w) in access.windows(2).enumerate() {
        if w[0].access == w[1].access {
            return Err(r(
                POLICY_ACCESS_DUPLICATE,
                format!("two tuples for {}", w[1].access.as_str()),
            )
            .at(idx("access", i + 1)));
        }
        if w[0].access.as_str() > w[1].access.as_str() {
            return Err(r(
                POLICY_ARRAY_NOT_CANONICAL,
                "access tuples must be sorted by access",
            )
            .at(idx("access", i + 1)));
        }
    }
    Ok(PathAlias {
        alias: id,
        host_path: host,
        target_path: target,
        max_ttl_secs: a.max_ttl_secs,
        access,
    })
}

fn tuple(t: &RawAccess) -> Result<AccessTuple, Rejection> {
    let unknown = |f: &str, v: &str| {
        r(
            POLICY_ACCESS_UNKNOWN,
            format!("{v:?} is not a defined {f} value"),
        )
        .at(f)
    };
    let access = Access::parse(&t.access).ok_or_else(|| unknown("access", &t.access))?;
    let materialization = Materialization::parse(&t.materialization)
        .ok_or_else(|| unknown("materialization", &t.materialization))?;
    let create_policy = CreatePolicy::parse(&t.create_policy)
        .ok_or_else(|| unknown("create_policy", &t.create_policy))?;
    let cleanup_policy = CleanupPolicy::parse(&t.cleanup_policy)
        .ok_or_else(|| unknown("cleanup_policy", &t.cleanup_policy))?;
    let (mat, cleanup, writable) = match access {
        Access::ReadOnly => (Materialization::Bind, CleanupPolicy::None, false),
        Access::EphemeralWrite => (Materialization::Copy, CleanupPolicy::Remove, true),
        Access::RetainedWrite => (Materialization::Copy, CleanupPolicy::Retain, true),
        Access::DirectWrite => (Materialization::Bind, CleanupPolicy::None, true),
    };
    if materialization != mat || cleanup_policy != cleanup {
        return Err(r(
            POLICY_ACCESS_TUPLE_INVALID,
            format!(
                "{} requires materialization {} and cleanup_policy {}",
                access.as_str(),
                mat.as_str(),
                cleanup.as_str()
            ),
        ));
    }
    if !writable && create_policy != CreatePolicy::RequireExisting {
        return Err(r(
            POLICY_ACCESS_TUPLE_INVALID,
            "read_only requires create_policy require_existing",
        )
        .at("create_policy"));
    }
    let bytes_ok = if writable {
        t.max_bytes > 0 && t.max_bytes <= MAX_QUOTA_BYTES
    } else {
        t.max_bytes == 0
    };
    if !bytes_ok {
        return Err(r(
            POLICY_MAX_BYTES_INVALID,
            format!(
                "max_bytes must be 1..={MAX_QUOTA_BYTES} for writable access and 0 for read_only"
            ),
        )
        .at("max_bytes"));
    }
    Ok(AccessTuple {
        access,
        materialization,
        create_policy,
        cleanup_policy,
        max_bytes: t.max_bytes,
    })
}
