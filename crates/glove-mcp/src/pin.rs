//! Tool-definition pinning.
//!
//! **Digests.** A tool's *definition* is the object of exactly the members
//! `name`, `title`, `description`, `inputSchema`, `outputSchema` and
//! `annotations` of its `tools/list` entry that are present (anything else
//! the upstream sends — `_meta`, `icons`, `execution` — is neither pinned
//! nor ever shown to the agent). Its digest is
//! `SHA-256("glove.mcp-tool.v1" || 0x00 || canonical(definition))`, with
//! [`crate::json::canonical`] (Glove's canonical JSON, extended to
//! non-integer numbers). A server's digest is
//! `SHA-256("glove.mcp-server.v1" || 0x00 || canonical({"instructions":
//! <string or null>, "tools": [<tool digests as hex, sorted>]}))` over
//! every tool it lists, allowed or not.
//!
//! **Where pins come from.** A server whose profile entry has `pins` is
//! pinned by the profile alone: an allowed tool without a profile pin is
//! blocked, and a server digest that differs from a pinned one blocks
//! every tool of the server. Otherwise the pins are those of the **pin
//! file** ([`PinFile`]): an allowed tool seen for the first time is
//! recorded there (and audited `pinned`); the server digest is recorded at
//! first sight too. A file is protected like a journal's: a regular file of
//! mode 0600 owned by the user, one link, no symbolic link as its last
//! component, at most [`MAX_PIN_FILE_BYTES`], in a directory of mode 0700
//! owned by the user, rewritten whole and atomically
//! ([`glove_journal::atomic::write_file`]).
//!
//! **What a difference does.** A tool whose digest differs from its pin —
//! at start, after `notifications/tools/list_changed`, or in any later
//! listing (an agent's `tools/list` lists the server again, at most once
//! a second per server: a server that changes a tool without notifying
//! is caught when the agent looks) — is blocked: it leaves the agent's `tools/list`, its calls
//! fail with `mcp_pin_mismatch`, and the difference is audited once per
//! new digest; the digest seen is kept in the file as *pending*. A renamed
//! tool is a new tool (unpinned, recorded at first sight if allowed). A
//! changed server digest in the pin file blocks nothing by itself — the
//! mediator never relays upstream instructions — but is audited and kept
//! as pending. [`approve`] makes a pending (or a given) digest the pin;
//! it takes effect at the next start.

use crate::json;
use glove_types::canon::{self, Form};
use glove_types::codes::mcp::MCP_PIN_FILE_INVALID;
use glove_types::{Rejection, Sha256Digest};
use rustix::fs::{self, FileType, Mode, OFlags, CWD};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::io::Read;
use std::os::fd::AsFd;
use std::path::Path;

/// Domain of a tool digest.
pub const TOOL_DOMAIN: &str = "glove.mcp-tool.v1";
/// Domain of a server digest.
pub const SERVER_DOMAIN: &str = "glove.mcp-server.v1";
/// Largest pin file.
pub const MAX_PIN_FILE_BYTES: usize = 1 << 20;
/// The most bytes of kept definitions over a pin file, as the file holds
/// them (canonical JSON in a JSON string); a definition past it is pinned
/// by its digest only.
pub const MAX_KEPT_DEFINITION_BYTES: usize = 512 << 10;

const DEFINITION_MEMBERS: &[&str] = &[
    "name",
    "title",
    "description",
    "inputSchema",
    "outputSchema",
    "annotations",
];

/// The pinned part of a `tools/list` entry, or `None` when the entry has
/// no string `name` or no object `inputSchema`.
pub fn tool_definition(entry: &Value) -> Option<Value> {
    let o = entry.as_object()?;
    o.get("name")?.as_str()?;
    o.get("inputSchema")?.as_object()?;
    let mut d = Map::new();
    for k in DEFINITION_MEMBERS {
        if let Some(v) = o.get(*k) {
            d.insert((*k).to_owned(), v.clone());
        }
    }
    Some(Value::Object(d))
}

