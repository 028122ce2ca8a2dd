//! Library bundles: the operator-approved files a plan names by SHA-256, and
//! the expansion of their `skill` entries into a harness's Agent Skills
//! directory.
//!
//! A bundle is one canonical JSON document (`docs/bundles.md` is the
//! format's reference):
//!
//! ```text
//! {"entries":[{"files":[{["executable":true,]"path":…,"text":…},…],
//!              "kind":"skill"|"behavior"|"prompt"|"template"|"workflow",
//!              "name":…},…],
//!  "format":"glove.library-bundle.v1"}
//! ```
//!
//! [`LibraryBundle::decode`] accepts exactly the canonical encoding of a
//! valid value and refuses everything else with a code: a size over
//! [`MAX_BUNDLE_BYTES`] (`bundle_too_large`), anything the strict canonical
//! JSON decoder refuses (`json_*`: a repeated key, whitespace, member order,
//! an unknown or missing field), then the rules of the format
//! (`bundle_*`). [`LibraryBundle::verify`] first checks the bytes against
//! the digest the plan requested them by.
//!
//! Only `skill` entries are ever interpreted: [`expand_skills`] lays each
//! one out as `<skill_dir>/<name>/<path>`. The other known kinds stay in the
//! raw bundle, which then is a launch input in its own right
//! ([`LibraryBundle::has_non_skill_entries`]). An unknown kind is refused
//! at decode, so nothing unrecognised reaches a session.
//!
//! Every check is lexical; this module does no I/O.

use crate::canon::{self, Form};
use crate::codes::bundle::*;
use crate::error::Rejection;
use crate::Sha256Digest;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

mod expand;
pub use expand::{expand_skills, ExpandedFile, SkillExpansion};

/// The `format` of a version-1 bundle.
pub const FORMAT: &str = "glove.library-bundle.v1";

/// Largest bundle, in bytes. Mirrors `glove_sandbox::spec::MAX_BUNDLE_BYTES`
/// (16 MiB), which bounds what the sandbox will read; glove-types does not
/// depend on glove-sandbox, so the two are kept equal by hand (a crate that
/// links both can pin them with a `const` assertion).
pub const MAX_BUNDLE_BYTES: usize = 16 << 20;

/// Most entries in one bundle.
pub const MAX_ENTRIES: usize = 256;

/// Most files in one entry.
pub const MAX_FILES: usize = 128;

/// Longest entry name, in bytes (the Agent Skills bound).
pub const MAX_NAME_LEN: usize = 64;

/// Longest file path inside an entry, in bytes.
pub const MAX_FILE_PATH_LEN: usize = 255;

/// Most components of a file path.
pub const MAX_PATH_COMPONENTS: usize = 8;

/// Longest component of a file path, in bytes.
pub const MAX_COMPONENT_LEN: usize = 100;

/// Largest file text, in bytes of UTF-8.
pub const MAX_TEXT_BYTES: usize = 1 << 20;

/// The manifest every `skill` entry carries at its top level.
pub const SKILL_MANIFEST: &str = "SKILL.md";

/// The domain of the skill expansion digest.
pub const EXPANSION_DOMAIN: &str = "glove.skill-expansion.v1";

/// What an entry is. Only [`EntryKind::Skill`] is interpreted by Glove.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EntryKind {
    /// An Agent Skill, expanded into the harness's skill directory.
    Skill,
    /// A behavior; kept in the raw bundle, never interpreted.
    Behavior,
    /// A prompt; kept in the raw bundle, never interpreted.
    Prompt,
    /// A template; kept in the raw bundle, never interpreted.
    Template,
    /// A workflow; kept in the raw bundle, never interpreted.
    Workflow,
}

