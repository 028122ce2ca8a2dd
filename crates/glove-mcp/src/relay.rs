//! `glove mcp-relay SERVER`, inside the sandbox: the agent's MCP server
//! as a harness starts it. It reaches the mediator's socket for `SERVER`
//! under [`RELAY_SOCKET_DIR`] and either hands its standard input and
//! output over ([`crate::handoff`], when both are Unix socket-pair ends, as
//! a Node client gives) or copies between them and the socket (pipes, as
//! Python and Rust clients give). A whole subcommand: it returns the exit
//! status and reports on standard error.

use crate::sockets::RELAY_SOCKET_DIR;
use glove_types::codes::mcp::MCP_RELAY_FAILED;

/// Hands the relay's standard input and output to the mediator
/// (`crate::handoff`), then waits until the mediator closes the
/// socket.
fn hand_off(
    s: &std::os::unix::net::UnixStream,
    rd: std::os::fd::BorrowedFd<'_>,
    wr: std::os::fd::BorrowedFd<'_>,
) -> i32 {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    use std::io::Read;
    let failed = |m: &str| {
        eprintln!("error[{}]: {m}", MCP_RELAY_FAILED.as_str());
        1
    };
    let mut space = [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut anc = SendAncillaryBuffer::new(&mut space);
    let fds = [rd, wr];
    if !anc.push(SendAncillaryMessage::ScmRights(&fds)) {
        return failed("cannot attach the standard streams");
    }
    let byte = [crate::handoff::HANDOFF];
    match rustix::net::sendmsg(
        s,
        &[std::io::IoSlice::new(&byte)],
        &mut anc,
        SendFlags::NOSIGNAL,
    ) {
        Ok(1) => {}
        _ => return failed("cannot hand the standard streams to the mediator"),
    }
    let mut b = [0u8; 1];
    let mut sock = s;
    if !matches!(sock.read(&mut b), Ok(1) if b[0] == crate::handoff::ACCEPTED) {
        return failed("the mediator did not take the standard streams");
    }
    // Nothing more comes: the close is the end of the connection.
    loop {
        match sock.read(&mut b) {
            Ok(0) | Err(_) => return 0,
            Ok(_) => {}
        }
    }
}

/// `glove mcp-relay SERVER`, inside the sandbox: hands its standard input
/// and output to the mediator when both are Unix socket-pair ends
/// (`crate::handoff`; a Node client's), and otherwise (pipes, say)
/// copies standard input to the
/// server's socket and the socket to standard output until both ends
/// close. `GLOVE_MCP_RELAY_COPY` set: always copies.
pub fn run(server: &str) -> i32 {
    use std::io::{Read, Write};
    if !crate::profile::is_server_id(server) {
        eprintln!(
            "error[{}]: {server:?} is not a server id",
            MCP_RELAY_FAILED.as_str()
        );
        return 2;
    }
    let path = format!("{RELAY_SOCKET_DIR}/{server}.sock");
    let s = match std::os::unix::net::UnixStream::connect(&path) {
        Ok(s) => s,
        Err(e) => {
            eprintln!(
                "error[{}]: {path}: {e} (is this running under glove run?)",
                MCP_RELAY_FAILED.as_str()
            );
            return 1;
        }
    };
    {
        use std::os::fd::AsFd;
        let (stdin, stdout) = (std::io::stdin(), std::io::stdout());
        let copy = std::env::var_os("GLOVE_MCP_RELAY_COPY").is_some();
        if !copy
            && crate::handoff::passable(stdin.as_fd())
            && crate::handoff::passable(stdout.as_fd())
        {
            return hand_off(&s, stdin.as_fd(), stdout.as_fd());
        }
    }
    let Ok(mut up) = s.try_clone() else {
        return 1;
    };
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if up.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = up.shutdown(std::net::Shutdown::Write);
    });
    let mut down = s;
    let mut out = std::io::stdout().lock();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match down.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if out.write_all(&buf[..n]).is_err() || out.flush().is_err() {
                    break;
                }
            }
        }
    }
    0
}
