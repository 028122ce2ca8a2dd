#!/usr/bin/env bash
# Retained workspaces (issue 28): staging and `glove diff`, each against a
# baseline measured in the same run (docs/performance.md, "Retained
# workspaces").
#
#   bash bench/workspace.sh            # 5 rounds
#   QUICK=1 bash bench/workspace.sh    # 3 rounds
#
# Environment: GLOVE (the release binary; default: the one under
# $CARGO_TARGET_DIR or /work/target-b), ROUNDS, QUICK, BENCH_DIR (where
# the tree, the copies and the stages go; default /var/tmp), SPLIT=0 to
# skip the one traced run that splits glove's staging time (needs strace).
#
# 1. A deterministic tree (bench/workspace_tree.py): 10,000 files, 200 MiB
#    (9,992 text files of 1-16 KiB, 50 to a directory, and 8 binary files).
# 2. Staging: `glove exec --workspace TREE --disk 512M -- /bin/true` (image,
#    mkfs, fill, syncfs, baseline manifest, the sandbox, the freeze and its
#    final manifest) against `cp -a TREE` into a fresh 512M tmpfs mounted in
#    a private mount namespace (`unshare -m`: nothing host-wide changes).
# 3. Diff: one session edits 100 text files (`sed -i`, line 3); `glove diff
#    SESSION --stat` against `diff -rq TREE COPY`, COPY a `cp -a` of the tree
#    with the same `sed -i` on the same files.
#
# Each pair alternates its order round by round; one untimed run of each
# comes first, so the tree (and, for diff, both trees, the manifests and the
# image's backing file) are in the page cache: both sides run warm. `sync`
# (a flush, no kernel setting) runs before every timed staging command, so
# neither pays for the other's dirty pages. Every stage made is removed and
# the temporary directory deleted on exit. Needs root (loop devices, mounts).
set -euo pipefail
shopt -s inherit_errexit

here=$(cd "$(dirname "$0")" && pwd)
ROUNDS=${ROUNDS:-$([ "${QUICK:-0}" = 1 ] && echo 3 || echo 5)}
BENCH_DIR=${BENCH_DIR:-/var/tmp}
FILES=10000
MIB=200
EDITS=100

if [ -z "${GLOVE:-}" ]; then
    for t in "${CARGO_TARGET_DIR:-/work/target-b}" "$here/../target"; do
        for p in "$t/x86_64-unknown-linux-gnu/release/glove" "$t/release/glove"; do
            if [ -x "$p" ]; then GLOVE=$p; break 2; fi
        done
    done
fi
if [ -z "${GLOVE:-}" ] || [ ! -x "$GLOVE" ]; then
    echo "no release glove: cargo build --release -p glove-bin --bin glove, or set GLOVE" >&2
    exit 2
fi
if [ "$(id -u)" != 0 ]; then
    echo "retained workspaces need root" >&2
    exit 2
fi

TMP=$(mktemp -d "$BENCH_DIR/glove-bench-ws.XXXXXX")
export GLOVE_STAGE_DIR=$TMP/stages
TREE=$TMP/tree
COPY=$TMP/copy
MNT=$TMP/mnt

session_of() { # the last line of `glove exec --json`
    python3 -c 'import json,sys; print(json.loads(sys.stdin.read().splitlines()[-1])["workspace"]["session_id"])'
}

