//! The default-deny seccomp allow-list applied last, right before `execve`.
//!
//! One filter, installed last (installing a filter is itself a system call
//! the list refuses): every listed system call is allowed, some only with
//! argument conditions (sockets only `AF_UNIX`, and netlink only as
//! `NETLINK_ROUTE` of type `SOCK_RAW` or `SOCK_DGRAM`; `clone` without any
//! namespace flag; `ioctl` without `TIOCSTI`/`TIOCLINUX`/`TIOCSETD`/
//! `EXT4_IOC_MOVE_EXT`; `prctl` without
//! `PR_SET_SECCOMP`, so that neither `seccomp` nor `prctl` installs a
//! further filter; `personality` only with the values ordinary programs
//! use); anything else returns
//! `EPERM`. The one exception is `clone3`, answered with `ENOSYS`: its
//! flags live in memory where a filter cannot read them, and `ENOSYS` makes
//! libc fall back to `clone`, whose flags the list checks. (`seccompiler`'s
//! own compiler allows one mismatch action per filter, which would need a
//! second stacked filter for that; every installed filter costs the kernel
//! a translation, a JIT compilation and a cache-building pass, so this
//! generator emits both answers in one program.)
//!
//! The program is generated here rather than by `seccompiler`'s compiler,
//! which emits one linear chain: with ~260 system calls that is ~1,400
//! instructions, and installing a filter costs the kernel in proportion to
//! its length (translation to eBPF, JIT compilation, and a run for every
//! system call number to build the allow cache): about a millisecond per
//! launch. This generator emits a bitmap: the few calls with argument
//! checks (or another answer) are tested first, then the number selects a
//! 32-bit word of a bitmap (a chain of range checks) and one bit test
//! answers — about 150 instructions, ≈ 30 at most per call. `seccompiler`
//! still installs it. A test runs the program in a small BPF interpreter
//! against a reference decision for every system call number and random
//! arguments.
//!
//! What is *not* on the list is the point: `ptrace`, `process_vm_*`, the
//! whole mount API, `unshare`, `setns`, `chroot`, `bpf`, `perf_event_open`,
//! `userfaultfd`, `io_uring_*`, the native AIO calls (`io_setup` and the
//! rest: their contexts are a host-wide budget, `fs.aio-max-nr`, that one
//! sandbox could exhaust), `seccomp`, `keyctl` and friends, `open_by_handle_at`,
//! module and `kexec` calls, clock and time setting, `reboot`, `swapon`,
//! `acct`, `quotactl`, `syslog`, `iopl`/`ioperm`, NUMA policy calls,
//! `pidfd_getfd`, `memfd_secret`, `sethostname`.

mod bpf;
mod table;

pub use bpf::{build, build_for, interpret, interpret_counting};
pub use table::{ALLOWED, PERSONALITY_VALUES};

/// Namespace-creating flags of `clone` (including `CLONE_NEWTIME`).
pub const CLONE_NAMESPACE_FLAGS: u64 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWCGROUP) as u64
    | 0x80;

/// `AUDIT_ARCH_X86_64`.
const ARCH_X86_64: u32 = 0xc000_003e;
/// System call numbers with this bit set belong to the x32 ABI.
const X32_BIT: u32 = 0x4000_0000;
const RET_ALLOW: u32 = 0x7fff_0000;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_ERRNO: u32 = 0x0005_0000;

/// How one allowed system call is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// Allowed whatever the arguments.
    Always,
    /// Allowed when the low 32 bits of argument `arg` equal `value`.
    ArgEq {
        /// Argument index.
        arg: u32,
        /// Required value.
        value: u32,
    },
    /// Allowed when the low 32 bits of argument `arg` have none of `mask`.
    ArgMaskClear {
        /// Argument index.
        arg: u32,
        /// Forbidden bits.
        mask: u32,
    },
    /// Allowed when the low 32 bits of argument `arg` are none of `values`.
    ArgNotIn {
        /// Argument index.
        arg: u32,
        /// Forbidden values.
        values: &'static [u32],
    },
    /// Allowed when the low 32 bits of argument `arg` are one of `values`.
    ArgIn {
        /// Argument index.
        arg: u32,
        /// Permitted values.
        values: &'static [u32],
    },
    /// Allowed when one of the alternatives holds; an alternative holds
    /// when all of its conditions do.
    AnyOf {
        /// The alternatives, tried in order.
        alternatives: &'static [&'static [Cond]],
    },
    /// Never allowed, answered with this errno instead of `EPERM`.
    Refuse {
        /// The errno returned.
        errno: u32,
    },
}

