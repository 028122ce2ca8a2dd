//! `glove-launcher`: the single-threaded per-session launcher that `gloved`
//! starts with one socket as its standard input (see
//! `glove_sandbox::wire` for the frames). Not meant to be run by hand.

fn main() {
    let fd: i32 = std::env::var("GLOVE_LAUNCHER_FD")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    // Refuse anything but an open socket on the agreed descriptor.
    let is_socket = std::fs::metadata(format!("/proc/self/fd/{fd}"))
        .map(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()))
        .unwrap_or(false);
    if !is_socket {
        eprintln!("error[sandbox_io_failed]: glove-launcher expects a socket on descriptor {fd}; it is started by gloved");
        std::process::exit(glove_sandbox::launcher::EXIT_PROTOCOL);
    }
    // The one use of `unsafe` outside glove-sandbox's `sys` module, allowed
    // here on purpose: taking ownership of the inherited socket.
    #[allow(unsafe_code)]
    // SAFETY: the descriptor is open (checked above), was inherited from
    // gloved for exactly this purpose, nothing else in this process refers
    // to it, and it is adopted once.
    let sock = unsafe { glove_sandbox::launcher::adopt_inherited_fd(fd) };
    std::process::exit(glove_sandbox::launcher::serve(sock));
}
