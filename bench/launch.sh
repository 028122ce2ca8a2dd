#!/usr/bin/env bash
# Launch cost of `glove exec -- /bin/true` against bare /bin/true and
# bubblewrap, in one hyperfine invocation; prints the ratios.
#
#   bash bench/launch.sh            # 300 runs each
#   RUNS=1000 bash bench/launch.sh
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v hyperfine >/dev/null || need+=(hyperfine)
command -v bwrap >/dev/null || need+=(bubblewrap)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && apt-get install -y -qq "${need[@]}"
fi

[ -n "${GLOVE_BIN:-}" ] || cargo build -q --release --bin glove
GLOVE="${GLOVE_BIN:-$PWD/target/release/glove}"
RUNS="${RUNS:-300}"
OUT="$(mktemp -d)/launch.json"

BWRAP="bwrap --unshare-all --die-with-parent --ro-bind /usr /usr"
for d in bin lib lib64 sbin; do
  if [ -L "/$d" ]; then BWRAP="$BWRAP --symlink $(readlink /$d) /$d"; elif [ -d "/$d" ]; then BWRAP="$BWRAP --ro-bind /$d /$d"; fi
done
BWRAP="$BWRAP --proc /proc --dev /dev --tmpfs /tmp /bin/true"

hyperfine -N --warmup 20 --runs "$RUNS" --export-json "$OUT" \
  -n bare '/bin/true' \
  -n glove "$GLOVE exec -- /bin/true" \
  -n bwrap "$BWRAP"

python3 - "$OUT" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
med = {k: v["median"] * 1000 for k, v in r.items()}
print()
for k in ("bare", "glove", "bwrap"):
    print(f"{k:6} median {med[k]:7.3f} ms  mean {r[k]['mean']*1000:7.3f} ms")
print(f"glove/bwrap = {med['glove']/med['bwrap']:.2f}   glove/bare = {med['glove']/med['bare']:.2f}")
PY