/// The digest of a definition (see the module docs).
pub fn tool_digest(definition: &Value) -> Sha256Digest {
    json::digest(TOOL_DOMAIN, definition)
}

/// The digest of a server (see the module docs).
pub fn server_digest(instructions: Option<&str>, tools: &[Sha256Digest]) -> Sha256Digest {
    let mut hex: Vec<String> = tools.iter().map(Sha256Digest::to_hex).collect();
    hex.sort();
    let mut m = Map::new();
    m.insert(
        "instructions".into(),
        instructions.map_or(Value::Null, Value::from),
    );
    m.insert(
        "tools".into(),
        Value::Array(hex.into_iter().map(Value::from).collect()),
    );
    json::digest(SERVER_DOMAIN, &Value::Object(m))
}

/// The pins of one server in the pin file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerPins {
    /// The server digest recorded at first sight (or approved).
    pub server: Option<Sha256Digest>,
    /// A server digest seen that differs from `server`.
    pub pending_server: Option<Sha256Digest>,
    /// Tool pins by upstream tool name.
    pub tools: BTreeMap<String, Sha256Digest>,
    /// Tool digests seen that differ from their pins.
    pub pending: BTreeMap<String, Sha256Digest>,
    /// The definitions behind the pinned and pending tool digests, as far
    /// as they were seen and fit ([`MAX_KEPT_DEFINITION_BYTES`]), for
    /// `pins show` ([`render_definition`]).
    pub definitions: BTreeMap<Sha256Digest, Value>,
}

