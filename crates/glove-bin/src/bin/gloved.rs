//! `gloved`: the operator's per-user control service (issue 5).

fn main() {
    eprintln!("gloved: the control service is not implemented yet");
    std::process::exit(2);
}