impl EntryKind {
    /// The kind as written in a bundle.
    pub const fn as_str(self) -> &'static str {
        match self {
            EntryKind::Skill => "skill",
            EntryKind::Behavior => "behavior",
            EntryKind::Prompt => "prompt",
            EntryKind::Template => "template",
            EntryKind::Workflow => "workflow",
        }
    }

    /// Parses a kind exactly (no case folding); anything else is
    /// `bundle_entry_kind_unknown`.
    pub fn parse(s: &str) -> Result<EntryKind, Rejection> {
        match s {
            "skill" => Ok(EntryKind::Skill),
            "behavior" => Ok(EntryKind::Behavior),
            "prompt" => Ok(EntryKind::Prompt),
            "template" => Ok(EntryKind::Template),
            "workflow" => Ok(EntryKind::Workflow),
            _ => Err(Rejection::new(
                BUNDLE_ENTRY_KIND_UNKNOWN,
                format!("unknown entry kind {:?}", shown(s)),
            )),
        }
    }
}

/// One file of an entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundleFile {
    path: String,
    text: String,
    executable: bool,
}

impl BundleFile {
    /// The path relative to the entry (checked by [`check_file_path`]).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The file's contents.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether the file is to be executable.
    pub fn executable(&self) -> bool {
        self.executable
    }
}

/// One entry of a bundle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundleEntry {
    kind: EntryKind,
    name: String,
    files: Vec<BundleFile>,
}

impl BundleEntry {
    /// The entry's kind.
    pub fn kind(&self) -> EntryKind {
        self.kind
    }

    /// The entry's name (checked by [`check_entry_name`]).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The files, sorted by path.
    pub fn files(&self) -> &[BundleFile] {
        &self.files
    }
}

