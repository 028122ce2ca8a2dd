//! The default-deny seccomp allow-list applied last, right before `execve`.
//!
//! One filter, installed last (installing a filter is itself a system call
//! the list refuses): every listed system call is allowed, some only with
//! argument conditions (sockets only `AF_UNIX`, and netlink only as
//! `NETLINK_ROUTE` of type `SOCK_RAW` or `SOCK_DGRAM`; `clone` without any
//! namespace flag; `ioctl` without `TIOCSTI`/`TIOCLINUX`; `prctl` without
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

use seccompiler::{sock_filter, BpfProgram};

/// Namespace-creating flags of `clone` (including `CLONE_NEWTIME`).
pub const CLONE_NAMESPACE_FLAGS: u64 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWCGROUP) as u64
    | 0x80;

/// System calls allowed without conditions.
pub const ALLOWED: &[i64] = &[
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_open,
    libc::SYS_close,
    libc::SYS_stat,
    libc::SYS_fstat,
    libc::SYS_lstat,
    libc::SYS_poll,
    libc::SYS_lseek,
    libc::SYS_mmap,
    libc::SYS_mprotect,
    libc::SYS_munmap,
    libc::SYS_brk,
    libc::SYS_rt_sigaction,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigreturn,
    libc::SYS_pread64,
    libc::SYS_pwrite64,
    libc::SYS_readv,
    libc::SYS_writev,
    libc::SYS_access,
    libc::SYS_pipe,
    libc::SYS_select,
    libc::SYS_sched_yield,
    libc::SYS_mremap,
    libc::SYS_msync,
    libc::SYS_mincore,
    libc::SYS_madvise,
    libc::SYS_shmget,
    libc::SYS_shmat,
    libc::SYS_shmctl,
    libc::SYS_dup,
    libc::SYS_dup2,
    libc::SYS_pause,
    libc::SYS_nanosleep,
    libc::SYS_getitimer,
    libc::SYS_alarm,
    libc::SYS_setitimer,
    libc::SYS_getpid,
    libc::SYS_sendfile,
    libc::SYS_connect,
    libc::SYS_accept,
    libc::SYS_sendto,
    libc::SYS_recvfrom,
    libc::SYS_sendmsg,
    libc::SYS_recvmsg,
    libc::SYS_shutdown,
    libc::SYS_bind,
    libc::SYS_listen,
    libc::SYS_getsockname,
    libc::SYS_getpeername,
    libc::SYS_setsockopt,
    libc::SYS_getsockopt,
    libc::SYS_fork,
    libc::SYS_vfork,
    libc::SYS_execve,
    libc::SYS_exit,
    libc::SYS_wait4,
    libc::SYS_kill,
    libc::SYS_uname,
    libc::SYS_semget,
    libc::SYS_semop,
    libc::SYS_semctl,
    libc::SYS_shmdt,
    libc::SYS_msgget,
    libc::SYS_msgsnd,
    libc::SYS_msgrcv,
    libc::SYS_msgctl,
    libc::SYS_fcntl,
    libc::SYS_flock,
    libc::SYS_fsync,
    libc::SYS_fdatasync,
    libc::SYS_truncate,
    libc::SYS_ftruncate,
    libc::SYS_getdents,
    libc::SYS_getcwd,
    libc::SYS_chdir,
    libc::SYS_fchdir,
    libc::SYS_rename,
    libc::SYS_mkdir,
    libc::SYS_rmdir,
    libc::SYS_creat,
    libc::SYS_link,
    libc::SYS_unlink,
    libc::SYS_symlink,
    libc::SYS_readlink,
    libc::SYS_chmod,
    libc::SYS_fchmod,
    libc::SYS_chown,
    libc::SYS_fchown,
    libc::SYS_lchown,
    libc::SYS_umask,
    libc::SYS_gettimeofday,
    libc::SYS_getrlimit,
    libc::SYS_getrusage,
    libc::SYS_sysinfo,
    libc::SYS_times,
    libc::SYS_getuid,
    libc::SYS_getgid,
    libc::SYS_setuid,
    libc::SYS_setgid,
    libc::SYS_geteuid,
    libc::SYS_getegid,
    libc::SYS_setpgid,
    libc::SYS_getppid,
    libc::SYS_getpgrp,
    libc::SYS_setsid,
    libc::SYS_setreuid,
    libc::SYS_setregid,
    libc::SYS_getgroups,
    libc::SYS_setgroups,
    libc::SYS_setresuid,
    libc::SYS_getresuid,
    libc::SYS_setresgid,
    libc::SYS_getresgid,
    libc::SYS_getpgid,
    libc::SYS_setfsuid,
    libc::SYS_setfsgid,
    libc::SYS_getsid,
    libc::SYS_capget,
    libc::SYS_rt_sigpending,
    libc::SYS_rt_sigtimedwait,
    libc::SYS_rt_sigqueueinfo,
    libc::SYS_rt_sigsuspend,
    libc::SYS_sigaltstack,
    libc::SYS_utime,
    libc::SYS_mknod,
    libc::SYS_statfs,
    libc::SYS_fstatfs,
    libc::SYS_getpriority,
    libc::SYS_setpriority,
    libc::SYS_sched_setparam,
    libc::SYS_sched_getparam,
    libc::SYS_sched_setscheduler,
    libc::SYS_sched_getscheduler,
    libc::SYS_sched_get_priority_max,
    libc::SYS_sched_get_priority_min,
    libc::SYS_sched_rr_get_interval,
    libc::SYS_mlock,
    libc::SYS_munlock,
    libc::SYS_mlockall,
    libc::SYS_munlockall,
    libc::SYS_arch_prctl,
    libc::SYS_setrlimit,
    libc::SYS_sync,
    libc::SYS_gettid,
    libc::SYS_readahead,
    libc::SYS_setxattr,
    libc::SYS_lsetxattr,
    libc::SYS_fsetxattr,
    libc::SYS_getxattr,
    libc::SYS_lgetxattr,
    libc::SYS_fgetxattr,
    libc::SYS_listxattr,
    libc::SYS_llistxattr,
    libc::SYS_flistxattr,
    libc::SYS_removexattr,
    libc::SYS_lremovexattr,
    libc::SYS_fremovexattr,
    libc::SYS_tkill,
    libc::SYS_time,
    libc::SYS_futex,
    libc::SYS_sched_setaffinity,
    libc::SYS_sched_getaffinity,
    libc::SYS_getdents64,
    libc::SYS_set_tid_address,
    libc::SYS_restart_syscall,
    libc::SYS_semtimedop,
    libc::SYS_fadvise64,
    libc::SYS_timer_create,
    libc::SYS_timer_settime,
    libc::SYS_timer_gettime,
    libc::SYS_timer_getoverrun,
    libc::SYS_timer_delete,
    libc::SYS_clock_gettime,
    libc::SYS_clock_getres,
    libc::SYS_clock_nanosleep,
    libc::SYS_exit_group,
    libc::SYS_epoll_wait,
    libc::SYS_epoll_ctl,
    libc::SYS_tgkill,
    libc::SYS_utimes,
    libc::SYS_waitid,
    libc::SYS_inotify_init,
    libc::SYS_inotify_add_watch,
    libc::SYS_inotify_rm_watch,
    libc::SYS_openat,
    libc::SYS_mkdirat,
    libc::SYS_mknodat,
    libc::SYS_fchownat,
    libc::SYS_futimesat,
    libc::SYS_newfstatat,
    libc::SYS_unlinkat,
    libc::SYS_renameat,
    libc::SYS_linkat,
    libc::SYS_symlinkat,
    libc::SYS_readlinkat,
    libc::SYS_fchmodat,
    libc::SYS_faccessat,
    libc::SYS_pselect6,
    libc::SYS_ppoll,
    libc::SYS_set_robust_list,
    libc::SYS_get_robust_list,
    libc::SYS_splice,
    libc::SYS_tee,
    libc::SYS_sync_file_range,
    libc::SYS_vmsplice,
    libc::SYS_utimensat,
    libc::SYS_epoll_pwait,
    libc::SYS_signalfd,
    libc::SYS_timerfd_create,
    libc::SYS_eventfd,
    libc::SYS_fallocate,
    libc::SYS_timerfd_settime,
    libc::SYS_timerfd_gettime,
    libc::SYS_accept4,
    libc::SYS_signalfd4,
    libc::SYS_eventfd2,
    libc::SYS_epoll_create,
    libc::SYS_epoll_create1,
    libc::SYS_dup3,
    libc::SYS_pipe2,
    libc::SYS_inotify_init1,
    libc::SYS_preadv,
    libc::SYS_pwritev,
    libc::SYS_rt_tgsigqueueinfo,
    libc::SYS_recvmmsg,
    libc::SYS_prlimit64,
    libc::SYS_syncfs,
    libc::SYS_sendmmsg,
    libc::SYS_getcpu,
    libc::SYS_sched_setattr,
    libc::SYS_sched_getattr,
    libc::SYS_renameat2,
    libc::SYS_getrandom,
    libc::SYS_memfd_create,
    libc::SYS_execveat,
    libc::SYS_membarrier,
    libc::SYS_copy_file_range,
    libc::SYS_preadv2,
    libc::SYS_pwritev2,
    libc::SYS_pkey_mprotect,
    libc::SYS_pkey_alloc,
    libc::SYS_pkey_free,
    libc::SYS_statx,
    libc::SYS_rseq,
    libc::SYS_pidfd_send_signal,
    libc::SYS_pidfd_open,
    libc::SYS_close_range,
    libc::SYS_openat2,
    libc::SYS_faccessat2,
    libc::SYS_epoll_pwait2,
    libc::SYS_futex_waitv,
    libc::SYS_landlock_create_ruleset,
    libc::SYS_landlock_add_rule,
    libc::SYS_landlock_restrict_self,
    libc::SYS_fchmodat2,
];

