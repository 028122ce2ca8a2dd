//! Tests for the seccomp filter: the table, the reference decision, and the built BPF program agreeing with it.

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
    // Online defragmentation rewrites a donor file's bytes without
    // touching its times (a retained stage's final manifest relies on them).
    assert_eq!(super::EXT4_IOC_MOVE_EXT, 0xc028_660f);
    for cmd in [
        u64::from(super::EXT4_IOC_MOVE_EXT),
        u64::from(super::EXT4_IOC_MOVE_EXT) | (1 << 40),
    ] {
        assert_ne!(run_both(ioctl, [0, cmd, 0, 0, 0, 0]), RET_ALLOW);
    }
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
