"""Escape probes run inside `glove exec` by tests/escape.rs.

Each case tries one way out and prints `CONTAINED <case>` (exit 0) when the
sandbox stopped it, or `ESCAPED <case>: <detail>` (exit 1) when it did not.
Cases that need a limit to end them print nothing useful; the test reads the
outcome record instead.
"""
import ctypes
import errno
import fcntl
import os
import signal
import socket
import struct
import sys
import termios

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def sys_errno(nr, *args):
    """Raw syscall; returns (result, errno)."""
    ctypes.set_errno(0)
    cargs = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    r = libc.syscall(ctypes.c_long(nr), *cargs)
    return r, ctypes.get_errno()


def contained(case):
    print(f"CONTAINED {case}")
    sys.exit(0)


def escaped(case, detail):
    print(f"ESCAPED {case}: {detail}")
    sys.exit(1)


def expect_errno(case, fn, allowed):
    try:
        fn()
    except OSError as e:
        if e.errno in allowed:
            return
        escaped(case, f"unexpected errno {errno.errorcode.get(e.errno, e.errno)}")
    escaped(case, "operation succeeded")


# x86_64 numbers of calls Docker's default profile denies without extra
# capabilities (and a few more Glove denies). Each must fail with EPERM,
# except clone3 (ENOSYS so that libc falls back to clone).
DENIED = {
    "ptrace": 101, "syslog": 103, "uselib": 134, "ustat": 136, "sysfs": 139,
    "personality_bad": None, "modify_ldt": 154, "pivot_root": 155, "_sysctl": 156,
    "adjtimex": 159, "chroot": 161, "acct": 163, "settimeofday": 164, "mount": 165,
    "umount2": 166, "swapon": 167, "swapoff": 168, "reboot": 169, "sethostname": 170,
    "setdomainname": 171, "iopl": 172, "ioperm": 173, "create_module": 174,
    "init_module": 175, "delete_module": 176, "get_kernel_syms": 177,
    "query_module": 178, "quotactl": 179, "nfsservctl": 180, "lookup_dcookie": 212,
    "clock_settime": 227, "vhangup": 153, "mbind": 237, "set_mempolicy": 238,
    "get_mempolicy": 239, "kexec_load": 246, "add_key": 248, "request_key": 249,
    "keyctl": 250, "migrate_pages": 256, "unshare": 272, "move_pages": 279,
    "perf_event_open": 298, "fanotify_init": 300, "name_to_handle_at": 303,
    "open_by_handle_at": 304, "clock_adjtime": 305, "setns": 308,
    "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312,
    "finit_module": 313, "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
    "fsmount": 432, "fspick": 433, "pidfd_getfd": 438, "quotactl_fd": 443,
    "memfd_secret": 447, "mount_setattr": 442, "set_mempolicy_home_node": 450,
}


def case_denied_syscalls():
    bad = []
    for name, nr in sorted(DENIED.items()):
        if nr is None:
            continue
        r, e = sys_errno(nr, 0, 0, 0, 0, 0, 0)
        if not (r == -1 and e == errno.EPERM):
            bad.append(f"{name}={r}/{errno.errorcode.get(e, e)}")
    r, e = sys_errno(435, 0, 0)  # clone3
    if not (r == -1 and e == errno.ENOSYS):
        bad.append(f"clone3={r}/{errno.errorcode.get(e, e)}")
    r, e = sys_errno(135, 0x0400000)  # personality(READ_IMPLIES_EXEC)
    if not (r == -1 and e == errno.EPERM):
        bad.append(f"personality(READ_IMPLIES_EXEC)={r}/{e}")
    if bad:
        escaped("denied_syscalls", ", ".join(bad))
    contained("denied_syscalls")


def case_sockets():
    # (Netlink other than NETLINK_ROUTE: case_netlink tries every family.)
    for fam in [socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK, socket.AF_PACKET, 40]:
        try:
            raw = fam in (socket.AF_PACKET, socket.AF_NETLINK)
            proto = NETLINK_AUDIT if fam == socket.AF_NETLINK else 0
            s = socket.socket(fam, socket.SOCK_RAW if raw else socket.SOCK_STREAM, proto)
            s.close()
            escaped("sockets", f"family {fam} allowed")
        except OSError as e:
            if e.errno != errno.EPERM:
                escaped("sockets", f"family {fam}: errno {e.errno}")
    # AF_UNIX still works (agents use it locally).
    a, b = socket.socketpair()
    a.close(); b.close()
    contained("sockets")