/// Values of `personality` that ordinary programs use (query, Linux, and
/// the two compatibility flags Docker also permits).
pub const PERSONALITY_VALUES: &[u32] = &[0x0, 0x8, 0x20000, 0x20008, 0xffff_ffff];

/// `AUDIT_ARCH_X86_64`.
const ARCH_X86_64: u32 = 0xc000_003e;
/// System call numbers with this bit set belong to the x32 ABI.
const X32_BIT: u32 = 0x4000_0000;
const RET_ALLOW: u32 = 0x7fff_0000;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_ERRNO: u32 = 0x0005_0000;

// Classic BPF opcodes used here.
const LD_W_ABS: u16 = 0x20;
const LD_IMM: u16 = 0x00;
const ALU_SUB_K: u16 = 0x14;
const ALU_AND_K: u16 = 0x54;
const ALU_LSH_X: u16 = 0x6c;
const MISC_TAX: u16 = 0x07;
const JMP_JA: u16 = 0x05;
const JMP_JEQ_K: u16 = 0x15;
const JMP_JGE_K: u16 = 0x35;
const JMP_JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;

const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
const fn off_arg_low(i: u32) -> u32 {
    16 + 8 * i
}

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
const IOCTL_DENIED: &[u32] = &[TIOCSTI, TIOCLINUX, TIOCSETD];
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

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// Emits one alternative of [`Check::AnyOf`]: allows when every condition
/// holds, otherwise falls through to what follows it.
fn emit_alternative(out: &mut BpfProgram, conds: &[Cond]) -> Result<(), String> {
    let len: usize = conds
        .iter()
        .map(|c| 1 + usize::from(c.mask != u32::MAX) + c.values.len())
        .sum::<usize>()
        + 1;
    let start = out.len();
    let end = start + len;
    let offset = |at: usize, to: usize| {
        let n = to - (at + 1);
        u8::try_from(n).map_err(|_| format!("seccomp program: a jump of {n} does not fit"))
    };
    for c in conds {
        out.push(stmt(LD_W_ABS, off_arg_low(c.arg)));
        if c.mask != u32::MAX {
            out.push(stmt(ALU_AND_K, c.mask));
        }
        let next = out.len() + c.values.len();
        for (i, v) in c.values.iter().enumerate() {
            let at = out.len();
            // A match goes on to the next condition; the last value's
            // mismatch leaves the alternative.
            let miss = if i + 1 == c.values.len() {
                offset(at, end)?
            } else {
                0
            };
            out.push(jump(JMP_JEQ_K, *v, offset(at, next)?, miss));
        }
    }
    out.push(stmt(RET_K, RET_ALLOW));
    debug_assert_eq!(out.len(), end);
    Ok(())
}

