#!/usr/bin/env bash
# Launch cost of `glove exec -- /bin/true` against bare /bin/true and
# bubblewrap, each regime in one hyperfine invocation; prints the ratios.
#
#   bash bench/launch.sh            # 300 runs each
#   RUNS=1000 bash bench/launch.sh
#   GLOVE_BIN=path/to/glove bash bench/launch.sh
#
# Two regimes:
#   back-to-back  runs follow each other at once: both cores stay busy, so
#                 the figure is mostly CPU per launch (including the
#                 kernel's deferred work: namespace and cgroup teardown);
#   spaced        30 ms of idle before every run (hyperfine --prepare), as
#                 sessions are really started: the figure is the latency of
#                 one launch on an idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v hyperfine >/dev/null || need+=(hyperfine)
command -v bwrap >/dev/null || need+=(bubblewrap)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && apt-get install -y -qq "${need[@]}"
fi

if [ -z "${GLOVE_BIN:-}" ]; then
  cargo build -q --release --bin glove
  GLOVE_BIN="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/x86_64-unknown-linux-gnu/release/glove"
fi
RUNS="${RUNS:-300}"
DIR="$(mktemp -d)"

BWRAP="bwrap --unshare-all --die-with-parent --ro-bind /usr /usr"
for d in bin lib lib64 sbin; do
  if [ -L "/$d" ]; then BWRAP="$BWRAP --symlink $(readlink /$d) /$d"; elif [ -d "/$d" ]; then BWRAP="$BWRAP --ro-bind /$d /$d"; fi
done
BWRAP="$BWRAP --proc /proc --dev /dev --tmpfs /tmp /bin/true"

run() {
  hyperfine -N --warmup 20 --runs "$RUNS" "$@" \
    -n bare '/bin/true' \
    -n glove "$GLOVE_BIN exec -- /bin/true" \
    -n bwrap "$BWRAP"
}
run --export-json "$DIR/back-to-back.json"
run --prepare 'sleep 0.03' --export-json "$DIR/spaced.json"

python3 - "$DIR" <<'PY'
import json, os, sys
print()
for regime in ("back-to-back", "spaced"):
    r = {x["command"]: x for x in json.load(open(os.path.join(sys.argv[1], regime + ".json")))["results"]}
    med = {k: v["median"] * 1000 for k, v in r.items()}
    print(f"{regime}:")
    for k in ("bare", "glove", "bwrap"):
        print(f"  {k:6} median {med[k]:7.3f} ms  mean {r[k]['mean']*1000:7.3f} ms")
    print(f"  glove/bwrap = {med['glove']/med['bwrap']:.2f}   glove/bare = {med['glove']/med['bare']:.2f}")
PY