NETLINK_ROUTE = 0
NETLINK_AUDIT = 9
SYS_SOCKET = 41
SYS_SOCKETPAIR = 53


def netlink_request(sock, msg_type, flags, body):
    """Sends one rtnetlink request asking for an acknowledgement; returns
    the error of the NLMSG_ERROR answer (0 is success, else -errno)."""
    import struct
    hdr = struct.pack("=IHHII", 16 + len(body), msg_type, 0x1 | 0x4 | flags, 1, 0)
    sock.send(hdr + body)
    answer = sock.recv(65536)
    length, kind = struct.unpack_from("=IH", answer, 0)
    if kind != 2:  # NLMSG_ERROR
        escaped("netlink", f"answer of type {kind} to request {msg_type}")
    return struct.unpack_from("=i", answer, 16)[0]


def lo_flags():
    import struct
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    req = struct.pack("16s24x", b"lo")
    res = fcntl.ioctl(s, 0x8913, req)  # SIOCGIFFLAGS
    s.close()
    return struct.unpack_from("=H", res, 16)[0]


def case_netlink():
    """NETLINK_ROUTE opens (interfaces can be listed) but changes nothing;
    every other netlink family, type and socketpair stays refused."""
    import struct
    # Opening, with the flags libc and runtimes add.
    for ty in [socket.SOCK_RAW, socket.SOCK_DGRAM, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
               socket.SOCK_DGRAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK]:
        try:
            socket.socket(socket.AF_NETLINK, ty, NETLINK_ROUTE).close()
        except OSError as e:
            escaped("netlink", f"NETLINK_ROUTE type {ty:#x} refused: errno {e.errno}")
    # Listing: if_nameindex(3) and getifaddrs(3) ask rtnetlink.
    names = [n for _, n in socket.if_nameindex()]
    if names != ["lo"]:
        escaped("netlink", f"if_nameindex {names}")
    ptr = ctypes.c_void_p()
    if libc.getifaddrs(ctypes.byref(ptr)) != 0:
        escaped("netlink", f"getifaddrs errno {ctypes.get_errno()}")
    libc.freeifaddrs(ptr)
    # Every other family, with either type and the flags, is refused by
    # the filter (EPERM), also with bits above the int the kernel reads.
    refused = []
    for proto in list(range(1, 32)) + [(1 << 32) | NETLINK_AUDIT, (1 << 63) | 15]:
        for ty in [socket.SOCK_RAW, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC]:
            refused.append((socket.AF_NETLINK, ty, proto))
    # Other types of NETLINK_ROUTE, and other bits in the type.
    for ty in [socket.SOCK_STREAM, socket.SOCK_SEQPACKET, 10, socket.SOCK_RAW | 0x100,
               socket.SOCK_RAW | (1 << 20)]:
        refused.append((socket.AF_NETLINK, ty, NETLINK_ROUTE))
    # A domain that is netlink only above the int.
    refused.append(((1 << 32) | socket.AF_INET, socket.SOCK_RAW, NETLINK_ROUTE))
    for dom, ty, proto in refused:
        r, e = sys_errno(SYS_SOCKET, dom, ty, proto)
        if r >= 0:
            os.close(r)
            escaped("netlink", f"socket({dom:#x}, {ty:#x}, {proto:#x}) allowed")
        if e != errno.EPERM:
            escaped("netlink", f"socket({dom:#x}, {ty:#x}, {proto:#x}): errno {e}")
    pair = (ctypes.c_int * 2)()
    for proto in [NETLINK_ROUTE, NETLINK_AUDIT]:
        r, e = sys_errno(SYS_SOCKETPAIR, socket.AF_NETLINK, socket.SOCK_RAW, proto, pair)
        if r >= 0 or e != errno.EPERM:
            escaped("netlink", f"socketpair(AF_NETLINK, {proto}) gave {r} errno {e}")
    # Changes are refused by the kernel: the agent has no CAP_NET_ADMIN
    # over its network namespace.
    before = lo_flags()
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
    s.bind((0, 0))
    iff_up = 0x1
    # RTM_NEWLINK: flip lo's IFF_UP.
    link = struct.pack("=BxHiII", socket.AF_UNSPEC, 0, 1, (before ^ iff_up) & iff_up, iff_up)
    err = netlink_request(s, 16, 0, link)
    if err != -errno.EPERM:
        escaped("netlink", f"RTM_NEWLINK (lo up/down) answered {err}")
    # RTM_NEWADDR: 10.9.9.9/8 on lo (NLM_F_CREATE | NLM_F_EXCL).
    ip = socket.inet_aton("10.9.9.9")
    addr = struct.pack("=BBBBI", socket.AF_INET, 8, 0, 0, 1)
    addr += struct.pack("=HH", 8, 2) + ip + struct.pack("=HH", 8, 1) + ip
    err = netlink_request(s, 20, 0x400 | 0x200, addr)
    if err != -errno.EPERM:
        escaped("netlink", f"RTM_NEWADDR answered {err}")
    # RTM_NEWROUTE: a default route through lo.
    route = struct.pack("=BBBBBBBBI", socket.AF_INET, 0, 0, 0, 254, 3, 0, 1, 0)
    route += struct.pack("=HHi", 8, 4, 1)  # RTA_OIF lo
    err = netlink_request(s, 24, 0x400, route)
    if err != -errno.EPERM:
        escaped("netlink", f"RTM_NEWROUTE answered {err}")
    s.close()
    if lo_flags() != before:
        escaped("netlink", "lo's flags changed")
    contained("netlink")