/// Emits the code that checks one allowed call's arguments (the number is
/// already known); ends in a return either way.
fn emit_check(out: &mut BpfProgram, check: Check) -> Result<(), String> {
    let deny = RET_ERRNO | libc::EPERM as u32;
    match check {
        Check::Always => out.push(stmt(RET_K, RET_ALLOW)),
        Check::ArgEq { arg, value } => {
            out.push(stmt(LD_W_ABS, off_arg_low(arg)));
            out.push(jump(JMP_JEQ_K, value, 0, 1));
            out.push(stmt(RET_K, RET_ALLOW));
            out.push(stmt(RET_K, deny));
        }
        Check::ArgMaskClear { arg, mask } => {
            out.push(stmt(LD_W_ABS, off_arg_low(arg)));
            out.push(jump(JMP_JSET_K, mask, 1, 0));
            out.push(stmt(RET_K, RET_ALLOW));
            out.push(stmt(RET_K, deny));
        }
        Check::ArgNotIn { arg, values } => {
            out.push(stmt(LD_W_ABS, off_arg_low(arg)));
            let n = values.len();
            for (i, v) in values.iter().enumerate() {
                // On a match jump to the deny at the end.
                out.push(jump(JMP_JEQ_K, *v, (n - i) as u8, 0));
            }
            out.push(stmt(RET_K, RET_ALLOW));
            out.push(stmt(RET_K, deny));
        }
        Check::ArgIn { arg, values } => {
            out.push(stmt(LD_W_ABS, off_arg_low(arg)));
            let n = values.len();
            for (i, v) in values.iter().enumerate() {
                out.push(jump(JMP_JEQ_K, *v, (n - i) as u8, 0));
            }
            out.push(stmt(RET_K, deny));
            out.push(stmt(RET_K, RET_ALLOW));
        }
        Check::AnyOf { alternatives } => {
            for conds in alternatives {
                emit_alternative(out, conds)?;
            }
            out.push(stmt(RET_K, deny));
        }
        Check::Refuse { errno } => out.push(stmt(RET_K, RET_ERRNO | errno)),
    }
    Ok(())
}

