//! Codes of the command-line front end.

define_codes! { Cli;
    CLI_USAGE = "cli_usage": "the command line is malformed",
    CLI_INVALID_ARGUMENT = "cli_invalid_argument": "an argument value is not acceptable",
    SETUP_NO_HOME = "setup_no_home": "neither the XDG base directories nor HOME say where Glove's files go",
    SETUP_ANCESTOR_UNSAFE = "setup_ancestor_unsafe": "a directory above one glove setup would use is not owned by root or the caller, or is writable by someone else",
    SETUP_IO = "setup_io": "glove setup could not create, write or rename one of its files",
    SETUP_FILE_EXISTS = "setup_file_exists": "a file glove setup keeps cannot be kept aside (too many old copies)",
    SETUP_KEY_INVALID = "setup_key_invalid": "an existing key file is not 64 lowercase hex digits",
    AGENT_UNKNOWN = "agent_unknown": "glove run --agent names no registered harness",
    AGENT_NOT_INSTALLED = "agent_not_installed": "the harness is not at --harness-path, not staged by glove setup and not installed where Glove looks",
    AGENT_UNSAFE_INSTALL = "agent_unsafe_install": "the harness found is in a directory others can write, so it is not launched",
    AGENT_KEY_MISSING = "agent_key_missing": "the API key's file or variable is missing or empty",
    AGENT_KEY_FILE_LOOSE = "agent_key_file_loose": "the API key file is not a regular file of yours readable by you alone",
    AGENT_MODEL_URL_INVALID = "agent_model_url_invalid": "--model is not an http:// or https:// origin (scheme, host and optional port)",
    AGENT_ALLOW_INVALID = "agent_allow_invalid": "--allow is not HOST:PORT, or --resolve is not NAME:IP for the --model host or an --allow host",
    AGENT_ALLOW_PRIVATE = "agent_allow_private": "--allow (or a --resolve address for an --allow host) names a loopback, private or link-local address without --allow-private",
}