def case_tty_reopen():
    """The agent reopens its terminal read-write, as /dev/tty and by its
    name, and writes through both; the terminal is the agent's alone."""
    if not os.isatty(0):
        escaped("tty_reopen", "standard input is not a terminal")
    name = os.ttyname(0)
    st = os.stat(name)
    if (st.st_uid, st.st_gid) != (os.getuid(), os.getgid()):
        escaped("tty_reopen", f"{name} owned by {st.st_uid}:{st.st_gid}")
    if st.st_mode & 0o077:
        escaped("tty_reopen", f"{name} mode {st.st_mode & 0o777:o}")
    for path in ["/dev/tty", name]:
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError as e:
            escaped("tty_reopen", f"open {path}: errno {errno.errorcode.get(e.errno, e.errno)}")
        if not os.isatty(fd):
            escaped("tty_reopen", f"{path} is not a terminal")
        os.write(fd, f"REOPENED {path}\n".encode())
        os.close(fd)
    contained("tty_reopen")


def case_network():
    with open("/proc/self/net/dev") as f:
        ifaces = [l.split(":")[0].strip() for l in f.readlines()[2:]]
    if ifaces != ["lo"]:
        escaped("network", f"interfaces {ifaces}")
    expect_errno("network", lambda: socket.create_connection(("1.1.1.1", 80), timeout=1), {errno.EPERM})
    contained("network")


def case_mount():
    libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_void_p]
    if libc.mount(b"tmpfs", b"/tmp", b"tmpfs", 0, None) == 0:
        escaped("mount", "mount tmpfs succeeded")
    if libc.umount2(b"/usr", 2) == 0:
        escaped("mount", "umount succeeded")
    contained("mount")


def case_namespaces():
    r, e = sys_errno(272, 0x10000000)  # unshare(CLONE_NEWUSER)
    if r != -1:
        escaped("namespaces", "unshare succeeded")
    try:
        fd = os.open("/proc/self/ns/mnt", os.O_RDONLY)
        r, e = sys_errno(308, fd, 0)
        if r != -1:
            escaped("namespaces", "setns succeeded")
    except OSError:
        pass
    # fork with a namespace flag through clone(2)
    r, e = sys_errno(56, 0x20000000 | 17, 0, 0, 0, 0)  # CLONE_NEWPID|SIGCHLD
    if r == 0:
        os._exit(0)
    if r > 0:
        escaped("namespaces", "clone(CLONE_NEWPID) succeeded")
    contained("namespaces")


def case_ptrace():
    pid = os.fork()
    if pid == 0:
        import time
        time.sleep(5)
        os._exit(0)
    r, e = sys_errno(101, 16, pid, 0, 0)  # PTRACE_ATTACH
    r2, e2 = sys_errno(101, 16, 1, 0, 0)
    buf = ctypes.create_string_buffer(16)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    if r != -1 or r2 != -1:
        escaped("ptrace", "attach succeeded")
    r, e = sys_errno(310, 1, 0, 0, 0, 0, 0)
    if r != -1 or e != errno.EPERM:
        escaped("ptrace", "process_vm_readv allowed")
    contained("ptrace")