/// Emits the decision for the number in the accumulator: calls with a
/// check of their own first, then the bitmap of the unconditional ones.
fn emit_bitmap(out: &mut BpfProgram, rules: &[(u32, Check)]) -> Result<(), String> {
    let deny = RET_ERRNO | libc::EPERM as u32;
    let too_far = |n: usize| format!("seccomp program: a jump of {n} instructions does not fit");
    for (nr, check) in rules.iter().filter(|(_, c)| *c != Check::Always) {
        let mut block = Vec::new();
        emit_check(&mut block, *check)?;
        let skip = u8::try_from(block.len()).map_err(|_| too_far(block.len()))?;
        out.push(jump(JMP_JEQ_K, *nr, 0, skip));
        out.extend(block);
    }
    let words = rules
        .iter()
        .filter(|(_, c)| *c == Check::Always)
        .map(|(nr, _)| *nr / 32 + 1)
        .max()
        .unwrap_or(0);
    let mut masks = vec![0u32; words as usize];
    for (nr, _) in rules.iter().filter(|(_, c)| *c == Check::Always) {
        masks[(*nr / 32) as usize] |= 1 << (nr % 32);
    }
    // Each word: if nr >= its end, go on to the next word; otherwise shift
    // a one by (nr - start) and test it against the word. The two shared
    // returns follow the last word (deny, then allow). Jump offsets are
    // 8 bits: ~15 words of 6 instructions stay far below that (checked).
    const WORD_LEN: usize = 6;
    let base = out.len();
    let deny_at = base + masks.len() * WORD_LEN;
    let offset = |from: usize, to: usize| {
        let n = to - (from + 1);
        u8::try_from(n).map_err(|_| too_far(n))
    };
    for (w, mask) in masks.iter().enumerate() {
        let start = w as u32 * 32;
        out.push(jump(JMP_JGE_K, start + 32, (WORD_LEN - 1) as u8, 0));
        out.push(stmt(ALU_SUB_K, start));
        out.push(stmt(MISC_TAX, 0));
        out.push(stmt(LD_IMM, 1));
        out.push(stmt(ALU_LSH_X, 0));
        let at = out.len();
        out.push(jump(
            JMP_JSET_K,
            *mask,
            offset(at, deny_at + 1)?,
            offset(at, deny_at)?,
        ));
    }
    out.push(stmt(RET_K, deny));
    out.push(stmt(RET_K, RET_ALLOW));
    Ok(())
}

