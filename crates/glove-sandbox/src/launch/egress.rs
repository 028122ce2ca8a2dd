//! The egress forwarder: a process of the sandbox (forked by the init,
//! counted in the session's cgroup) that listens on the sandbox's
//! loopback and passes each accepted connection, unread, over the
//! inherited egress channel to the host side (`glove-egress`), where the
//! session's proxy decides what it may reach. It holds nothing else: no
//! capability, no host socket, no file of the host.

use crate::sys::{caps, fd, net, process, Errno};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

/// Listeners made by the init before the forwarder starts: one per port on
/// `127.0.0.1` and, where the namespace has IPv6, `::1`, each with its
/// index (the byte sent with every passed connection).
pub(super) struct Listeners {
    sockets: Vec<(u8, OwnedFd)>,
}

impl Listeners {
    /// Brings `lo` up and listens on every port, in order (index = position).
    pub(super) fn open(ports: &[u16]) -> Result<Listeners, (String, Errno)> {
        net::loopback_up().map_err(|e| ("loopback up".to_owned(), e))?;
        let mut sockets = Vec::new();
        for (i, p) in ports.iter().enumerate() {
            let l = net::listen_loopback(*p, false)
                .map_err(|e| (format!("listen on 127.0.0.1:{p}"), e))?;
            sockets.push((i as u8, l));
            // IPv6 may be disabled in the namespace: then only IPv4.
            if let Ok(l6) = net::listen_loopback(*p, true) {
                sockets.push((i as u8, l6));
            }
        }
        Ok(Listeners { sockets })
    }

    /// Forks the forwarder, which first moves itself into the session's
    /// cgroup with `join` (as the agent does), then serves until the
    /// channel closes. Returns its pid; the init's copies of the listeners
    /// and the channel are closed when `self` and `channel` drop.
    pub(super) fn spawn(
        self,
        channel: &OwnedFd,
        join: &[OwnedFd],
        filter: &seccompiler::BpfProgram,
    ) -> Result<libc::pid_t, Errno> {
        // The forwarder says when it is in the session's cgroup: the agent
        // is started only after, so the pid limit counts it from the start.
        let (joined_r, joined_w) = fd::pipe()?;
        match process::fork_single_threaded()? {
            process::Forked::Parent(pid) => {
                drop(joined_w);
                let mut b = [0u8; 1];
                match fd::read_full(joined_r.as_fd(), &mut b) {
                    Ok(1) => Ok(pid),
                    // It failed before (or while) joining.
                    _ => Err(Errno(libc::ECHILD)),
                }
            }
            process::Forked::Child => {
                drop(joined_r);
                let code = match forward(&self.sockets, channel, join, filter, joined_w) {
                    Ok(()) => 0,
                    Err(_) => 1,
                };
                process::exit_now(code)
            }
        }
    }
}

fn forward(
    sockets: &[(u8, OwnedFd)],
    channel: &OwnedFd,
    join: &[OwnedFd],
    filter: &seccompiler::BpfProgram,
    joined: OwnedFd,
) -> Result<(), Errno> {
    let _ = process::set_parent_death_signal(libc::SIGKILL);
    for f in join {
        fd::write_all(f.as_fd(), b"0")?;
    }
    fd::write_all(joined.as_fd(), b"j")?;
    drop(joined);
    let mut keep: Vec<RawFd> = sockets.iter().map(|(_, s)| s.as_raw_fd()).collect();
    keep.push(channel.as_raw_fd());
    // Everything else the init held (its status channel, the agent's
    // streams, the cgroup's files) is closed here; the `OwnedFd`s of the
    // copied memory are never dropped (this process leaves by `_exit`).
    fd::close_all_except(&mut keep)?;
    fd::fill_standard_streams()?;
    process::set_not_dumpable()?;
    caps::set_no_new_privs()?;
    caps::drop_bounding()?;
    caps::clear_sets()?;
    seccompiler::apply_filter(filter).map_err(|_| Errno(libc::EPERM))?;
    let mut entries: Vec<fd::PollEntry> = sockets
        .iter()
        .map(|(_, s)| fd::PollEntry {
            fd: s.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    entries.push(fd::PollEntry {
        fd: channel.as_raw_fd(),
        events: 0,
        revents: 0,
    });
    loop {
        for e in entries.iter_mut() {
            e.revents = 0;
        }
        match fd::poll(&mut entries, -1) {
            Ok(_) => {}
            Err(Errno(libc::EINTR)) => continue,
            Err(e) => return Err(e),
        }
        // The host side went away: nothing can be passed any more.
        if let Some(c) = entries.last() {
            if c.revents & (libc::POLLHUP | libc::POLLERR) != 0 {
                return Ok(());
            }
        }
        for (i, (index, s)) in sockets.iter().enumerate() {
            if entries[i].revents & libc::POLLIN == 0 {
                continue;
            }
            let conn = match net::accept(s.as_fd()) {
                Ok(c) => c,
                // Aborted before it was taken, or out of descriptors for a
                // moment: the next one.
                Err(_) => continue,
            };
            match fd::send_fds(channel.as_fd(), *index, &[conn.as_raw_fd()]) {
                Ok(()) => {}
                // The host side is gone: nothing can be passed any more.
                Err(Errno(
                    libc::EPIPE | libc::ECONNRESET | libc::ENOTCONN | libc::ECONNREFUSED,
                )) => return Ok(()),
                // Too many descriptors in flight, no buffer for a moment:
                // this connection is dropped (its client sees it closed),
                // the next one is tried.
                Err(_) => {}
            }
        }
    }
}