def case_host_files(marker):
    for p in ["/etc/shadow", "/etc/ssh", "/etc/sudoers", "/etc/ssl/private", "/root", marker,
              "/proc/1/root/etc/shadow", "/oldroot", "/proc/1/root" + marker]:
        try:
            if os.path.isdir(p):
                if os.listdir(p) and p not in ("/proc/1/root",):
                    escaped("host_files", f"listed {p}")
            else:
                with open(p, "rb") as f:
                    f.read(1)
                escaped("host_files", f"read {p}")
        except OSError:
            pass
    # A symlink planted in a writable directory resolves inside the sandbox.
    for target in ["/etc/shadow", marker, "/proc/1/root/etc/shadow", "../../../../etc/shadow"]:
        link = "/tmp/link"
        try:
            os.unlink(link)
        except OSError:
            pass
        os.symlink(target, link)
        try:
            with open(link, "rb") as f:
                f.read(1)
            escaped("host_files", f"read through symlink to {target}")
        except OSError:
            pass
    contained("host_files")


def case_fds():
    fds = sorted(int(x) for x in os.listdir("/proc/self/fd"))
    extra = [fd for fd in fds if fd > 2]
    # listdir itself holds one descriptor while listing; it is closed now.
    for fd in range(3, 1024):
        try:
            os.fstat(fd)
            escaped("fds", f"descriptor {fd} is open ({os.readlink(f'/proc/self/fd/{fd}')})")
        except OSError:
            pass
    if len(extra) > 1:
        escaped("fds", f"descriptors {extra}")
    contained("fds")


def case_readonly():
    for p in ["/usr/bin/glove-probe-write", "/etc/passwd", "/etc/glove", "/bin/x", "/x"]:
        try:
            with open(p, "w") as f:
                f.write("x")
            escaped("readonly", f"wrote {p}")
        except OSError as e:
            if e.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
                escaped("readonly", f"{p}: errno {e.errno}")
    contained("readonly")


def case_proc_sys():
    for p in ["/proc/sys/kernel/hostname", "/proc/sys/net/ipv4/ip_forward", "/proc/sysrq-trigger",
              "/proc/sys/vm/drop_caches"]:
        try:
            with open(p, "w") as f:
                f.write("1")
            escaped("proc_sys", f"wrote {p}")
        except OSError:
            pass
    contained("proc_sys")


def case_keys_bpf_uring():
    for name, nr, args in [("keyctl", 250, (0, 0)), ("add_key", 248, (0, 0, 0, 0, 0)),
                           ("bpf", 321, (0, 0, 0)), ("io_uring_setup", 425, (8, 0)),
                           ("open_by_handle_at", 304, (0, 0, 0))]:
        r, e = sys_errno(nr, *args)
        if r != -1 or e != errno.EPERM:
            escaped("keys_bpf_uring", f"{name} -> {r}/{e}")
    contained("keys_bpf_uring")


def case_tiocsti():
    try:
        fcntl.ioctl(0, termios.TIOCSTI, b"x")
        escaped("tiocsti", "TIOCSTI injected a byte")
    except OSError as e:
        if e.errno != errno.EPERM:
            escaped("tiocsti", f"errno {e.errno}")
    if not os.isatty(0):
        escaped("tiocsti", "stdin is not a terminal (run with --pty)")
    # Nor may it change the line discipline (N_NULL = 27): on a kernel with
    # ldisc_autoload that loads discipline modules.
    try:
        fcntl.ioctl(0, termios.TIOCSETD, struct.pack("i", 27))
        escaped("tiocsti", "TIOCSETD changed the line discipline")
    except OSError as e:
        if e.errno != errno.EPERM:
            escaped("tiocsti", f"TIOCSETD errno {e.errno}")
    contained("tiocsti")


def case_processes(host_pid):
    pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    if len(pids) > 4:
        escaped("processes", f"sees {len(pids)} processes")
    try:
        os.kill(int(host_pid), 0)
        escaped("processes", "signalled a host process")
    except ProcessLookupError:
        pass
    except PermissionError:
        escaped("processes", "host process visible (EPERM)")
    contained("processes")


def case_hostname():
    if socket.gethostname() != "glove":
        escaped("hostname", "unexpected hostname " + socket.gethostname())
    libc.sethostname.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    if libc.sethostname(b"pwned", 5) == 0:
        escaped("hostname", "sethostname succeeded")
    contained("hostname")


