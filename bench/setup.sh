#!/usr/bin/env bash
# From nothing to a ready service (issue 29): `glove setup --search-path`
# over the five installed harnesses (directories, keys, each harness staged,
# the starter policy, gloved.json), then `gloved --config` until its ready
# line; against a baseline measured in the same run: `cp -a` of the whole
# npm tree the harnesses were installed into, followed by `sync` (what an
# operator copying the install by hand would do; staging copies each
# harness's closure, a subset, and hashes every file). docs/performance.md, "Setup".
#
#   bash bench/setup.sh            # 3 rounds
#   ROUNDS=1 bash bench/setup.sh
#
# Environment: GLOVE_BIN (the directory of the release glove and gloved),
# GLOVE_HARNESSES (the installed node_modules; .ci/run installs it),
# BENCH_DIR (default /var/lib/glove-tests: staging refuses world-writable
# ancestors such as /tmp). Needs root for the managed runtime's probe.
set -euo pipefail
shopt -s inherit_errexit

here=$(cd "$(dirname "$0")" && pwd)
ROUNDS=${ROUNDS:-3}
BENCH_DIR=${BENCH_DIR:-/var/lib/glove-tests}
H=${GLOVE_HARNESSES:-$(ls -d /var/cache/glove-ci/harnesses-*/node_modules 2>/dev/null | head -1)}
[ -d "$H/.bin" ] || { echo "no harness tree: set GLOVE_HARNESSES" >&2; exit 2; }
if [ -z "${GLOVE_BIN:-}" ]; then
    for t in "${CARGO_TARGET_DIR:-$here/../target}" "$here/../target"; do
        for p in "$t/x86_64-unknown-linux-gnu/release" "$t/release"; do
            if [ -x "$p/gloved" ]; then GLOVE_BIN=$p; break 2; fi
        done
    done
fi
[ -n "${GLOVE_BIN:-}" ] || { echo "no release build: cargo build --release -p glove-bin --bins" >&2; exit 2; }
mkdir -p "$BENCH_DIR" && chmod 755 "$BENCH_DIR"

ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

for round in $(seq 1 "$ROUNDS"); do
    home=$(mktemp -d "$BENCH_DIR/setup-XXXXXX"); chmod 755 "$home"; mkdir -m 700 "$home/run"
    # Baseline: the five trees copied as they are.
    sync; t=$(date +%s%N)
    cp -a "$H" "$home/copy"
    sync
    base=$(ms "$t")
    rm -rf "$home/copy"

    sync; t=$(date +%s%N)
    (
        export HOME=$home XDG_CONFIG_HOME=$home/config XDG_STATE_HOME=$home/state XDG_RUNTIME_DIR=$home/run
        "$GLOVE_BIN/glove" setup --json --search-path "$H/.bin" > "$home/setup.json"
    )
    setup_ms=$(ms "$t")
    t2=$(date +%s%N)
    (
        export HOME=$home XDG_CONFIG_HOME=$home/config XDG_STATE_HOME=$home/state XDG_RUNTIME_DIR=$home/run
        exec "$GLOVE_BIN/gloved" --config "$home/config/glove/gloved.json"
    ) > "$home/gloved.out" 2> "$home/gloved.err" &
    pid=$!
    until grep -q "gloved ready" "$home/gloved.out" 2>/dev/null; do
        kill -0 "$pid" 2>/dev/null || { cat "$home/gloved.err" >&2; exit 1; }
        sleep 0.005
    done
    ready_ms=$(ms "$t2")
    total=$(ms "$t")
    kill -TERM "$pid"; wait "$pid" || true
    staged=$(python3 -c 'import json,sys; print(sum(1 for i in json.load(open(sys.argv[1]))["items"] if i["what"]=="staged harness"))' "$home/setup.json")
    ratio=$(python3 -c "print(f'{$setup_ms / max($base, 1):.2f}')")
    echo "round $round: setup ${setup_ms} ms ($staged harnesses staged) + gloved ready ${ready_ms} ms = ${total} ms; baseline cp -a + sync ${base} ms; setup/baseline ${ratio}"
    rm -rf "$home"
done
