//! Codes of the command-line front end.

define_codes! { Cli;
    CLI_USAGE = "cli_usage": "the command line is malformed",
    CLI_INVALID_ARGUMENT = "cli_invalid_argument": "an argument value is not acceptable",
    SETUP_NO_HOME = "setup_no_home": "neither the XDG base directories nor HOME say where Glove's files go",
    SETUP_ANCESTOR_UNSAFE = "setup_ancestor_unsafe": "a directory above one glove setup would use is not owned by root or the caller, or is writable by someone else",
    SETUP_IO = "setup_io": "glove setup could not create, write or rename one of its files",
    SETUP_FILE_EXISTS = "setup_file_exists": "a file glove setup keeps cannot be kept aside (too many old copies)",
    SETUP_KEY_INVALID = "setup_key_invalid": "an existing key file is not 64 lowercase hex digits",
}