/// How long [`PinFile::update`] waits for the pin file's lock.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The pin file's contents.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PinFile {
    /// Pins by server id.
    pub servers: BTreeMap<String, ServerPins>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileWire {
    version: u32,
    servers: BTreeMap<String, ServerWire>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ServerWire {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    server: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pending_server: Option<String>,
    #[serde(default)]
    tools: BTreeMap<String, String>,
    #[serde(default)]
    pending: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    definitions: BTreeMap<String, String>,
}

fn bad(m: impl Into<String>) -> Rejection {
    Rejection::new(MCP_PIN_FILE_INVALID, m)
}

fn digest_at(s: &str, at: &str) -> Result<Sha256Digest, Rejection> {
    Sha256Digest::parse(s).map_err(|r| bad(r.message().to_owned()).at(at))
}

impl PinFile {
    /// Decodes a pin file's bytes (strict JSON, `version` 1, server ids
    /// and tool names as the profile allows them, digests as 64 hex).
    pub fn decode(bytes: &[u8]) -> Result<PinFile, Rejection> {
        let w: FileWire = canon::decode(bytes, MAX_PIN_FILE_BYTES, Form::Strict)
            .map_err(|r| bad(format!("{}: {}", r.code(), r.message())).at(r.location()))?;
        if w.version != 1 {
            return Err(bad("only version 1 is known").at("version"));
        }
        let mut out = PinFile::default();
        for (id, s) in w.servers {
            let at = format!("servers.{id}");
            if !crate::profile::is_server_id(&id) {
                return Err(bad("not a server id").at(at));
            }
            let mut p = ServerPins::default();
            if let Some(d) = &s.server {
                p.server = Some(digest_at(d, &format!("{at}.server"))?);
            }
            if let Some(d) = &s.pending_server {
                p.pending_server = Some(digest_at(d, &format!("{at}.pending_server"))?);
            }
            for (map, into, what) in [
                (&s.tools, &mut p.tools, "tools"),
                (&s.pending, &mut p.pending, "pending"),
            ] {
                for (name, d) in map {
                    let here = format!("{at}.{what}.{name}");
                    if !crate::profile::is_tool_name(name) {
                        return Err(bad("not a tool name").at(here));
                    }
                    into.insert(name.clone(), digest_at(d, &here)?);
                }
            }
            for (d, text) in &s.definitions {
                let here = format!("{at}.definitions.{d}");
                let digest = digest_at(d, &here)?;
                let def = json::parse(text.as_bytes())
                    .ok()
                    .filter(|v| tool_definition(v).as_ref() == Some(v))
                    .ok_or_else(|| bad("not a tool definition").at(&here))?;
                if tool_digest(&def) != digest {
                    return Err(bad("the definition does not have that digest").at(here));
                }
                p.definitions.insert(digest, def);
            }
            out.servers.insert(id, p);
        }
        Ok(out)
    }

    /// The canonical encoding.
    pub fn encode(&self) -> Vec<u8> {
        let hex = |m: &BTreeMap<String, Sha256Digest>| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.to_hex()))
                .collect::<BTreeMap<_, _>>()
        };
        let w = FileWire {
            version: 1,
            servers: self
                .servers
                .iter()
                .map(|(id, p)| {
                    (
                        id.clone(),
                        ServerWire {
                            server: p.server.map(|d| d.to_hex()),
                            pending_server: p.pending_server.map(|d| d.to_hex()),
                            tools: hex(&p.tools),
                            pending: hex(&p.pending),
                            definitions: p
                                .definitions
                                .iter()
                                .map(|(d, v)| {
                                    let text = String::from_utf8(json::canonical(v));
                                    (d.to_hex(), text.unwrap_or_default())
                                })
                                .collect(),
                        },
                    )
                })
                .collect(),
        };
        // Strings and integers only: canonical encoding cannot fail.
        canon::encode(&w).unwrap_or_default()
    }

    /// Reads a pin file; a missing file is an empty one.
    pub fn load(path: &Path) -> Result<PinFile, Rejection> {
        check_dir(path)?;
        let fd = match fs::openat(
            CWD,
            path,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Ok(PinFile::default()),
            Err(rustix::io::Errno::LOOP) => {
                return Err(bad("the pin file is a symbolic link"));
            }
            Err(e) => return Err(bad(format!("cannot open the pin file: {e}"))),
        };
        let st = fs::fstat(&fd).map_err(|e| bad(format!("cannot stat the pin file: {e}")))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(bad("the pin file is not a regular file"));
        }
        if st.st_mode & 0o7777 != 0o600 || st.st_uid != rustix::process::geteuid().as_raw() {
            return Err(bad("the pin file must be mode 0600 and owned by the user"));
        }
        if st.st_nlink != 1 {
            return Err(bad("the pin file has more than one link"));
        }
        let mut bytes = Vec::new();
        std::fs::File::from(fd)
            .take(MAX_PIN_FILE_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| bad(format!("cannot read the pin file: {e}")))?;
        PinFile::decode(&bytes)
    }

    /// Reads the pin file, lets `f` change it and saves it when it
    /// changed, holding an exclusive lock (`flock` on `<file>.lock` beside
    /// it) throughout: mediators of several sessions and `pins approve`
    /// sharing one pin file each change what is on disk now, never an old
    /// copy, so no approval or first sight is lost.
    pub fn update<R>(
        path: &Path,
        f: impl FnOnce(&mut PinFile) -> R,
    ) -> Result<(PinFile, R), Rejection> {
        let dir = check_dir(path)?;
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| bad("the pin file path has no UTF-8 file name"))?;
        let lock = fs::openat(
            dir.as_fd(),
            format!("{name}.lock"),
            OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| bad(format!("cannot open the pin file's lock: {e}")))?;
        // Bounded: a holder that never lets go fails this update instead
        // of stalling the caller for good.
        let deadline = std::time::Instant::now() + LOCK_WAIT;
        loop {
            match fs::flock(&lock, fs::FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => break,
                Err(rustix::io::Errno::WOULDBLOCK) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Err(e) => return Err(bad(format!("cannot lock the pin file: {e}"))),
            }
        }
        let mut file = PinFile::load(path)?;
        let before = file.encode();
        let r = f(&mut file);
        if file.encode() != before {
            file.save(path)?;
        }
        // The lock goes with its descriptor.
        drop(lock);
        Ok((file, r))
    }

    /// Replaces the pin file atomically (mode 0600).
    pub fn save(&self, path: &Path) -> Result<(), Rejection> {
        let dir = check_dir(path)?;
        let name = path
            .file_name()
            .ok_or_else(|| bad("the pin file path has no file name"))?;
        glove_journal::atomic::write_file(dir.as_fd(), name, &self.encode())
            .map_err(|e| bad(format!("cannot write the pin file: {e}")))
    }
}