/// One condition of [`Check::AnyOf`]: the low 32 bits of argument `arg`,
/// and-ed with `mask`, are one of `values`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cond {
    /// Argument index.
    pub arg: u32,
    /// Bits compared (`u32::MAX`: all).
    pub mask: u32,
    /// Permitted values of the masked bits.
    pub values: &'static [u32],
}

impl Cond {
    fn holds(&self, args: &[u64; 6]) -> bool {
        self.values
            .contains(&((args[self.arg as usize] as u32) & self.mask))
    }
}

/// `socket(domain, type, protocol)`: the type's flags the kernel accepts
/// besides the type itself (`SOCK_CLOEXEC`, `SOCK_NONBLOCK`) are ignored,
/// any other bit in the type is refused.
const SOCK_TYPE_MASK: u32 = !((libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK) as u32);
const SOCKET_UNIX: &[Cond] = &[Cond {
    arg: 0,
    mask: u32::MAX,
    values: &[libc::AF_UNIX as u32],
}];
/// `NETLINK_ROUTE` only (`getifaddrs`, `if_nameindex`, node's
/// `os.networkInterfaces()`), datagram or raw: it reads the sandbox's own
/// network namespace; every change it could ask for needs `CAP_NET_ADMIN`
/// there, which the agent does not have. Other netlink families (audit,
/// uevents, sock_diag, netfilter, generic, xfrm, ...) stay refused.
const SOCKET_NETLINK_ROUTE: &[Cond] = &[
    Cond {
        arg: 0,
        mask: u32::MAX,
        values: &[libc::AF_NETLINK as u32],
    },
    Cond {
        arg: 2,
        mask: u32::MAX,
        values: &[libc::NETLINK_ROUTE as u32],
    },
    Cond {
        arg: 1,
        mask: SOCK_TYPE_MASK,
        values: &[libc::SOCK_RAW as u32, libc::SOCK_DGRAM as u32],
    },
];
/// What `socket` may create.
pub const SOCKET_ALTERNATIVES: &[&[Cond]] = &[SOCKET_UNIX, SOCKET_NETLINK_ROUTE];
/// TCP over IPv4 or IPv6 (protocol 0 or `IPPROTO_TCP`): in egress mode
/// only, where the sandbox's namespace has `lo` and nothing routes beyond
/// it, so a stream socket reaches the egress forwarder or nothing. Datagram
/// and raw sockets (DNS, ICMP, packet crafting) stay refused.
const SOCKET_INET_STREAM: &[Cond] = &[
    Cond {
        arg: 0,
        mask: u32::MAX,
        values: &[libc::AF_INET as u32, libc::AF_INET6 as u32],
    },
    Cond {
        arg: 1,
        mask: SOCK_TYPE_MASK,
        values: &[libc::SOCK_STREAM as u32],
    },
    Cond {
        arg: 2,
        mask: u32::MAX,
        values: &[0, libc::IPPROTO_TCP as u32],
    },
];
/// What `socket` may create in egress mode.
pub const SOCKET_ALTERNATIVES_EGRESS: &[&[Cond]] =
    &[SOCKET_UNIX, SOCKET_NETLINK_ROUTE, SOCKET_INET_STREAM];

/// The sandbox's network: none, or the egress forwarder on `lo`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Network {
    /// Offline: only Unix and netlink-route sockets.
    Offline,
    /// Egress mode: TCP sockets too (see [`SOCKET_ALTERNATIVES_EGRESS`]).
    Egress,
}

