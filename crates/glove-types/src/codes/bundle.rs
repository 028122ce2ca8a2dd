//! Codes of library bundles: decoding, verification against a requested
//! digest, and the expansion of `skill` entries into a harness's skill
//! directory.

define_codes! { Bundle;
    BUNDLE_TOO_LARGE = "bundle_too_large": "the bundle is larger than its bound (16 MiB)",
    BUNDLE_DIGEST_MISMATCH = "bundle_digest_mismatch": "the SHA-256 of the bundle's bytes is not the digest it was requested by",
    BUNDLE_FORMAT_UNKNOWN = "bundle_format_unknown": "format is not glove.library-bundle.v1",
    BUNDLE_NONCANONICAL = "bundle_noncanonical": "the bytes are not the one encoding of the bundle's value (executable given as false)",
    BUNDLE_EMPTY = "bundle_empty": "the bundle has no entries, or an entry has no files",
    BUNDLE_TOO_MANY = "bundle_too_many": "more than 256 entries in a bundle or more than 128 files in an entry",
    BUNDLE_NOT_SORTED = "bundle_not_sorted": "entries are not sorted by name, or an entry's files are not sorted by path",
    BUNDLE_ENTRY_KIND_UNKNOWN = "bundle_entry_kind_unknown": "an entry's kind is not skill, behavior, prompt, template or workflow",
    BUNDLE_ENTRY_NAME_INVALID = "bundle_entry_name_invalid": "an entry name is not 1-64 bytes of [a-z0-9] joined by single hyphens",
    BUNDLE_ENTRY_DUPLICATE = "bundle_entry_duplicate": "two entries of the bundle have the same name",
    BUNDLE_FILE_DUPLICATE = "bundle_file_duplicate": "two files of an entry have the same path",
    BUNDLE_PATH_INVALID = "bundle_path_invalid": "a file path is not 1-8 '/'-separated components of [A-Za-z0-9._-] (no '.' or '..', at most 255 bytes)",
    BUNDLE_PATH_CONFLICT = "bundle_path_conflict": "a file path of an entry is also a directory of another file of that entry",
    BUNDLE_FILE_TOO_LARGE = "bundle_file_too_large": "a file's text is larger than its bound (1 MiB)",
    BUNDLE_SKILL_MANIFEST_MISSING = "bundle_skill_manifest_missing": "a skill entry has no top-level SKILL.md",
    BUNDLE_SKILL_MANIFEST_INVALID = "bundle_skill_manifest_invalid": "a skill's SKILL.md lacks front matter whose name is the entry name and which has a description",
    BUNDLE_SKILL_CONFLICT = "bundle_skill_conflict": "two bundles of one expansion carry a skill of the same name",
    BUNDLE_SKILL_DIR_INVALID = "bundle_skill_dir_invalid": "the skill directory is not a canonical absolute path, or an expanded path would be too long",
}