cleanup() {
    local s
    if [ -d "$GLOVE_STAGE_DIR" ]; then
        for s in $("$GLOVE" stages list --json 2>/dev/null | python3 -c \
            'import json,sys; print(*sorted({s["session_id"] for s in json.load(sys.stdin)["stages"]}))' \
            2>/dev/null); do
            "$GLOVE" stages rm "$s" >/dev/null || echo "could not remove stage $s" >&2
        done
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

now() { echo "$EPOCHREALTIME"; }

# One `glove exec --workspace … -- /bin/true`; prints its seconds, removes
# its stage (untimed).
glove_stage() {
    local t0 t1 out
    sync
    t0=$(now)
    out=$("$GLOVE" exec --json --workspace "$TREE" --disk 512M -- /bin/true)
    t1=$(now)
    "$GLOVE" stages rm "$(session_of <<<"$out")" >/dev/null
    python3 -c "print(f'{$t1 - $t0:.6f}')"
}

# One `cp -a` of the tree into a fresh tmpfs in a private mount namespace.
copy_stage() {
    local t0 t1
    sync
    t0=$(now)
    unshare -m --propagation private sh -c \
        'mount -t tmpfs -o size=512M none "$1" && cp -a "$2" "$1/x"' sh "$MNT" "$TREE"
    t1=$(now)
    python3 -c "print(f'{$t1 - $t0:.6f}')"
}

glove_diff() {
    local t0 t1
    t0=$(now)
    "$GLOVE" diff "$SESSION" --stat >/dev/null
    t1=$(now)
    python3 -c "print(f'{$t1 - $t0:.6f}')"
}

plain_diff() {
    local t0 t1 rc=0
    t0=$(now)
    diff -rq "$TREE" "$COPY" >/dev/null || rc=$?
    t1=$(now)
    [ "$rc" = 1 ] || { echo "diff -rq exited $rc" >&2; exit 1; }
    python3 -c "print(f'{$t1 - $t0:.6f}')"
}

echo "glove: $GLOVE"
echo "rounds: $ROUNDS; tree: $FILES files, $MIB MiB under $TMP; load: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 "$here/workspace_tree.py" "$TREE" "$FILES" "$MIB" "$EDITS" >"$TMP/edits"
mkdir "$MNT"
sync

# --- staging ---------------------------------------------------------------
glove_stage >/dev/null
copy_stage >/dev/null
G_STAGE=()
B_STAGE=()
for ((r = 0; r < ROUNDS; r++)); do
    if ((r % 2 == 0)); then
        G_STAGE+=("$(glove_stage)")
        B_STAGE+=("$(copy_stage)")
    else
        B_STAGE+=("$(copy_stage)")
        G_STAGE+=("$(glove_stage)")
    fi
done

# --- one traced staging run: where glove's time goes ------------------------
SPLIT_OUT=""
if [ "${SPLIT:-1}" != 0 ] && command -v strace >/dev/null; then
    sync
    strace -f --seccomp-bpf -ttt -T -o "$TMP/strace" \
        -e trace=execve,fsmount,syncfs,renameat,exit_group \
        "$GLOVE" exec --json --workspace "$TREE" --disk 512M -- /bin/true >"$TMP/traced.json"
    "$GLOVE" stages rm "$(session_of <"$TMP/traced.json")" >/dev/null
    SPLIT_OUT=$(python3 - "$TMP/strace" <<'EOF'
import re, sys
lines = open(sys.argv[1]).read().splitlines()
main = lines[0].split()[0]
ev = []  # (pid, ts, text)
for l in lines:
    pid, ts, rest = l.split(None, 2)
    ev.append((pid, float(ts), rest))
t0 = ev[0][1]
def first(pred, after=0.0):
    for pid, ts, rest in ev:
        if ts >= after and pred(pid, rest):
            return ts, rest
    raise SystemExit(f"trace: no event after {after}")
def dur(rest):
    m = re.search(r"<(\d+\.\d+)>$", rest)
    return float(m.group(1)) if m else 0.0
m1, _ = first(lambda p, r: r.startswith("fsmount("))
s0, sr = first(lambda p, r: r.startswith("syncfs("), m1)
if "unfinished" in sr:
    s1, _ = first(lambda p, r: r.startswith("<... syncfs resumed>"), s0)
else:
    s1 = s0 + dur(sr)
b1, _ = first(lambda p, r: r.startswith("renameat(") and '"baseline.json"' in r, s1)
m2, _ = first(lambda p, r: r.startswith("fsmount("), b1)
f1, _ = first(lambda p, r: r.startswith("renameat(") and '"final.json"' in r, m2)
end, _ = first(lambda p, r: p == main and r.startswith("exit_group("), f1)
rows = [
    ("start, stage directory, mkfs.ext4, loop device, mount", m1 - t0),
    ("fill (the no-follow copy)", s0 - m1),
    ("syncfs of the filled image", s1 - s0),
    ("baseline manifest, written", b1 - s1),
    ("record, sandbox (/bin/true), teardown, loop release", m2 - b1),
    ("read-only mount, final manifest, written", f1 - m2),
    ("record, exit", end - f1),
]
total = end - t0
for name, s in rows:
    print(f"  {name:<55} {s * 1000:8.1f} ms  {100 * s / total:5.1f} %")
print(f"  {'total (traced: fsmount, syncfs, renameat, execve)':<55} {total * 1000:8.1f} ms")
EOF
)
fi

# --- diff --------------------------------------------------------------------
mapfile -t EDITED <"$TMP/edits"
out=$("$GLOVE" exec --json --workspace "$TREE" --disk 512M -- \
    /usr/bin/sed -i '3s/$/ \/\/ edited by the bench/' "${EDITED[@]}")
SESSION=$(session_of <<<"$out")
cp -a "$TREE" "$COPY"
(cd "$COPY" && sed -i '3s/$/ \/\/ edited by the bench/' "${EDITED[@]}")
# Both sides see the same 100 changed files (and run once untimed: warm).
stat_last=$("$GLOVE" diff "$SESSION" --stat | tail -1)
case "$stat_last" in
    *"$EDITS paths changed"*) ;;
    *) echo "glove diff --stat: unexpected summary: $stat_last" >&2; exit 1 ;;
