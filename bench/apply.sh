#!/usr/bin/env bash
# Apply (issue 28): `glove apply` of a staged 10,000-file / 200 MiB tree
# with 100 files edited, against `cp -a` of the same tree beside the source
# followed by `sync`, measured in the same run (docs/performance.md,
# "Retained workspaces").
#
#   bash bench/apply.sh            # 5 rounds
#   QUICK=1 bash bench/apply.sh    # 3 rounds
#
# Environment: GLOVE (the release binary), ROUNDS, QUICK, BENCH_DIR
# (default /var/tmp). Needs root (loop devices, mounts).
#
# Each round gets a fresh copy of the tree as the source and a session that
# edits 100 of its files (untimed); then, in alternating order, the timed
# `glove apply SESSION --yes` (recovery scan, the stage mounted read-only,
# the summary, the source hashed against the baseline, the candidate copied
# beside it with every file checked against the final manifest, synced, the
# exchange, the receipt, the old tree removed) and the baseline `cp -a SRC
# DST && sync` of a second fresh copy. `sync` runs before each timed
# command, so neither pays for the other's dirty pages; both read a tree in
# the page cache.
set -euo pipefail
shopt -s inherit_errexit

here=$(cd "$(dirname "$0")" && pwd)
ROUNDS=${ROUNDS:-$([ "${QUICK:-0}" = 1 ] && echo 3 || echo 5)}
BENCH_DIR=${BENCH_DIR:-/var/tmp}
FILES=10000
MIB=200
EDITS=100

if [ -z "${GLOVE:-}" ]; then
    for t in "${CARGO_TARGET_DIR:-$here/../target}" "$here/../target"; do
        for p in "$t/x86_64-unknown-linux-gnu/release/glove" "$t/release/glove"; do
            if [ -x "$p" ]; then GLOVE=$p; break 2; fi
        done
    done
fi
if [ -z "${GLOVE:-}" ] || [ ! -x "$GLOVE" ]; then
    echo "no release glove: cargo build --release -p glove-bin --bin glove, or set GLOVE" >&2
    exit 2
fi
[ "$(id -u)" = 0 ] || { echo "retained workspaces need root" >&2; exit 2; }

TMP=$(mktemp -d "$BENCH_DIR/glove-bench-apply.XXXXXX")
chmod 0755 "$TMP"
export GLOVE_STAGE_DIR=$TMP/stages GLOVE_APPLY_DIR=$TMP/apply GLOVE_APPLY_TRUST=$TMP/trust/policy.json
KEY=$TMP/owner.key
cleanup() {
    local s
    for s in $("$GLOVE" stages list --json 2>/dev/null | python3 -c \
        'import json,sys; print(*sorted({s["session_id"] for s in json.load(sys.stdin)["stages"]}))' \
        2>/dev/null); do
        "$GLOVE" stages rm "$s" >/dev/null 2>&1 || true
    done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

now() { echo "$EPOCHREALTIME"; }
secs() { python3 -c "print(f'{$2 - $1:.6f}')"; }
session_of() {
    python3 -c 'import json,sys; print(json.loads(sys.stdin.read().splitlines()[-1])["workspace"]["session_id"])'
}

echo "glove: $GLOVE"
echo "rounds: $ROUNDS; tree: $FILES files, $MIB MiB under $TMP; load: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 "$here/workspace_tree.py" "$TMP/tree" "$FILES" "$MIB" "$EDITS" >"$TMP/edits"
mapfile -t EDITED <"$TMP/edits"
"$GLOVE" apply keygen --key "$KEY" >/dev/null
mkdir -m 0755 "$TMP/trust"
"$GLOVE" apply trust-policy --key "$KEY" >"$TMP/trust/policy.json"
chmod 0644 "$TMP/trust/policy.json"

# One round's glove side: a fresh source, a session editing it; prints the
# apply's seconds.
glove_apply() {
    local r=$1 src out s t0 t1
    src=$TMP/g$r/src
    mkdir -p "$TMP/g$r" && cp -a "$TMP/tree" "$src"
    # Each round's edit differs: a manifest digest is applied once, ever.
    out=$("$GLOVE" exec --json --workspace "$src" --disk 512M -- \
        /usr/bin/sed -i "3s/\$/ \/\/ edited by the bench, round $r/" "${EDITED[@]}")
    s=$(session_of <<<"$out")
    sync
    t0=$(now)
    "$GLOVE" apply "$s" --yes --key "$KEY" >/dev/null
    t1=$(now)
    grep -q 'edited by the bench' "$src/${EDITED[0]}" || { echo "not applied" >&2; exit 1; }
    "$GLOVE" stages rm "$s" >/dev/null
    rm -rf "$TMP/g$r"
    secs "$t0" "$t1"
}

plain_copy() {
    local r=$1 t0 t1
    mkdir -p "$TMP/b$r" && cp -a "$TMP/tree" "$TMP/b$r/src"
    sync
    t0=$(now)
    cp -a "$TMP/b$r/src" "$TMP/b$r/beside" && sync
    t1=$(now)
    rm -rf "$TMP/b$r"
    secs "$t0" "$t1"
}

glove_apply warm >/dev/null
plain_copy warm >/dev/null
G=()
B=()
for ((r = 0; r < ROUNDS; r++)); do
    if ((r % 2 == 0)); then
        G+=("$(glove_apply "$r")")
        B+=("$(plain_copy "$r")")
    else
        B+=("$(plain_copy "$r")")
        G+=("$(glove_apply "$r")")
    fi
done

python3 - "${G[*]}" "${B[*]}" <<'EOF2'
import statistics, sys
g = [float(x) for x in sys.argv[1].split()]
b = [float(x) for x in sys.argv[2].split()]
gm, bm = statistics.median(g), statistics.median(b)
print()
print("| | glove apply | cp -a beside + sync | ratio (baseline / glove) | goal |")
print("| --- | --- | --- | --- | --- |")
print(f"| apply, 10,000 files / 200 MiB, 100 edited | {gm*1000:.0f} ms | {bm*1000:.0f} ms | {bm/gm:.2f}x | >= 0.8x |")
print()
print("glove rounds (ms):", " ".join(f"{x*1000:.0f}" for x in g))
print("cp rounds (ms):   ", " ".join(f"{x*1000:.0f}" for x in b))
EOF2
