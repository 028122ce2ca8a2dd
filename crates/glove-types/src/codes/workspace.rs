//! Codes of retained workspaces: the workspace manifest (its definition and
//! the descriptor walk that takes it) and `glove diff`'s renderings.

define_codes! { Workspace;
    WORKSPACE_MANIFEST_INVALID = "workspace_manifest_invalid": "a workspace manifest breaks its definition (a path, kind, mode, size, digest or flag that cannot be, or entries not sorted, unique and beneath their directories)",
    WORKSPACE_WALK_FAILED = "workspace_walk_failed": "a filesystem operation failed while a workspace tree was walked or read",
    WORKSPACE_TOO_MANY_ENTRIES = "workspace_too_many_entries": "the workspace tree has more entries than its bound",
    WORKSPACE_TOO_DEEP = "workspace_too_deep": "a path in the workspace tree has more components than its bound",
    WORKSPACE_PATH_TOO_LONG = "workspace_path_too_long": "a path in the workspace tree is longer than its bound",
    WORKSPACE_TOO_LARGE = "workspace_too_large": "the workspace tree's files together (sparse files at their full size) are larger than the walk's bound, or one file is larger than a manifest can record",
    WORKSPACE_NON_UTF8_NAME = "workspace_non_utf8_name": "a name in the workspace tree is not UTF-8",
    WORKSPACE_MOUNT_POINT = "workspace_mount_point": "the workspace tree holds a mount point below its root",
    WORKSPACE_CHANGED_DURING_WALK = "workspace_changed_during_walk": "an entry of the workspace tree changed while it was read",
    WORKSPACE_PATCH_INCOMPLETE = "workspace_patch_incomplete": "the changes hold something a git patch cannot carry (binary content, a link or special file, a mode other than 0644 or 0755, a directory-only change, or a source file changed since staging)",
}
