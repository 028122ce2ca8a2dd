//! Glove's own view of the upstream tools: what each server lists, which
//! of those the profile allows, how each stands against its pin, and the
//! names the agent sees.
//!
//! **Names.** An allowed tool whose upstream name is unique among the
//! allowed tools of all servers, and has no `__`, is shown under that
//! name. Every other one — two servers offering the same name, or a name
//! with `__` — is shown as `<server_id>__<tool>`. Server ids contain no
//! `__` and do not end with `_`, so a namespaced name splits at its first
//! `__`, and a plain name (no `__`) never equals a namespaced one: no tool
//! ever shadows another. A tool that becomes ambiguous later (a second
//! server lists the same name after `list_changed`) changes its shown name,
//! and the agent is told the list changed.
//!
//! **Withdrawn servers.** A server whose re-list failed, or that the
//! mediator stopped for misbehaving, is *withdrawn*: its tools keep
//! their names but are not shown, and calling one is
//! `mcp_upstream_failed`. A later listing of the server (a successful
//! re-list) replaces its view and so restores its tools, each judged
//! against its pin again.
//!
//! **Resolution** of a called name: a shown name resolves to its tool
//! (which may be blocked by its pin: `mcp_pin_mismatch`, or withdrawn
//! with its server: `mcp_upstream_failed`). Otherwise a
//! name that an upstream lists but the profile does not allow (plain, or
//! as `<server>__<tool>`) is `mcp_tool_denied`; anything else — including
//! the plain name of a tool shown namespaced, and the namespaced name of
//! a tool shown plain — is `mcp_tool_unknown`, whatever the upstream would
//! have said (the SDK servers answer an unknown tool with an `isError`
//! result).

use crate::pin::{self, PinFile, Verdict};
use crate::profile::{ServerProfile, NAMESPACE_SEPARATOR};
use glove_types::codes::mcp::*;
use glove_types::{ErrorCode, Sha256Digest};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// One allowed tool present upstream.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    /// Its pinned part (with the upstream's name).
    pub(crate) definition: Value,
    pub(crate) digest: Sha256Digest,
    pub(crate) blocked: bool,
    /// Blocked for invisible or control characters in its definition
    /// (never pinned; calls are `mcp_definition_refused`).
    pub(crate) refused: bool,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct ServerView {
    /// Every name the server lists.
    listed: BTreeSet<String>,
    /// The allowed tools it lists.
    allowed: BTreeMap<String, Entry>,
    /// Digests already audited as mismatching or refused (per tool;
    /// `None` key for the server digest), so each is audited once: every
    /// one of them up to [`REPORTED_PER_TOOL`], so a server alternating
    /// between definitions is not reported on every re-list.
    reported: BTreeMap<Option<String>, Reported>,
    /// Whether the server's tools are withdrawn (see the module docs).
    withdrawn: bool,
}

/// The digests remembered as reported per tool (the oldest is forgotten
/// past it; a server cycling through more definitions than this is
/// reported again, from its bounded budget).
pub(crate) const REPORTED_PER_TOOL: usize = 16;

/// The digests reported for one tool, oldest first.
#[derive(Clone, Debug, Default)]
struct Reported(std::collections::VecDeque<Sha256Digest>);

impl Reported {
    /// Remembers `d`; `true` when it was not remembered yet (to report).
    fn first(&mut self, d: Sha256Digest) -> bool {
        if self.0.contains(&d) {
            return false;
        }
        if self.0.len() >= REPORTED_PER_TOOL {
            self.0.pop_front();
        }
        self.0.push_back(d);
        true
    }
}

/// Something a listing showed that the audit must record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Finding {
    /// A tool recorded at first sight.
    Pinned(String, Sha256Digest),
    /// A tool (or, `None`, the server) whose digest differs from its pin.
    Mismatch(Option<String>, Sha256Digest),
    /// An allowed tool whose definition carries invisible or control
    /// characters the profile does not allow for it (not pinned).
    Refused(String, Sha256Digest),
}

