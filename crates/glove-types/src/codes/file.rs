//! Codes for protected-file checks.

define_codes! { File;
    FILE_NOT_FOUND = "file_not_found": "the file does not exist",
    FILE_IO = "file_io": "the file could not be opened or read",
    FILE_SYMLINK = "file_symlink": "the final path component is a symbolic link",
    FILE_NOT_REGULAR = "file_not_regular": "the path is not a regular file",
    FILE_WRONG_OWNER = "file_wrong_owner": "the file is not owned by the calling user",
    FILE_BAD_MODE = "file_bad_mode": "the file mode is not 0600",
    FILE_LINK_COUNT = "file_link_count": "the file has more than one hard link",
    FILE_TOO_LARGE = "file_too_large": "the file exceeds its size bound",
    FILE_CHANGED = "file_changed": "the file's identity or metadata changed while it was read",
}