/// Opens the pin file's directory and checks it is the user's, mode 0700.
fn check_dir(path: &Path) -> Result<rustix::fd::OwnedFd, Rejection> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let fd = fs::openat(
        CWD,
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| bad(format!("cannot open the pin file's directory: {e}")))?;
    let st = fs::fstat(&fd).map_err(|e| bad(format!("cannot stat the directory: {e}")))?;
    if st.st_mode & 0o7777 != 0o700 || st.st_uid != rustix::process::geteuid().as_raw() {
        return Err(bad(
            "the pin file's directory must be mode 0700 and owned by the user",
        ));
    }
    Ok(fd)
}

/// `pins show`: the pin file's contents.
pub fn show(path: &Path) -> Result<PinFile, Rejection> {
    PinFile::load(path)
}

/// `pins approve`: makes `digest` (or, when `None`, the pending digest)
/// the pin of `tool` of `server` — or, with `tool` `None`, of the server
/// digest — and drops the pending entry. Returns the digest now pinned.
pub fn approve(
    path: &Path,
    server: &str,
    tool: Option<&str>,
    digest: Option<Sha256Digest>,
) -> Result<Sha256Digest, Rejection> {
    if !crate::profile::is_server_id(server) {
        return Err(bad("not a server id"));
    }
    let (_, r) = PinFile::update(path, |file| {
        // A refused approval leaves the file as it was.
        let before = file.clone();
        let r = approve_in(file, server, tool, digest);
        if r.is_err() {
            *file = before;
        }
        r
    })?;
    r
}

fn approve_in(
    file: &mut PinFile,
    server: &str,
    tool: Option<&str>,
    digest: Option<Sha256Digest>,
) -> Result<Sha256Digest, Rejection> {
    let pins = file.servers.entry(server.to_owned()).or_default();
    let pinned = match tool {
        Some(t) => {
            if !crate::profile::is_tool_name(t) {
                return Err(bad("not a tool name"));
            }
            let d = digest
                .or_else(|| pins.pending.get(t).copied())
                .ok_or_else(|| bad("no pending digest for that tool; name one"))?;
            pins.pending.remove(t);
            pins.tools.insert(t.to_owned(), d);
            prune(pins);
            d
        }
        None => {
            let d = digest
                .or(pins.pending_server)
                .ok_or_else(|| bad("no pending server digest; name one"))?;
            pins.pending_server = None;
            pins.server = Some(d);
            d
        }
    };
    Ok(pinned)
}

/// Drops the kept definitions no pinned or pending digest names.
fn prune(pins: &mut ServerPins) {
    let named: std::collections::BTreeSet<Sha256Digest> = pins
        .tools
        .values()
        .chain(pins.pending.values())
        .copied()
        .collect();
    pins.definitions.retain(|d, _| named.contains(d));
}

/// Keeps the definitions `seen` (by digest) of `server`'s pinned and
/// pending digests in `file`, while the file's kept definitions stay
/// within [`MAX_KEPT_DEFINITION_BYTES`], and drops those no digest names.
pub(crate) fn keep_definitions(
    file: &mut PinFile,
    server: &str,
    seen: &BTreeMap<Sha256Digest, &Value>,
) {
    let mut kept: usize = file
        .servers
        .values()
        .flat_map(|p| p.definitions.values())
        .map(stored_len)
        .fold(0, usize::saturating_add);
    let Some(pins) = file.servers.get_mut(server) else {
        return;
    };
    prune(pins);
    let named: Vec<Sha256Digest> = pins
        .tools
        .values()
        .chain(pins.pending.values())
        .copied()
        .collect();
    for d in named {
        if pins.definitions.contains_key(&d) {
            continue;
        }
        let Some(def) = seen.get(&d) else {
            continue;
        };
        let n = stored_len(def);
        if kept.saturating_add(n) > MAX_KEPT_DEFINITION_BYTES {
            continue;
        }
        kept += n;
        pins.definitions.insert(d, (*def).clone());
    }
}

