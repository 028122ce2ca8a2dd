//! `glove`: the operator's terminal command.

fn main() {
    glove_sandbox::launch::trace_mark("main");
    std::process::exit(glove_bin::cli::main());
}