const TIOCSTI: u32 = libc::TIOCSTI as u32;
const TIOCLINUX: u32 = libc::TIOCLINUX as u32;
/// Line-discipline changes: on a kernel with `ldisc_autoload`, asking for a
/// discipline loads its module (n_hdlc and the like), kernel code an agent
/// has no use for. The discipline is passed by pointer, so N_TTY alone
/// cannot be allowed: the request is refused.
const TIOCSETD: u32 = libc::TIOCSETD as u32;
/// `EXT4_IOC_MOVE_EXT` (`_IOWR('f', 15, struct move_extent)`, the same
/// number for 32-bit callers): online defragmentation. It changes the
/// donor file's bytes without touching its mtime or ctime (checked on a
/// real ext4), which would let a retained workspace's final manifest keep a
/// stale digest (`glove-control` `workspace::known`); an agent has no use
/// for it.
pub const EXT4_IOC_MOVE_EXT: u32 = 0xC028_660F;
const IOCTL_DENIED: &[u32] = &[TIOCSTI, TIOCLINUX, TIOCSETD, EXT4_IOC_MOVE_EXT];
const PRCTL_DENIED: &[u32] = &[libc::PR_SET_SECCOMP as u32];

/// The complete allow-list of an offline sandbox.
pub fn rules() -> Vec<(u32, Check)> {
    rules_for(Network::Offline)
}

/// The complete allow-list: system call number and its check.
pub fn rules_for(network: Network) -> Vec<(u32, Check)> {
    let mut r: Vec<(u32, Check)> = ALLOWED.iter().map(|n| (*n as u32, Check::Always)).collect();
    let unix = libc::AF_UNIX as u32;
    r.push((
        libc::SYS_socket as u32,
        Check::AnyOf {
            alternatives: match network {
                Network::Offline => SOCKET_ALTERNATIVES,
                Network::Egress => SOCKET_ALTERNATIVES_EGRESS,
            },
        },
    ));
    r.push((
        libc::SYS_socketpair as u32,
        Check::ArgEq {
            arg: 0,
            value: unix,
        },
    ));
    r.push((
        libc::SYS_clone as u32,
        Check::ArgMaskClear {
            arg: 0,
            mask: CLONE_NAMESPACE_FLAGS as u32,
        },
    ));
    r.push((
        libc::SYS_ioctl as u32,
        Check::ArgNotIn {
            arg: 1,
            values: IOCTL_DENIED,
        },
    ));
    r.push((
        libc::SYS_prctl as u32,
        Check::ArgNotIn {
            arg: 0,
            values: PRCTL_DENIED,
        },
    ));
    r.push((
        libc::SYS_personality as u32,
        Check::ArgIn {
            arg: 0,
            values: PERSONALITY_VALUES,
        },
    ));
    r.push((
        libc::SYS_clone3 as u32,
        Check::Refuse {
            errno: libc::ENOSYS as u32,
        },
    ));
    r.sort_by_key(|(n, _)| *n);
    r.dedup_by_key(|(n, _)| *n);
    r
}

/// The reference decision of an offline sandbox.
pub fn decide(nr: u32, args: [u64; 6]) -> Result<(), u32> {
    decide_for(Network::Offline, nr, args)
}

/// The reference decision the generated program must implement: `Ok(())`
/// to allow, `Err(errno)` to refuse.
pub fn decide_for(network: Network, nr: u32, args: [u64; 6]) -> Result<(), u32> {
    let eperm = libc::EPERM as u32;
    if nr & X32_BIT != 0 {
        return Err(eperm);
    }
    let Some((_, check)) = rules_for(network).into_iter().find(|(n, _)| *n == nr) else {
        return Err(eperm);
    };
    let low = |i: u32| args[i as usize] as u32;
    let ok = match check {
        Check::Always => true,
        Check::ArgEq { arg, value } => low(arg) == value,
        Check::ArgMaskClear { arg, mask } => low(arg) & mask == 0,
        Check::ArgNotIn { arg, values } => !values.contains(&low(arg)),
        Check::ArgIn { arg, values } => values.contains(&low(arg)),
        Check::AnyOf { alternatives } => alternatives
            .iter()
            .any(|conds| conds.iter().all(|c| c.holds(&args))),
        Check::Refuse { errno } => return Err(errno),
    };
    if ok {
        Ok(())
    } else {
        Err(eperm)
    }
}

#[cfg(test)]
mod tests;
