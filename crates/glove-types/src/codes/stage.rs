//! Codes of `glove policy stage`: copying a harness's closure into a
//! protected directory.

define_codes! { Stage;
    STAGE_SOURCE_INVALID = "stage_source_invalid": "the source is not an absolute path to the runtime's node_modules, a .bin entry or its real executable, or the runtime's files are not all there",
    STAGE_SOURCE_IN_HARNESS_HOME = "stage_source_in_harness_home": "the source lies inside a harness home ($HOME/.codex, .claude, .pi, .copilot, .opencode), which staging never reads",
    STAGE_DEPENDENCY_MISSING = "stage_dependency_missing": "a runtime dependency is not installed where node would find it inside the source's node_modules",
    STAGE_DEPENDENCY_BOUND = "stage_dependency_bound": "the dependency closure has more packages, or is deeper, than its bound",
    STAGE_LINK_ESCAPES = "stage_link_escapes": "a symbolic link in the closure is absolute or points outside the closure, or a package is itself a link",
    STAGE_SPECIAL_FILE = "stage_special_file": "the closure holds something that is neither a regular file, a directory nor a symbolic link",
    STAGE_NAME_INVALID = "stage_name_invalid": "a name in the closure is not UTF-8 or holds a control character",
    STAGE_TOO_MANY_FILES = "stage_too_many_files": "the closure has more entries than its bound",
    STAGE_TOO_LARGE = "stage_too_large": "the closure's files together are larger than its bound",
    STAGE_TOO_DEEP = "stage_too_deep": "a path in the closure has more components than its bound",
    STAGE_PATH_TOO_LONG = "stage_path_too_long": "a path in the closure is longer than its bound",
    STAGE_DIRECTORY_UNSAFE = "stage_directory_unsafe": "the staging directory, or one of its ancestors, is not owned by root or this user, or is group- or other-writable",
    STAGE_ENTRY_POINT_EXISTS = "stage_entry_point_exists": "the entry point already exists and is not this closure's executable; it is never overwritten",
    STAGE_STORE_MISMATCH = "stage_store_mismatch": "the store already holds this digest's directory but its content does not verify",
    STAGE_SOURCE_CHANGED = "stage_source_changed": "a source file changed between planning and copying",
    STAGE_SOURCE_NOT_READABLE = "stage_source_not_readable": "a file of the closure is not readable by others, or a directory not searchable by others; the store is world-readable, so staging never widens it",
    STAGE_COPILOT_CACHE = "stage_copilot_cache": "producing copilot's extracted package cache failed",
    STAGE_IO = "stage_io": "a filesystem operation of staging failed",
}
