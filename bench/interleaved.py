#!/usr/bin/env python3
"""Launch cost with the commands interleaved, for a machine that drifts.

    python3 bench/interleaved.py [ROUNDS] [[NAME=value,...@]GLOVE_BIN ...]

hyperfine (bench/launch.sh) runs all runs of one command, then the next; on
the development VM the speed drifts by ±20 % from minute to minute, so two
invocations disagree. Here every round runs each command once, in a random
order, so drift hits all of them alike. Each run is posix_spawn + waitpid
(what hyperfine -N does). GAP (seconds, default 0.03) of idle precedes every
run: the spaced regime; GAP=0 gives back-to-back. Prints medians and the
ratios to bubblewrap and to bare /bin/true.

Back-to-back, a command's deferred work (what a launcher leaves to a
helper or the kernel after it exits) lands in whatever runs next. So that
each command pays its own, back-to-back rounds run each command BLOCK times
in a row (default 5; BLOCK=1 turns it off) and count all but the first run
of every block, which pays for the command before it.
"""
import os, random, shutil, statistics, sys, time

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 300
gloves = sys.argv[2:] or [os.environ.get("GLOVE_BIN", "target/x86_64-unknown-linux-gnu/release/glove")]
gap = float(os.environ.get("GAP", "0.03"))
block = int(os.environ.get("BLOCK", "1" if gap else "5"))
bwrap = ["bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr"]
for d in ("bin", "lib", "lib64", "sbin"):
    p = "/" + d
    if os.path.islink(p):
        bwrap += ["--symlink", os.readlink(p), p]
    elif os.path.isdir(p):
        bwrap += ["--ro-bind", p, p]
bwrap += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "/bin/true"]
cmds = {"bare": ["/bin/true"], "bwrap": bwrap}
envs = {}
for g in gloves:
    # NAME=value@BINARY runs BINARY with NAME=value added to the environment.
    extra, _, binary = g.rpartition("@")
    cmds[g] = [binary, "exec", "--", "/bin/true"]
    envs[g] = dict(os.environ, **dict(kv.split("=", 1) for kv in extra.split(",") if kv))

def run(argv, env=None):
    exe = argv[0] if argv[0].startswith("/") else shutil.which(argv[0])
    start = time.perf_counter()
    pid = os.posix_spawn(exe, argv, env or os.environ)
    _, status = os.waitpid(pid, 0)
    took = time.perf_counter() - start
    if status != 0:
        sys.exit(f"{argv[0]} failed: {status}")
    return took

times = {k: [] for k in cmds}
for _ in range(5):
    for k, argv in cmds.items():
        run(argv, envs.get(k))
for _ in range(rounds):
    order = list(cmds)
    random.shuffle(order)
    for k in order:
        if gap:
            time.sleep(gap)
        for i in range(block):
            took = run(cmds[k], envs.get(k))
            if i > 0 or block == 1:
                times[k].append(took)
med = {k: statistics.median(v) * 1000 for k, v in times.items()}
blocks = f", blocks of {block} (the first run of each not counted)" if block > 1 else ""
print(f"{rounds} rounds, gap {gap * 1000:.0f} ms{blocks}")
for k, m in med.items():
    extra = "" if k in ("bare", "bwrap") else f"   glove/bwrap = {m / med['bwrap']:.2f}   glove/bare = {m / med['bare']:.2f}"
    print(f"  {k:40} median {m:7.3f} ms{extra}")