#[derive(Debug, Default)]
pub(crate) struct View {
    servers: BTreeMap<String, ServerView>,
    /// Shown name → (server, upstream tool name).
    names: BTreeMap<String, (String, String)>,
}

/// A resolved call target.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    pub(crate) server: String,
    pub(crate) tool: String,
    pub(crate) entry: Entry,
}

impl View {
    /// Replaces what `server` lists with `tools` (raw `tools/list`
    /// entries) and judges the allowed ones against the pins. Returns the
    /// findings to audit; `file` is updated in place.
    pub(crate) fn apply(
        &mut self,
        profile: &ServerProfile,
        file: &mut PinFile,
        tools: &[Value],
        instructions: Option<&str>,
    ) -> Vec<Finding> {
        let mut defs: BTreeMap<String, (Value, Sha256Digest)> = BTreeMap::new();
        let mut doubled: BTreeSet<String> = BTreeSet::new();
        let mut listed = BTreeSet::new();
        let mut all_digests = Vec::with_capacity(tools.len());
        for t in tools {
            let Some(def) = pin::tool_definition(t) else {
                continue;
            };
            let Some(name) = def.get("name").and_then(Value::as_str).map(str::to_owned) else {
                continue;
            };
            let d = pin::tool_digest(&def);
            all_digests.push(d);
            if !crate::profile::is_tool_name(&name) {
                continue;
            }
            listed.insert(name.clone());
            if defs.insert(name.clone(), (def, d)).is_some() {
                doubled.insert(name);
            }
        }
        let server_digest = pin::server_digest(instructions, &all_digests);
        // A definition with characters no one sees (or that drive a
        // terminal) is refused before it could be pinned, unless the
        // profile allows them for that tool.
        let refused: BTreeSet<String> = defs
            .iter()
            .filter(|(n, (def, _))| {
                profile.tools().get(*n).is_some_and(|p| {
                    !p.allow_hidden_characters() && crate::sanitize::hidden_character(def).is_some()
                })
            })
            .map(|(n, _)| n.clone())
            .collect();
        let allowed: BTreeMap<String, Sha256Digest> = defs
            .iter()
            .filter(|(n, _)| profile.tools().contains_key(*n) && !refused.contains(*n))
            .map(|(n, (_, d))| (n.clone(), *d))
            .collect();
        let (verdicts, server_differs) =
            pin::judge(profile.pins(), file, profile.id(), server_digest, &allowed);
        if profile.pins().is_none() {
            let seen: BTreeMap<Sha256Digest, &Value> = defs
                .iter()
                .filter(|(n, _)| allowed.contains_key(*n))
                .map(|(_, (def, d))| (*d, def))
                .collect();
            pin::keep_definitions(file, profile.id(), &seen);
        }
        let old = self.servers.remove(profile.id()).unwrap_or_default();
        let mut reported = old.reported;
        let mut findings = Vec::new();
        if server_differs && reported.entry(None).or_default().first(server_digest) {
            findings.push(Finding::Mismatch(None, server_digest));
        }
        let mut entries = BTreeMap::new();
        for (name, (def, d)) in defs {
            if refused.contains(&name) {
                if reported.entry(Some(name.clone())).or_default().first(d) {
                    findings.push(Finding::Refused(name.clone(), d));
                }
                entries.insert(
                    name,
                    Entry {
                        definition: def,
                        digest: d,
                        blocked: true,
                        refused: true,
                    },
                );
                continue;
            }
            let Some(v) = verdicts.get(&name) else {
                continue;
            };
            let mut blocked = doubled.contains(&name);
            match v {
                Verdict::Matches => {}
                Verdict::FirstSight => findings.push(Finding::Pinned(name.clone(), d)),
                Verdict::Mismatch => {
                    blocked = true;
                    if reported.entry(Some(name.clone())).or_default().first(d) {
                        findings.push(Finding::Mismatch(Some(name.clone()), d));
                    }
                }
            }
            entries.insert(
                name,
                Entry {
                    definition: def,
                    digest: d,
                    blocked,
                    refused: false,
                },
            );
        }
        self.servers.insert(
            profile.id().to_owned(),
            ServerView {
                listed,
                allowed: entries,
                reported,
                withdrawn: false,
            },
        );
        self.rename();
        findings
    }

