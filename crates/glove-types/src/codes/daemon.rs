//! Codes of `glove daemon`: installing and driving the fixed `gloved`
//! service unit through the platform's service manager (systemd).

define_codes! { Daemon;
    DAEMON_LAYOUT_UNKNOWN = "daemon_layout_unknown": "neither HOME nor XDG_CONFIG_HOME says where this user's configuration lives",
    DAEMON_GLOVED_NOT_FOUND = "daemon_gloved_not_found": "the gloved executable was not found next to glove, nor at the path given",
    DAEMON_GLOVED_UNSAFE = "daemon_gloved_unsafe": "the gloved executable is not a regular executable file owned by root or the caller, or it or a directory above it is writable by someone else",
    DAEMON_CONFIG_UNSAFE = "daemon_config_unsafe": "a directory above gloved's configuration is not owned by root or the caller, or is writable by someone else",
    DAEMON_PATH_UNSUPPORTED = "daemon_path_unsupported": "a path the unit would name is relative, not normalized, not UTF-8, or holds a character a unit file would have to escape",
    DAEMON_UNIT_DIR_UNSAFE = "daemon_unit_dir_unsafe": "the unit directory is not a directory owned by root or the caller, or it or a directory above it is writable by someone else",
    DAEMON_UNIT_FOREIGN = "daemon_unit_foreign": "a glove.service unit that glove daemon did not write is in the way; it is left alone",
    DAEMON_UNIT_IO = "daemon_unit_io": "the unit file could not be read, written, synced or removed",
    DAEMON_NOT_INSTALLED = "daemon_not_installed": "no glove.service unit is installed",
    DAEMON_SYSTEMD_UNREACHABLE = "daemon_systemd_unreachable": "the systemd manager for this scope cannot be reached (not booted with systemd, or no user manager)",
    DAEMON_SYSTEMCTL_FAILED = "daemon_systemctl_failed": "systemctl could not be run, or it reported a failure",
    DAEMON_SYSTEMCTL_TIMEOUT = "daemon_systemctl_timeout": "systemctl did not finish within its time bound and was killed",
}