def case_privileges():
    status = open("/proc/self/status").read()
    fields = dict(l.split(":", 1) for l in status.splitlines() if ":" in l)
    for k in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"]:
        if int(fields[k].strip(), 16) != 0:
            escaped("privileges", f"{k} = {fields[k].strip()}")
    if fields["NoNewPrivs"].strip() != "1":
        escaped("privileges", "no_new_privs is not set")
    if fields["Seccomp"].strip() != "2":
        escaped("privileges", "seccomp filter mode is not active")
    mounts = open("/proc/self/mountinfo").read().splitlines()
    for m in mounts:
        parts = m.split()
        point, opts = parts[4], parts[5]
        if point in ("/usr", "/tmp", "/workspace") and "nosuid" not in opts:
            escaped("privileges", f"{point} allows setuid ({opts})")
    # A setuid-root binary must not raise privileges: mount(8) checks its
    # effective uid and refuses to run for an ordinary user.
    m = "/usr/bin/mount"
    if os.path.exists(m) and os.stat(m).st_mode & 0o4000:
        import subprocess
        r = subprocess.run([m, "-t", "tmpfs", "glove", "/tmp"], capture_output=True, text=True)
        if r.returncode == 0:
            escaped("privileges", "setuid mount succeeded")
        if "superuser" not in r.stderr:
            escaped("privileges", f"setuid mount ran privileged: {r.stderr.strip()}")
    if os.geteuid() != 1000:
        escaped("privileges", f"euid {os.geteuid()}")
    # The agent's own uid never maps to the host's root.
    for line in open("/proc/self/uid_map").read().splitlines():
        inside, outside, count = (int(x) for x in line.split())
        if inside <= 1000 < inside + count and outside + (1000 - inside) == 0:
            escaped("privileges", "uid 1000 is host root")
    if os.getgroups() not in ([], [1000]):
        escaped("privileges", f"supplementary groups {os.getgroups()}")
    contained("privileges")


def case_fork_bomb():
    while True:
        try:
            os.fork()
        except OSError:
            pass


def case_memory_bomb():
    chunks = []
    while True:
        chunks.append(bytearray(16 * 1024 * 1024))


def case_cpu_burn():
    while True:
        pass


def case_disk_fill():
    try:
        with open("/tmp/fill", "wb") as f:
            while True:
                f.write(b"\0" * 65536)
    except OSError as e:
        if e.errno == errno.ENOSPC:
            contained("disk_fill")
        escaped("disk_fill", f"errno {e.errno}")


def case_flood():
    while True:
        sys.stdout.write("flood " * 1000 + "\n")


def case_cmdline(secret):
    """The caller's command line (with --env SECRET=...) is not readable.
    The secret is passed reversed, so this probe's own arguments differ."""
    secret = secret[::-1]
    for pid in ["1", str(os.getppid())]:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                data = f.read()
        except OSError:
            continue
        if secret.encode() in data:
            escaped("cmdline", f"/proc/{pid}/cmdline shows the secret")
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != os.getpid():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    if secret.encode() in f.read():
                        escaped("cmdline", f"/proc/{d}/cmdline shows the secret")
            except OSError:
                pass
    if os.path.exists("/proc/1"):
        escaped("cmdline", "the init is visible at /proc/1")
    for p in ["/proc/sys", "/proc/sysrq-trigger", "/proc/kcore", "/proc/kallsyms"]:
        if os.path.exists(p):
            escaped("cmdline", f"{p} exists (procfs is not subset=pid)")
    contained("cmdline")


def count_until_fail(fn, most):
    n = 0
    held = []
    while n < most:
        try:
            held.append(fn())
        except OSError:
            break
        n += 1
    return n, held