/// Builds the offline filter.
pub fn build() -> Result<BpfProgram, String> {
    build_for(Network::Offline)
}

/// Builds the filter; fails only if a jump would not fit in the 8-bit
/// offsets of classic BPF (the list would have to grow many times over).
pub fn build_for(network: Network) -> Result<BpfProgram, String> {
    let mut allow: BpfProgram = vec![
        stmt(LD_W_ABS, OFF_ARCH),
        jump(JMP_JEQ_K, ARCH_X86_64, 1, 0),
        stmt(RET_K, RET_KILL_PROCESS),
        stmt(LD_W_ABS, OFF_NR),
        jump(JMP_JSET_K, X32_BIT, 0, 1),
        stmt(RET_K, RET_ERRNO | libc::EPERM as u32),
    ];
    emit_bitmap(&mut allow, &rules_for(network))?;
    Ok(allow)
}

/// Runs a classic BPF program of the shapes [`build`] emits on one
/// `seccomp_data`; `None` on a malformed program.
pub fn interpret(prog: &[sock_filter], arch: u32, nr: u32, args: [u64; 6]) -> Option<u32> {
    interpret_counting(prog, arch, nr, args).map(|(r, _)| r)
}

/// Like [`interpret`], also returning how many instructions ran.
pub fn interpret_counting(
    prog: &[sock_filter],
    arch: u32,
    nr: u32,
    args: [u64; 6],
) -> Option<(u32, usize)> {
    let mut data = [0u8; 64];
    data[0..4].copy_from_slice(&nr.to_le_bytes());
    data[4..8].copy_from_slice(&arch.to_le_bytes());
    for (i, a) in args.iter().enumerate() {
        data[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_le_bytes());
    }
    let mut acc: u32 = 0;
    let mut x: u32 = 0;
    let mut pc = 0usize;
    for steps in 1..4096 {
        let ins = prog.get(pc)?;
        match ins.code {
            LD_W_ABS => {
                let o = ins.k as usize;
                let b = data.get(o..o + 4)?;
                acc = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                pc += 1;
            }
            LD_IMM => {
                acc = ins.k;
                pc += 1;
            }
            ALU_SUB_K => {
                acc = acc.wrapping_sub(ins.k);
                pc += 1;
            }
            ALU_AND_K => {
                acc &= ins.k;
                pc += 1;
            }
            MISC_TAX => {
                x = acc;
                pc += 1;
            }
            ALU_LSH_X => {
                acc = acc.checked_shl(x).unwrap_or(0);
                pc += 1;
            }
            JMP_JA => pc += 1 + ins.k as usize,
            JMP_JEQ_K | JMP_JGE_K | JMP_JSET_K => {
                let t = match ins.code {
                    JMP_JEQ_K => acc == ins.k,
                    JMP_JGE_K => acc >= ins.k,
                    _ => acc & ins.k != 0,
                };
                pc += 1 + usize::from(if t { ins.jt } else { ins.jf });
            }
            RET_K => return Some((ins.k, steps)),
            _ => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn run_both(nr: u32, args: [u64; 6]) -> u32 {
        let allow = build().expect("build");
        interpret(&allow, ARCH_X86_64, nr, args).expect("the filter runs")
    }

    fn expected(nr: u32, args: [u64; 6]) -> u32 {
        match decide(nr, args) {
            Ok(()) => RET_ALLOW,
            Err(e) => RET_ERRNO | e,
        }
    }

    #[test]
    fn every_number_matches_the_reference() {
        for nr in 0..1024u32 {
            assert_eq!(run_both(nr, [0; 6]), expected(nr, [0; 6]), "nr {nr}");
        }
        assert_eq!(
            run_both(X32_BIT | 1, [0; 6]),
            RET_ERRNO | libc::EPERM as u32
        );
        assert_eq!(
            run_both(libc::SYS_clone3 as u32, [0; 6]),
            RET_ERRNO | libc::ENOSYS as u32
        );
        let allow = build().expect("build");
        assert_eq!(
            interpret(&allow, 0x4000_0003, 0, [0; 6]),
            Some(RET_KILL_PROCESS)
        );
        assert!(
            allow.len() < 200,
            "program has {} instructions",
            allow.len()
        );
        let longest = (0..1024u32)
            .filter_map(|nr| interpret_counting(&allow, ARCH_X86_64, nr, [0; 6]).map(|(_, n)| n))
            .max()
            .unwrap_or(0);
        assert!(longest <= 40, "a call runs {longest} instructions");
    }

    #[test]
    fn egress_mode_allows_tcp_sockets_and_nothing_else_more() {
        let prog = build_for(Network::Egress).expect("build");
        let run = |nr: u32, args: [u64; 6]| {
            let got = interpret(&prog, ARCH_X86_64, nr, args).expect("runs");
            let want = match decide_for(Network::Egress, nr, args) {
                Ok(()) => RET_ALLOW,
                Err(e) => RET_ERRNO | e,
            };
            assert_eq!(got, want, "nr {nr} {args:?}");
            got
        };
        let sock = libc::SYS_socket as u32;
        let stream = libc::SOCK_STREAM as u64;
        for domain in [libc::AF_INET as u64, libc::AF_INET6 as u64] {
            for flags in [0, (libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK) as u64] {
                for proto in [0, libc::IPPROTO_TCP as u64] {
                    assert_eq!(
                        run(sock, [domain, stream | flags, proto, 0, 0, 0]),
                        RET_ALLOW
                    );
                }
            }
            // Datagram (DNS), raw (ICMP), SCTP over a stream, MPTCP: refused.
            for (ty, proto) in [
                (libc::SOCK_DGRAM as u64, 0),
                (libc::SOCK_DGRAM as u64, libc::IPPROTO_UDP as u64),
                (libc::SOCK_RAW as u64, libc::IPPROTO_ICMP as u64),
                (libc::SOCK_SEQPACKET as u64, 0),
                (stream, libc::IPPROTO_SCTP as u64),
                (stream, 262),
            ] {
                assert_ne!(run(sock, [domain, ty, proto, 0, 0, 0]), RET_ALLOW);
            }
        }
        for domain in [
            libc::AF_PACKET,
            libc::AF_VSOCK,
            libc::AF_ALG,
            libc::AF_BLUETOOTH,
        ] {
            assert_ne!(run(sock, [domain as u64, stream, 0, 0, 0, 0]), RET_ALLOW);
        }
        // Outside `socket`, both modes decide alike.
        for nr in 0..1024u32 {
            if nr != sock {
                assert_eq!(run(nr, [0; 6]), run_both(nr, [0; 6]), "nr {nr}");
            }
        }
        // Offline refuses what egress mode allows.
        assert_ne!(
            run_both(sock, [libc::AF_INET as u64, stream, 0, 0, 0, 0]),
            RET_ALLOW
        );
    }

    #[test]
    fn argument_checks() {
        let sock = libc::SYS_socket as u32;
        assert_eq!(
            run_both(sock, [libc::AF_UNIX as u64, 1, 0, 0, 0, 0]),
            RET_ALLOW
        );
        assert_ne!(
            run_both(sock, [libc::AF_INET as u64, 1, 0, 0, 0, 0]),
            RET_ALLOW
        );
        // Netlink: only NETLINK_ROUTE, raw or datagram, with or without
        // SOCK_CLOEXEC / SOCK_NONBLOCK.
        let nl = libc::AF_NETLINK as u64;
        let flags = (libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK) as u64;
        for ty in [libc::SOCK_RAW as u64, libc::SOCK_DGRAM as u64] {
            for f in [
                0,
                libc::SOCK_CLOEXEC as u64,
                libc::SOCK_NONBLOCK as u64,
                flags,
            ] {
                assert_eq!(run_both(sock, [nl, ty | f, 0, 0, 0, 0]), RET_ALLOW);
            }
            for proto in 1..64u64 {
                assert_ne!(run_both(sock, [nl, ty, proto, 0, 0, 0]), RET_ALLOW);
            }
            assert_ne!(run_both(sock, [nl, ty, 1 << 31, 0, 0, 0]), RET_ALLOW);
        }
        for ty in [1u64, 5, 10, 3 | 0x100, 3 | (1 << 20), 3 | (1 << 31)] {
            assert_ne!(run_both(sock, [nl, ty, 0, 0, 0, 0]), RET_ALLOW);
        }
        assert_ne!(
            run_both(sock, [libc::AF_INET as u64, 3, 0, 0, 0, 0]),
            RET_ALLOW
        );
        let pair = libc::SYS_socketpair as u32;
        assert_ne!(run_both(pair, [nl, 3, 0, 0, 0, 0]), RET_ALLOW);
        let clone = libc::SYS_clone as u32;
        assert_eq!(
            run_both(clone, [libc::SIGCHLD as u64, 0, 0, 0, 0, 0]),
            RET_ALLOW
        );
        assert_ne!(
            run_both(
                clone,
                [(libc::CLONE_NEWUSER | libc::SIGCHLD) as u64, 0, 0, 0, 0, 0]
            ),
            RET_ALLOW
        );
        let ioctl = libc::SYS_ioctl as u32;
        assert_eq!(
            run_both(ioctl, [0, libc::TIOCGWINSZ, 0, 0, 0, 0]),
            RET_ALLOW
        );
        assert_ne!(run_both(ioctl, [0, libc::TIOCSTI, 0, 0, 0, 0]), RET_ALLOW);
        assert_ne!(
            run_both(ioctl, [0, libc::TIOCSTI | (1 << 40), 0, 0, 0, 0]),
            RET_ALLOW
        );
        let pers = libc::SYS_personality as u32;
        assert_eq!(run_both(pers, [0xffff_ffff, 0, 0, 0, 0, 0]), RET_ALLOW);
        assert_ne!(run_both(pers, [0x0040_0000, 0, 0, 0, 0, 0]), RET_ALLOW);
    }

    proptest! {
        #[test]
        fn random_sockets_match_the_reference(
            domain in prop_oneof![Just(1u64), Just(2), Just(16), Just(17), any::<u64>()],
            ty in prop_oneof![0u64..12, any::<u64>()].prop_map(|t| t ^ (t & 0x80800)),
            flags in prop_oneof![Just(0u64), Just(0x80000), Just(0x800), Just(0x80800)],
            proto in prop_oneof![0u64..32, any::<u64>()],
            high in any::<u32>(),
        ) {
            let args = [domain, ty | flags | (u64::from(high) << 32), proto, 0, 0, 0];
            let nr = libc::SYS_socket as u32;
            prop_assert_eq!(run_both(nr, args), expected(nr, args));
        }

        #[test]
        fn random_calls_match_the_reference(nr in 0u32..600, args in any::<[u64; 6]>()) {
            prop_assert_eq!(run_both(nr, args), expected(nr, args));
        }
    }
}
