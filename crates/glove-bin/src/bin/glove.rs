//! `glove`: the operator's terminal command.

use clap::Parser;
use glove_bin::cli::{run, Cli};

fn main() {
    let cli = Cli::parse();
    std::process::exit(run(cli));
}
