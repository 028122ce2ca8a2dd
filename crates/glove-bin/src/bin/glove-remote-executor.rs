//! `glove-remote-executor --stdio`: the forced command of the
//! construction-only remote backend (see `glove_bin::remote_executor`).
#![forbid(unsafe_code)]

fn main() {
    std::process::exit(glove_bin::remote_executor::main(
        std::env::args_os().skip(1),
    ));
}
