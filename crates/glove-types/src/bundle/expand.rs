//! The expansion of a set of bundles' `skill` entries into an Agent
//! Skills directory, and its digest (`docs/digests.md`).

use super::{BundleEntry, LibraryBundle, EXPANSION_DOMAIN};
use crate::canon;
use crate::codes::bundle::{BUNDLE_SKILL_CONFLICT, BUNDLE_SKILL_DIR_INVALID};
use crate::error::Rejection;
use crate::paths::{check_canonical, MAX_PATH_LEN};
use crate::Sha256Digest;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// One file of a skill expansion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpandedFile {
    path: String,
    text: String,
    executable: bool,
}

impl ExpandedFile {
    /// The absolute, canonical sandbox path: `<skill_dir>/<name>/<path>`.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The contents to write.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether the file is to be executable.
    pub fn executable(&self) -> bool {
        self.executable
    }
}

/// The `SKILL.md` layout of every skill of a set of bundles.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkillExpansion {
    skill_dir: String,
    files: Vec<ExpandedFile>,
    directories: Vec<String>,
    skill_names: Vec<String>,
    digest: Sha256Digest,
}

impl SkillExpansion {
    /// The skill directory the layout lies beneath.
    pub fn skill_dir(&self) -> &str {
        &self.skill_dir
    }

    /// The files, sorted by path.
    pub fn files(&self) -> &[ExpandedFile] {
        &self.files
    }

    /// Every directory strictly beneath the skill directory that holds a
    /// file, sorted (so a parent comes before its children). The skill
    /// directory itself is not listed.
    pub fn directories(&self) -> &[String] {
        &self.directories
    }

    /// The names of the skills expanded, sorted.
    pub fn skill_names(&self) -> &[String] {
        &self.skill_names
    }

    /// The expansion digest (`docs/digests.md`).
    pub fn digest(&self) -> &Sha256Digest {
        &self.digest
    }
}

#[derive(Serialize)]
struct DigestFile<'a> {
    path: &'a str,
    sha256: String,
    executable: bool,
}

#[derive(Serialize)]
struct DigestInput<'a> {
    skill_dir: &'a str,
    files: Vec<DigestFile<'a>>,
}

/// Expands the `skill` entries of `bundles` beneath `skill_dir` (an
/// absolute canonical sandbox path, e.g. `/home/agent/.codex/skills`):
/// each becomes `<skill_dir>/<name>/<path>` for each of its files. Other
/// kinds are not expanded. Two skills of the same name across the bundles
/// (including the same bundle given twice) are `bundle_skill_conflict`.
pub fn expand_skills(
    bundles: &[&LibraryBundle],
    skill_dir: &str,
) -> Result<SkillExpansion, Rejection> {
    check_canonical(skill_dir)
        .map_err(|r| Rejection::new(BUNDLE_SKILL_DIR_INVALID, r.message().to_owned()))?;
    let mut by_name: BTreeMap<&str, &BundleEntry> = BTreeMap::new();
    for b in bundles {
        for e in b.skills() {
            if by_name.insert(&e.name, e).is_some() {
                return Err(Rejection::new(
                    BUNDLE_SKILL_CONFLICT,
                    format!("two bundles carry the skill {:?}", e.name),
                ));
            }
        }
    }
    let mut files = Vec::new();
    let mut directories = BTreeSet::new();
    for (name, e) in &by_name {
        for f in &e.files {
            let path = format!("{skill_dir}/{name}/{}", f.path);
            if path.len() > MAX_PATH_LEN {
                return Err(Rejection::new(
                    BUNDLE_SKILL_DIR_INVALID,
                    format!("an expanded path would be longer than {MAX_PATH_LEN} bytes"),
                ));
            }
            directories.extend(
                path.match_indices('/')
                    .map(|(k, _)| &path[..k])
                    .filter(|d| d.len() > skill_dir.len())
                    .map(str::to_owned),
            );
            files.push(ExpandedFile {
                path,
                text: f.text.clone(),
                executable: f.executable,
            });
        }
    }
    // Names cannot contain '/', so `<dir>/<name>/` prefixes never
    // interleave and this order is the order by name then by path; sort
    // anyway, as the digest is defined over the sorted list.
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let digest = expansion_digest(skill_dir, &files)?;
    Ok(SkillExpansion {
        skill_dir: skill_dir.to_owned(),
        files,
        directories: directories.into_iter().collect(),
        skill_names: by_name.keys().map(|n| (*n).to_owned()).collect(),
        digest,
    })
}

fn expansion_digest(skill_dir: &str, files: &[ExpandedFile]) -> Result<Sha256Digest, Rejection> {
    let input = DigestInput {
        skill_dir,
        files: files
            .iter()
            .map(|f| DigestFile {
                path: &f.path,
                sha256: Sha256Digest::of(f.text.as_bytes()).to_hex(),
                executable: f.executable,
            })
            .collect(),
    };
    Ok(Sha256Digest::of_domain(
        EXPANSION_DOMAIN,
        &canon::encode(&input)?,
    ))
}