esac
n=$(diff -rq "$TREE" "$COPY" | wc -l) || true
[ "$n" = "$EDITS" ] || { echo "diff -rq found $n differences, not $EDITS" >&2; exit 1; }
G_DIFF=()
B_DIFF=()
for ((r = 0; r < ROUNDS; r++)); do
    if ((r % 2 == 0)); then
        G_DIFF+=("$(glove_diff)")
        B_DIFF+=("$(plain_diff)")
    else
        B_DIFF+=("$(plain_diff)")
        G_DIFF+=("$(glove_diff)")
    fi
done

# --- report ------------------------------------------------------------------
python3 - "${G_STAGE[*]}" "${B_STAGE[*]}" "${G_DIFF[*]}" "${B_DIFF[*]}" <<'EOF'
import statistics, sys
g_s, b_s, g_d, b_d = ([float(x) for x in a.split()] for a in sys.argv[1:5])
def ms(v):
    return ", ".join(f"{x * 1000:.0f}" for x in v)
print()
print("each round (ms):")
print(f"  glove exec --workspace      {ms(g_s)}")
print(f"  cp -a into a fresh tmpfs    {ms(b_s)}")
print(f"  glove diff --stat           {ms(g_d)}")
print(f"  diff -rq TREE COPY          {ms(b_d)}")
print()
print("| figure | glove (median) | baseline (median) | ratio baseline/glove | goal |")
print("| --- | --- | --- | --- | --- |")
for name, g, b, goal in (
    ("staging, 10,000 files / 200 MiB, `--disk 512M`, vs `cp -a` into tmpfs", g_s, b_s, 0.5),
    ("`glove diff --stat`, 100 edited files, vs `diff -rq`", g_d, b_d, 1.0),
):
    gm, bm = statistics.median(g), statistics.median(b)
    r = bm / gm
    print(f"| {name} | {gm * 1000:.0f} ms | {bm * 1000:.0f} ms | {r:.2f}× | ≥ {goal}× {'met' if r >= goal else 'not met'} |")
EOF
if [ -n "$SPLIT_OUT" ]; then
    echo
    echo "glove's staging time, one run under strace (not part of the medians):"
    echo "$SPLIT_OUT"
fi
exit 0