def case_budgets(max_inotify, max_sigpending, max_pty):
    """Per-user kernel budgets are bounded per sandbox."""
    libc.inotify_init1.restype = ctypes.c_int

    def inotify():
        fd = libc.inotify_init1(0o2000000)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        return fd
    n, fds = count_until_fail(inotify, 1000)
    for fd in fds:
        os.close(fd)
    if n > max_inotify:
        escaped("budgets", f"{n} inotify instances")
    # Queued real-time signals (sigqueue is not exempt from the limit as
    # kill() is).
    sig = signal.SIGRTMIN
    signal.pthread_sigmask(signal.SIG_BLOCK, [sig])

    class SigVal(ctypes.Union):
        _fields_ = [("sival_int", ctypes.c_int), ("sival_ptr", ctypes.c_void_p)]

    def queue():
        if libc.sigqueue(os.getpid(), sig, SigVal(1)) != 0:
            raise OSError(ctypes.get_errno(), "sigqueue")
        return None
    n, _ = count_until_fail(queue, 200000)
    if n > max_sigpending:
        escaped("budgets", f"{n} queued signals")
    # Native AIO contexts draw on the host-wide fs.aio-max-nr.
    ctx = ctypes.c_ulong(0)
    r, e = sys_errno(206, 128, ctypes.byref(ctx))
    if r == 0 or e != errno.EPERM:
        escaped("budgets", f"io_setup gave {r} errno {e}")
    # Terminals of the sandbox's devpts instance.

    def pty():
        return os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY)
    n, fds = count_until_fail(pty, 5000)
    for fd in fds:
        os.close(fd)
    if n > max_pty:
        escaped("budgets", f"{n} terminals")
    # No further seccomp filter, by either door.
    r, e = sys_errno(157, 22, 2, 0)  # prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, NULL)
    if e != errno.EPERM:
        escaped("budgets", f"prctl(PR_SET_SECCOMP) gave errno {e}")
    contained("budgets")


def case_thrash(path):
    """Reads a mapped file larger than the memory limit, forever: the
    working set cannot fit, and the kernel refaults it page by page."""
    import mmap
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
    total = 0
    while True:
        for i in range(0, len(m), 4096):
            total += m[i]


def case_init_signals(max_sigpending):
    """The agent cannot end the sandbox through the init, nor fill the
    launching user's queued-signal budget by queueing signals to it."""
    import struct
    import time
    try:
        os.kill(1, 40)  # the supervisor's kill request
    except (PermissionError, ProcessLookupError):
        pass
    # The same, queued with forged sender fields (si_pid 0, as a sender
    # outside the namespace would read): si_signo, si_errno, si_code
    # (SI_QUEUE), padding, si_pid, si_uid.
    info = ctypes.create_string_buffer(struct.pack("iiiiii", 40, 0, -1, 0, 0, 0), 128)
    sys_errno(129, 1, 40, info)  # rt_sigqueueinfo
    time.sleep(0.3)

    class SigVal(ctypes.Union):
        _fields_ = [("sival_int", ctypes.c_int), ("sival_ptr", ctypes.c_void_p)]
    n = 0
    while n < 200000:
        if libc.sigqueue(1, 41, SigVal(1)) != 0:
            break
        n += 1
    # The init drains its queue meanwhile; what counts is how many are
    # outstanding for this user at most: SigQ counts them (and, launched by
    # an ordinary user, the init's too).
    if n >= 200000:
        escaped("init_signals", "no limit on signals queued to the init")
    status = open("/proc/self/status").read()
    queued = int(status.split("SigQ:")[1].split("/")[0])
    if queued > max_sigpending:
        escaped("init_signals", f"{queued} signals outstanding")
    contained("init_signals")


CASES = {
    "denied_syscalls": case_denied_syscalls, "sockets": case_sockets, "network": case_network,
    "mount": case_mount, "namespaces": case_namespaces, "ptrace": case_ptrace,
    "fds": case_fds, "readonly": case_readonly, "proc_sys": case_proc_sys,
    "keys_bpf_uring": case_keys_bpf_uring, "tiocsti": case_tiocsti, "hostname": case_hostname,
    "privileges": case_privileges, "fork_bomb": case_fork_bomb, "memory_bomb": case_memory_bomb,
    "cpu_burn": case_cpu_burn, "disk_fill": case_disk_fill, "flood": case_flood,
    "netlink": case_netlink, "tty_reopen": case_tty_reopen,
}

if __name__ == "__main__":
    name = sys.argv[1]
    if name == "host_files":
        case_host_files(sys.argv[2])
    elif name == "processes":
        case_processes(sys.argv[2])
    elif name == "init_signals":
        case_init_signals(int(sys.argv[2]))
    elif name == "thrash":
        case_thrash(sys.argv[2])
    elif name == "cmdline":
        case_cmdline(sys.argv[2])
    elif name == "budgets":
        case_budgets(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    else:
        CASES[name]()