/// The bytes a kept definition takes in the file: its canonical JSON as
/// the JSON string the file holds, where a `"` or `\\` takes twice its
/// canonical bytes (measured so, the kept definitions cannot make a file
/// past [`MAX_PIN_FILE_BYTES`], which no read would accept).
fn stored_len(def: &Value) -> usize {
    let text = String::from_utf8_lossy(&json::canonical(def)).into_owned();
    canon::encode(&text).map_or(usize::MAX, |b| b.len())
}

/// A kept definition for people (`pins show`): one line per member
/// (`title`, `description`, then the schemas and annotations as compact
/// JSON), every character that is invisible or a control written as
/// `\u{…}` so that nothing hides in it, long text wrapped by nothing.
pub fn render_definition(def: &Value) -> Vec<String> {
    fn shown(s: &str) -> String {
        let mut out = String::with_capacity(s.len());
        for c in s.chars() {
            if c == '\n' {
                out.push_str("\\n");
            } else if crate::sanitize::is_hidden(c)
                || crate::sanitize::is_variation_selector(c)
                || c.is_control()
            {
                out.extend(c.escape_unicode());
            } else {
                out.push(c);
            }
        }
        out
    }
    let mut lines = Vec::new();
    for k in DEFINITION_MEMBERS.iter().filter(|k| **k != "name") {
        let Some(v) = def.get(*k) else {
            continue;
        };
        let text = match v {
            Value::String(s) => shown(s),
            other => shown(&String::from_utf8_lossy(&json::canonical(other))),
        };
        lines.push(format!("{k}: {text}"));
    }
    lines
}

/// How one allowed tool stands against its pin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Its digest equals its pin.
    Matches,
    /// Seen for the first time; now recorded in the pin file.
    FirstSight,
    /// Differs from its pin (or, under profile pins, has none, or the
    /// server digest differs): blocked.
    Mismatch,
}

/// Judges a server's allowed tools against the pins; updates `file`
/// (first sights, pending digests) when the server is pinned by the file.
/// Returns the verdict per tool and whether the server digest differs
/// from its pin.
pub(crate) fn judge(
    profile: Option<&crate::profile::ProfilePins>,
    file: &mut PinFile,
    server: &str,
    server_digest: Sha256Digest,
    tools: &BTreeMap<String, Sha256Digest>,
) -> (BTreeMap<String, Verdict>, bool) {
    let mut out = BTreeMap::new();
    if let Some(p) = profile {
        let server_differs = p.server.is_some_and(|d| d != server_digest);
        for (name, d) in tools {
            let v = match p.tools.get(name) {
                Some(pin) if *pin == *d && !server_differs => Verdict::Matches,
                _ => Verdict::Mismatch,
            };
            out.insert(name.clone(), v);
        }
        return (out, server_differs);
    }
    let pins = file.servers.entry(server.to_owned()).or_default();
    let server_differs = match pins.server {
        None => {
            pins.server = Some(server_digest);
            false
        }
        Some(d) if d == server_digest => {
            pins.pending_server = None;
            false
        }
        Some(_) => {
            pins.pending_server = Some(server_digest);
            true
        }
    };
    for (name, d) in tools {
        let v = match pins.tools.get(name) {
            None => {
                pins.tools.insert(name.clone(), *d);
                Verdict::FirstSight
            }
            Some(pin) if pin == d => {
                pins.pending.remove(name);
                Verdict::Matches
            }
            Some(_) => {
                pins.pending.insert(name.clone(), *d);
                Verdict::Mismatch
            }
        };
        out.insert(name.clone(), v);
    }
    (out, server_differs)
}

#[cfg(test)]
mod tests;
