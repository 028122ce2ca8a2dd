#!/usr/bin/env bash
# Before and after a change, in one run: the launch (interleaved, both
# builds in every round) and the managed-start, MCP and egress benches
# (each build's bench executable, alternating, ROUNDS rounds each).
#
#   bash bench/before_after.sh BEFORE_TARGET_DIR AFTER_TARGET_DIR [ROUNDS]
#
# Each target directory holds a release build of the benches of one tree:
#   (cd <tree> && CARGO_TARGET_DIR=<dir> cargo bench -p glove-bin --no-run)
# The MCP bench needs GLOVE_MCP_SERVERS (mcp/package.json). Set
# GLOVE_BENCH_QUICK=1 for the benches' small versions (the default here).
set -euo pipefail
before=${1:?before target dir}
after=${2:?after target dir}
rounds=${3:-3}
export GLOVE_BENCH_QUICK=${GLOVE_BENCH_QUICK:-1}
rel=x86_64-unknown-linux-gnu/release

bench_exe() { # DIR NAME: the newest bench executable of NAME in DIR
  ls -t "$1/$rel/deps/$2"-* 2>/dev/null | grep -v '\.d$' | head -n1
}

echo "== launch: glove exec -- /bin/true, both builds interleaved"
python3 "$(dirname "$0")/interleaved.py" 200 "$before/$rel/glove" "$after/$rel/glove"

for name in managed mcp egress; do
  b=$(bench_exe "$before" "$name")
  a=$(bench_exe "$after" "$name")
  for r in $(seq "$rounds"); do
    echo "== $name round $r: before ($b)"
    "$b" --bench
    echo "== $name round $r: after ($a)"
    "$a" --bench
  done
done
