//! Codes of the command-line front end.

define_codes! { Cli;
    CLI_USAGE = "cli_usage": "the command line is malformed",
    CLI_INVALID_ARGUMENT = "cli_invalid_argument": "an argument value is not acceptable",
}
