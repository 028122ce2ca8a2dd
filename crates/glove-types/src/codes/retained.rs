//! Codes of retained workspaces: the ext4 image a workspace lives on, the
//! stage that holds it between a session and its apply, and the stage's
//! records.

define_codes! { Retained;
    RETAINED_UNSUPPORTED = "retained_unsupported": "retained workspaces need root in the initial user namespace, loop devices, ext4 and a root-owned mkfs.ext4; this host or service lacks one (use an ephemeral workspace)",
    RETAINED_SIZE_INVALID = "retained_size_invalid": "the workspace size is below 16 MiB or above 1 TiB",
    RETAINED_SOURCE_INVALID = "retained_source_invalid": "the workspace source is not an absolute path to a directory reached without symbolic links",
    RETAINED_IMAGE_FAILED = "retained_image_failed": "the workspace image could not be made, attached or mounted",
    RETAINED_FILL_FAILED = "retained_fill_failed": "the workspace could not be filled from its source (a special file, a mount point below it, too many entries, or the image is too small)",
    RETAINED_MANIFEST_FAILED = "retained_manifest_failed": "the workspace's manifest could not be taken",
    RETAINED_STAGE_NOT_FOUND = "retained_stage_not_found": "no retained stage exists for this session",
    RETAINED_STAGE_LIVE = "retained_stage_live": "the stage's session is still running; it is frozen when the session ends",
    RETAINED_STAGE_INVALID = "retained_stage_invalid": "the stage's record is malformed, or its image or manifests do not match it",
    RETAINED_STAGE_IO = "retained_stage_io": "the stage directory or one of its files could not be read or written",
    RETAINED_STAGE_EXISTS = "retained_stage_exists": "a stage for this session and workspace already exists",
    RETAINED_STAGE_APPLIED = "retained_stage_applied": "the stage was already applied to its source",
    RETAINED_STAGE_BUSY = "retained_stage_busy": "the stage's image is still mounted by an earlier session",
}