    /// Blocks tools of `server` (first sights that could not be recorded).
    pub(crate) fn block(&mut self, server: &str, tools: &[String]) {
        if let Some(s) = self.servers.get_mut(server) {
            for t in tools {
                if let Some(e) = s.allowed.get_mut(t) {
                    e.blocked = true;
                }
            }
        }
    }

    /// Withdraws every tool of `server` until its next listing (see the
    /// module docs).
    pub(crate) fn withdraw(&mut self, server: &str) {
        if let Some(s) = self.servers.get_mut(server) {
            s.withdrawn = true;
        }
    }

    /// The tools shown now: shown name and entry.
    fn shown(&self) -> impl Iterator<Item = (&String, &Entry)> + '_ {
        self.names.iter().filter_map(|(shown, (server, tool))| {
            let s = self.servers.get(server)?;
            let e = s.allowed.get(tool)?;
            (!s.withdrawn && !e.blocked).then_some((shown, e))
        })
    }

    fn rename(&mut self) {
        let mut count: BTreeMap<&str, usize> = BTreeMap::new();
        for s in self.servers.values() {
            for t in s.allowed.keys() {
                *count.entry(t.as_str()).or_default() += 1;
            }
        }
        let mut names = BTreeMap::new();
        for (server, s) in &self.servers {
            for t in s.allowed.keys() {
                let plain = count.get(t.as_str()) == Some(&1) && !t.contains(NAMESPACE_SEPARATOR);
                let shown = if plain {
                    t.clone()
                } else {
                    format!("{server}{NAMESPACE_SEPARATOR}{t}")
                };
                names.insert(shown, (server.clone(), t.clone()));
            }
        }
        self.names = names;
    }

    /// Resolves a called name (see the module docs).
    pub(crate) fn resolve(
        &self,
        name: &str,
    ) -> Result<Target, (ErrorCode, Option<(String, String)>)> {
        if let Some((server, tool)) = self.names.get(name) {
            let view = self.servers.get(server);
            if let Some(entry) = view.and_then(|s| s.allowed.get(tool)) {
                if view.is_some_and(|s| s.withdrawn) {
                    return Err((MCP_UPSTREAM_FAILED, Some((server.clone(), tool.clone()))));
                }
                if entry.refused {
                    return Err((MCP_DEFINITION_REFUSED, Some((server.clone(), tool.clone()))));
                }
                if entry.blocked {
                    return Err((MCP_PIN_MISMATCH, Some((server.clone(), tool.clone()))));
                }
                return Ok(Target {
                    server: server.clone(),
                    tool: tool.clone(),
                    entry: entry.clone(),
                });
            }
        }
        // Listed upstream but not allowed (an allowed tool is reached only
        // by its shown name).
        let unlisted = |s: &ServerView, t: &str| s.listed.contains(t) && !s.allowed.contains_key(t);
        if let Some((server, tool)) = name.split_once(NAMESPACE_SEPARATOR) {
            if self.servers.get(server).is_some_and(|s| unlisted(s, tool)) {
                return Err((MCP_TOOL_DENIED, Some((server.to_owned(), tool.to_owned()))));
            }
        }
        if let Some((server, _)) = self.servers.iter().find(|(_, s)| unlisted(s, name)) {
            return Err((MCP_TOOL_DENIED, Some((server.clone(), name.to_owned()))));
        }
        Err((MCP_TOOL_UNKNOWN, None))
    }

    /// A call on a connection that reaches only `server`, by the
    /// upstream's own tool name: an allowed tool (blocked by its pin:
    /// `mcp_pin_mismatch`), one listed but not allowed (`mcp_tool_denied`),
    /// or `mcp_tool_unknown`.
    pub(crate) fn resolve_scoped(
        &self,
        server: &str,
        name: &str,
    ) -> Result<Target, (ErrorCode, Option<(String, String)>)> {
        let Some(s) = self.servers.get(server) else {
            return Err((MCP_TOOL_UNKNOWN, None));
        };
        let at = Some((server.to_owned(), name.to_owned()));
        match s.allowed.get(name) {
            Some(_) if s.withdrawn => Err((MCP_UPSTREAM_FAILED, at)),
            Some(e) if e.refused => Err((MCP_DEFINITION_REFUSED, at)),
            Some(e) if e.blocked => Err((MCP_PIN_MISMATCH, at)),
            Some(e) => Ok(Target {
                server: server.to_owned(),
                tool: name.to_owned(),
                entry: e.clone(),
            }),
            None if s.listed.contains(name) => Err((MCP_TOOL_DENIED, at)),
            None => Err((MCP_TOOL_UNKNOWN, None)),
        }
    }

    /// The `tools/list` of a connection that reaches only `server`: its
    /// unblocked allowed tools under their own names, sorted (none while
    /// the server is withdrawn).
    pub(crate) fn listing_scoped(&self, server: &str) -> Vec<Value> {
        self.servers
            .get(server)
            .into_iter()
            .filter(|s| !s.withdrawn)
            .flat_map(|s| s.allowed.values())
            .filter(|e| !e.blocked)
            .map(|e| e.definition.clone())
            .collect()
    }

    /// The agent's `tools/list`: every shown tool (unblocked, of a server
    /// not withdrawn) with its pinned definition under its shown name,
    /// sorted by shown name.
    pub(crate) fn listing(&self) -> Vec<Value> {
        self.shown()
            .map(|(shown, e)| {
                let mut d = e.definition.clone();
                if let Some(o) = d.as_object_mut() {
                    o.insert("name".into(), Value::from(shown.clone()));
                }
                d
            })
            .collect()
    }

    /// A fingerprint of the listing (to tell the agent when it changed).
    pub(crate) fn fingerprint(&self) -> Vec<(String, Sha256Digest)> {
        self.shown()
            .map(|(shown, e)| (shown.clone(), e.digest))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Profile;
    use serde_json::json;

    fn profile() -> Profile {
        let p = r#"{"schema_version":1,"servers":[{"server_id":"s","command":{"path":"/bin/true",
            "arguments":[],"environment":[],"working_directory":"/"},"tools":[{"name":"t"}]}]}"#;
        Profile::decode(p.as_bytes()).expect("profile")
    }

    fn tool(description: &str) -> Value {
        json!({"name": "t", "description": description, "inputSchema": {"type": "object"}})
    }

    /// Fourth review, finding 4: only the last reported digest was
    /// remembered, so a server alternating between two changed
    /// definitions was reported again on every re-list.
    #[test]
    fn an_alternating_definition_is_reported_once_per_digest() {
        let p = profile();
        let s = &p.servers()[0];
        let mut file = PinFile::default();
        let mut view = View::default();
        let first = view.apply(s, &mut file, &[tool("v1")], None);
        assert!(matches!(first[..], [Finding::Pinned(..)]), "{first:?}");
        let mut mismatches = 0;
        for n in 0..20 {
            let d = if n % 2 == 0 { "v2" } else { "v3" };
            let f = view.apply(s, &mut file, &[tool(d)], None);
            mismatches += f
                .iter()
                .filter(|f| matches!(f, Finding::Mismatch(Some(_), _)))
                .count();
        }
        assert_eq!(mismatches, 2);
        // Bounded: a server cycling through more definitions than are
        // remembered is reported again (from its budget), never unbounded
        // memory.
        for n in 0..=REPORTED_PER_TOOL {
            view.apply(s, &mut file, &[tool(&format!("w{n}"))], None);
        }
        let again = view.apply(s, &mut file, &[tool("w0")], None);
        assert!(
            again.contains(&Finding::Mismatch(
                Some("t".into()),
                pin::tool_digest(&tool("w0"))
            )),
            "{again:?}"
        );
        assert!(view.servers["s"].reported[&Some("t".into())].0.len() <= REPORTED_PER_TOOL);
    }
}