/// A decoded bundle: only obtainable from bytes that passed every rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LibraryBundle {
    sha256: Sha256Digest,
    entries: Vec<BundleEntry>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireFile {
    path: String,
    text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    executable: Option<bool>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireEntry {
    kind: String,
    name: String,
    files: Vec<WireFile>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    format: String,
    entries: Vec<WireEntry>,
}

/// At most 64 characters of untrusted text, for messages.
fn shown(s: &str) -> String {
    s.chars().take(64).collect()
}

/// Checks an entry name: 1 to [`MAX_NAME_LEN`] bytes of lowercase ASCII
/// letters and digits, joined by single hyphens (no leading, trailing or
/// doubled hyphen) — the Agent Skills name rule.
pub fn check_entry_name(name: &str) -> Result<(), Rejection> {
    let b = name.as_bytes();
    let ok = (1..=MAX_NAME_LEN).contains(&b.len())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--");
    if ok {
        Ok(())
    } else {
        Err(Rejection::new(
            BUNDLE_ENTRY_NAME_INVALID,
            format!(
                "entry name {:?} is not 1-{MAX_NAME_LEN} bytes of [a-z0-9] joined by single hyphens",
                shown(name)
            ),
        ))
    }
}

/// Checks a file path inside an entry: relative, `/`-separated, 1 to
/// [`MAX_PATH_COMPONENTS`] components of 1 to [`MAX_COMPONENT_LEN`] bytes
/// of `[A-Za-z0-9._-]`, none `.` or `..`, at most [`MAX_FILE_PATH_LEN`]
/// bytes in all. An absolute path, a backslash, an empty component (`a//b`,
/// a trailing `/`) and an escape (`../x`) are all `bundle_path_invalid`.
pub fn check_file_path(path: &str) -> Result<(), Rejection> {
    let invalid = |why: &str| {
        Rejection::new(
            BUNDLE_PATH_INVALID,
            format!("file path {:?} {why}", shown(path)),
        )
    };
    if path.is_empty() {
        return Err(invalid("is empty"));
    }
    if path.len() > MAX_FILE_PATH_LEN {
        return Err(invalid(&format!(
            "is longer than {MAX_FILE_PATH_LEN} bytes"
        )));
    }
    if path.starts_with('/') {
        return Err(invalid("is absolute"));
    }
    let mut n = 0;
    for comp in path.split('/') {
        n += 1;
        if n > MAX_PATH_COMPONENTS {
            return Err(invalid(&format!(
                "has more than {MAX_PATH_COMPONENTS} components"
            )));
        }
        match comp {
            "" => return Err(invalid("has an empty component or a trailing '/'")),
            "." | ".." => return Err(invalid("has a '.' or '..' component")),
            _ => {}
        }
        if comp.len() > MAX_COMPONENT_LEN {
            return Err(invalid(&format!(
                "has a component longer than {MAX_COMPONENT_LEN} bytes"
            )));
        }
        if !comp
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
        {
            return Err(invalid("has a byte outside [A-Za-z0-9._-]"));
        }
    }
    Ok(())
}

/// Checks the front matter of a skill's `SKILL.md`, lexically (this is not
/// a YAML parser): the text begins with a line `---`, a later line `---`
/// closes the front matter, and between them exactly one top-level line
/// `name: <value>` whose value (trimmed, one pair of matching quotes
/// removed) is the entry name, and a top-level line `description: …` with a
/// non-empty value. A `\r` before a line's `\n` is ignored.
pub fn check_skill_manifest(text: &str, name: &str) -> Result<(), Rejection> {
    let invalid = |why: String| Rejection::new(BUNDLE_SKILL_MANIFEST_INVALID, why);
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    if lines.next() != Some("---") {
        return Err(invalid(format!(
            "{SKILL_MANIFEST} does not begin with a '---' front-matter line"
        )));
    }
    let mut names = Vec::new();
    let mut described = false;
    let mut closed = false;
    for line in lines {
        if line == "---" {
            closed = true;
            break;
        }
        if let Some(v) = line.strip_prefix("name:") {
            names.push(unquote(v.trim()));
        } else if let Some(v) = line.strip_prefix("description:") {
            described |= !v.trim().is_empty();
        }
    }
    if !closed {
        return Err(invalid(format!(
            "{SKILL_MANIFEST}'s front matter has no closing '---' line"
        )));
    }
    match names.as_slice() {
        [one] if *one == name => {}
        [one] => {
            return Err(invalid(format!(
                "{SKILL_MANIFEST} names the skill {:?}, not the entry name {name:?}",
                shown(one)
            )))
        }
        _ => {
            return Err(invalid(format!(
                "{SKILL_MANIFEST}'s front matter must have exactly one 'name:' line"
            )))
        }
    }
    if !described {
        return Err(invalid(format!(
            "{SKILL_MANIFEST}'s front matter has no non-empty 'description:'"
        )));
    }
    Ok(())
}

fn unquote(v: &str) -> &str {
    for q in ['"', '\''] {
        if let Some(inner) = v.strip_prefix(q).and_then(|r| r.strip_suffix(q)) {
            return inner;
        }
    }
    v
}

impl LibraryBundle {
    /// Decodes a bundle strictly (see the module docs). The bundle's
    /// [`sha256`](Self::sha256) is that of `bytes`.
    pub fn decode(bytes: &[u8]) -> Result<LibraryBundle, Rejection> {
        Self::check_size(bytes)?;
        Self::decode_with(bytes, Sha256Digest::of(bytes))
    }

    /// Checks that `SHA-256(bytes)` is `expected` (before looking at the
    /// bytes in any other way; `bundle_digest_mismatch` otherwise), then
    /// decodes them. This is the call for bytes fetched by the digest a
    /// plan names.
    pub fn verify(bytes: &[u8], expected: &Sha256Digest) -> Result<LibraryBundle, Rejection> {
        Self::check_size(bytes)?;
        let got = Sha256Digest::of(bytes);
        if got != *expected {
            return Err(Rejection::new(
                BUNDLE_DIGEST_MISMATCH,
                format!("the bundle's SHA-256 is {got}, not the requested {expected}"),
            ));
        }
        Self::decode_with(bytes, got)
    }

    /// The canonical encoding: exactly the bytes the bundle was decoded
    /// from. Fails only if canonical encoding itself fails, which it cannot
    /// for a decoded bundle (no numbers).
    pub fn encode(&self) -> Result<Vec<u8>, Rejection> {
        canon::encode(&self.to_wire())
    }

    /// SHA-256 of the bundle's bytes: the digest a plan names it by.
    pub fn sha256(&self) -> &Sha256Digest {
        &self.sha256
    }

    /// The entries, sorted by name.
    pub fn entries(&self) -> &[BundleEntry] {
        &self.entries
    }

    /// The entry called `name`, if any.
    pub fn entry(&self, name: &str) -> Option<&BundleEntry> {
        self.entries
            .binary_search_by(|e| e.name.as_str().cmp(name))
            .ok()
            .and_then(|i| self.entries.get(i))
    }

    /// The `skill` entries, in name order.
    pub fn skills(&self) -> impl Iterator<Item = &BundleEntry> {
        self.entries.iter().filter(|e| e.kind == EntryKind::Skill)
    }

    /// Whether any entry is a known non-skill kind. Such a bundle must be
    /// made available to the session raw (it is a required launch input);
    /// expanding its skills alone does not deliver it.
    pub fn has_non_skill_entries(&self) -> bool {
        self.entries.iter().any(|e| e.kind != EntryKind::Skill)
    }

    fn check_size(bytes: &[u8]) -> Result<(), Rejection> {
        if bytes.len() > MAX_BUNDLE_BYTES {
            return Err(Rejection::new(
                BUNDLE_TOO_LARGE,
                format!(
                    "the bundle is {} bytes; the bound is {MAX_BUNDLE_BYTES}",
                    bytes.len()
                ),
            ));
        }
        Ok(())
    }

    fn decode_with(bytes: &[u8], sha256: Sha256Digest) -> Result<LibraryBundle, Rejection> {
        let wire: Wire = canon::decode(bytes, MAX_BUNDLE_BYTES, Form::Canonical)?;
        let bundle = Self::from_wire(wire, sha256)?;
        // One encoding per value: the canonical JSON check above already
        // fixed member order and whitespace, and `from_wire` refused
        // `"executable":false`; this keeps the promise whatever else changes.
        if bundle.encode()? != bytes {
            return Err(Rejection::new(
                BUNDLE_NONCANONICAL,
                "the bytes are not the encoding of the bundle's value",
            ));
        }
        Ok(bundle)
    }

    fn from_wire(w: Wire, sha256: Sha256Digest) -> Result<LibraryBundle, Rejection> {
        if w.format != FORMAT {
            return Err(Rejection::new(
                BUNDLE_FORMAT_UNKNOWN,
                format!("format {:?} is not {FORMAT}", shown(&w.format)),
            )
            .at("format"));
        }
        count("entries", w.entries.len(), MAX_ENTRIES).map_err(|r| r.at("entries"))?;
        let mut entries: Vec<BundleEntry> = Vec::with_capacity(w.entries.len());
        for (i, e) in w.entries.into_iter().enumerate() {
            let at = format!("entries[{i}]");
            let entry = Self::entry_from_wire(e).map_err(|r| r.at(&at))?;
            if let Some(prev) = entries.last() {
                order(
                    &prev.name,
                    &entry.name,
                    BUNDLE_ENTRY_DUPLICATE,
                    "entries",
                    "name",
                )
                .map_err(|r| r.at(format!("{at}.name")))?;
            }
            entries.push(entry);
        }
        Ok(LibraryBundle { sha256, entries })
    }

    fn entry_from_wire(e: WireEntry) -> Result<BundleEntry, Rejection> {
        let kind = EntryKind::parse(&e.kind).map_err(|r| r.at("kind"))?;
        check_entry_name(&e.name).map_err(|r| r.at("name"))?;
        count("files", e.files.len(), MAX_FILES).map_err(|r| r.at("files"))?;
        let mut files: Vec<BundleFile> = Vec::with_capacity(e.files.len());
        for (j, f) in e.files.into_iter().enumerate() {
            let at = format!("files[{j}]");
            check_file_path(&f.path).map_err(|r| r.at(format!("{at}.path")))?;
            if let Some(prev) = files.last() {
                order(&prev.path, &f.path, BUNDLE_FILE_DUPLICATE, "files", "path")
                    .map_err(|r| r.at(format!("{at}.path")))?;
            }
            if f.text.len() > MAX_TEXT_BYTES {
                return Err(Rejection::new(
                    BUNDLE_FILE_TOO_LARGE,
                    format!(
                        "the text is {} bytes; the bound is {MAX_TEXT_BYTES}",
                        f.text.len()
                    ),
                )
                .at(format!("{at}.text")));
            }
            let executable = match f.executable {
                None => false,
                Some(true) => true,
                Some(false) => {
                    return Err(Rejection::new(
                        BUNDLE_NONCANONICAL,
                        "executable is given as false; a file that is not executable omits it",
                    )
                    .at(format!("{at}.executable")))
                }
            };
            files.push(BundleFile {
                path: f.path,
                text: f.text,
                executable,
            });
        }
        // A path that is a file must not also be a directory of another
        // file: the layout could not be written.
        let paths: HashSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
        for (j, f) in files.iter().enumerate() {
            let mut dirs = f.path.match_indices('/').map(|(k, _)| &f.path[..k]);
            if let Some(d) = dirs.find(|d| paths.contains(d)) {
                return Err(Rejection::new(
                    BUNDLE_PATH_CONFLICT,
                    format!("{d:?} is a file and also a directory of {:?}", f.path),
                )
                .at(format!("files[{j}].path")));
            }
        }
        if kind == EntryKind::Skill {
            let manifest = files
                .iter()
                .find(|f| f.path == SKILL_MANIFEST)
                .ok_or_else(|| {
                    Rejection::new(
                        BUNDLE_SKILL_MANIFEST_MISSING,
                        format!("a skill entry has no top-level {SKILL_MANIFEST}"),
                    )
                    .at("files")
                })?;
            check_skill_manifest(&manifest.text, &e.name).map_err(|r| r.at("files"))?;
        }
        Ok(BundleEntry {
            kind,
            name: e.name,
            files,
        })
    }

    fn to_wire(&self) -> Wire {
        Wire {
            format: FORMAT.into(),
            entries: self
                .entries
                .iter()
                .map(|e| WireEntry {
                    kind: e.kind.as_str().into(),
                    name: e.name.clone(),
                    files: e
                        .files
                        .iter()
                        .map(|f| WireFile {
                            path: f.path.clone(),
                            text: f.text.clone(),
                            executable: f.executable.then_some(true),
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

fn count(what: &str, n: usize, max: usize) -> Result<(), Rejection> {
    if n == 0 {
        Err(Rejection::new(BUNDLE_EMPTY, format!("{what} is empty")))
    } else if n > max {
        Err(Rejection::new(
            BUNDLE_TOO_MANY,
            format!("{n} {what}; the bound is {max}"),
        ))
    } else {
        Ok(())
    }
}

/// Requires `prev < next` in byte order (which is UTF-16 order for the
/// ASCII names and paths allowed here).
fn order(
    prev: &str,
    next: &str,
    duplicate: crate::ErrorCode,
    list: &str,
    key: &str,
) -> Result<(), Rejection> {
    match prev.cmp(next) {
        core::cmp::Ordering::Less => Ok(()),
        core::cmp::Ordering::Equal => Err(Rejection::new(
            duplicate,
            format!("{list} repeat the {key} {:?}", shown(next)),
        )),
        core::cmp::Ordering::Greater => Err(Rejection::new(
            BUNDLE_NOT_SORTED,
            format!("{list} are not sorted by {key}"),
        )),
    }
}

#[cfg(test)]
mod tests;
