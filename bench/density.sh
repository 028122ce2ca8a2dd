#!/usr/bin/env bash
# Density (issue 29): N idle managed sessions (`/usr/bin/sleep 3600`)
# through one gloved, and the memory of everything Glove runs per session
# beyond the agent itself: the launcher and the sandbox's init (a session
# without egress or MCP has no proxy and no mediator), plus gloved's own
# growth divided by N. Resident (RSS) and proportional (PSS, shared pages
# split between their users) sizes, per process kind. Goal: <= 4 MiB per
# session (docs/performance.md, "Density").
#
#   bash bench/density.sh            # 50 sessions
#   N=10 bash bench/density.sh
#
# Environment: GLOVE_BIN (the directory holding the release glove, gloved
# and glove-launcher), N, BENCH_DIR (default /var/lib/glove-tests: staging
# and launching refuse world-writable ancestors such as /tmp). Needs root
# (cgroups). Everything runs from a fresh `glove setup` in a private home.
set -euo pipefail
shopt -s inherit_errexit

here=$(cd "$(dirname "$0")" && pwd)
N=${N:-50}
BENCH_DIR=${BENCH_DIR:-/var/lib/glove-tests}
if [ -z "${GLOVE_BIN:-}" ]; then
    for t in "${CARGO_TARGET_DIR:-$here/../target}" "$here/../target"; do
        for p in "$t/x86_64-unknown-linux-gnu/release" "$t/release"; do
            if [ -x "$p/gloved" ] && [ -x "$p/glove-launcher" ]; then GLOVE_BIN=$p; break 2; fi
        done
    done
fi
if [ -z "${GLOVE_BIN:-}" ]; then
    echo "no release build: cargo build --release -p glove-bin --bins, or set GLOVE_BIN" >&2
    exit 2
fi
G=$GLOVE_BIN/glove

mkdir -p "$BENCH_DIR" && chmod 755 "$BENCH_DIR"
home=$(mktemp -d "$BENCH_DIR/density-XXXXXX")
chmod 755 "$home"
mkdir -m 700 "$home/run"
gloved_pid=
cleanup() {
    [ -n "$gloved_pid" ] && kill -TERM "$gloved_pid" 2>/dev/null && wait "$gloved_pid" 2>/dev/null
    rm -rf "$home"
}
trap cleanup EXIT
export HOME=$home XDG_CONFIG_HOME=$home/config XDG_STATE_HOME=$home/state XDG_RUNTIME_DIR=$home/run
cd "$home"

"$G" setup --json > setup.json
# The starter policy plus a `sleep` template (the idle agent).
policy=$XDG_CONFIG_HOME/glove/session-policy.json
"$G" policy generate --runtime sleep --executable /usr/bin/sleep --arg 3600 \
    --template-id sleep --env PATH=/usr/bin:/bin > sleep.json
python3 - "$policy" sleep.json <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))
p["runtime_templates"].append(json.load(open(sys.argv[2])))
p["runtime_templates"].sort(key=lambda t: t["runtime_template_id"])
p["revision"] += 1
open(sys.argv[1] + ".new", "w").write(json.dumps(p, sort_keys=True, separators=(",", ":")))
EOF
chmod 600 "$policy.new" && mv "$policy.new" "$policy"

"$GLOVE_BIN/gloved" --config "$XDG_CONFIG_HOME/glove/gloved.json" > gloved.out 2> gloved.err &
gloved_pid=$!
for _ in $(seq 1 600); do grep -q "gloved ready" gloved.out 2>/dev/null && break; sleep 0.05; done
grep -q "gloved ready" gloved.out || { cat gloved.err >&2; exit 1; }

kib() { awk -v k="$2" '$1 == k":" { print $2 }' "/proc/$1/$3" 2>/dev/null || echo 0; }
rss() { kib "$1" VmRSS status; }
pss() { kib "$1" Pss smaps_rollup; }
gloved_rss0=$(rss "$gloved_pid"); gloved_pss0=$(pss "$gloved_pid")

key=$XDG_CONFIG_HOME/glove/start-auth.key
start=$(date +%s%N)
for i in $(seq 1 "$N"); do
    "$G" plan new --template sleep --profile small --session "density-$i" --out "p$i.json" > /dev/null
    "$G" session create --plan "p$i.json" > /dev/null
    auth=$("$G" session authorize "density-$i" --start-auth-key "$key")
    "$G" session start "density-$i" --authorization "$auth" > /dev/null
done
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))

# Every process under gloved: launcher (child of gloved), init (child of
# the launcher), the agent (child of init, not counted).
declare -A RSS PSS COUNT
children() { awk -v p="$1" '{ if ($4 == p) print $1 }' /proc/[0-9]*/stat 2>/dev/null || true; }
for l in $(children "$gloved_pid"); do
    [ "$(cat "/proc/$l/comm" 2>/dev/null)" = glove-launcher ] || continue
    RSS[launcher]=$(( ${RSS[launcher]:-0} + $(rss "$l") )); PSS[launcher]=$(( ${PSS[launcher]:-0} + $(pss "$l") ))
    COUNT[launcher]=$(( ${COUNT[launcher]:-0} + 1 ))
    for init in $(children "$l"); do
        RSS[init]=$(( ${RSS[init]:-0} + $(rss "$init") )); PSS[init]=$(( ${PSS[init]:-0} + $(pss "$init") ))
        COUNT[init]=$(( ${COUNT[init]:-0} + 1 ))
        for agent in $(children "$init"); do
            RSS[agent]=$(( ${RSS[agent]:-0} + $(rss "$agent") )); PSS[agent]=$(( ${PSS[agent]:-0} + $(pss "$agent") ))
            COUNT[agent]=$(( ${COUNT[agent]:-0} + 1 ))
        done
    done
done
gloved_rss=$(( $(rss "$gloved_pid") - gloved_rss0 )); gloved_pss=$(( $(pss "$gloved_pid") - gloved_pss0 ))
running=$("$G" session list --json | python3 -c 'import json,sys; print(sum(1 for s in json.load(sys.stdin)["sessions"] if s["stage"] == "running"))')

per() { python3 -c "print(f'{$1 / $N / 1024:.2f}')"; }
echo "density: $N idle sessions ($running running), started in ${elapsed_ms} ms"
printf '%-22s %6s %14s %14s\n' process count "RSS MiB/sess" "PSS MiB/sess"
for k in launcher init; do
    printf '%-22s %6s %14s %14s\n' "$k" "${COUNT[$k]:-0}" "$(per "${RSS[$k]:-0}")" "$(per "${PSS[$k]:-0}")"
done
printf '%-22s %6s %14s %14s\n' "gloved growth" 1 "$(per "$gloved_rss")" "$(per "$gloved_pss")"
glove_rss=$(( ${RSS[launcher]:-0} + ${RSS[init]:-0} + gloved_rss ))
glove_pss=$(( ${PSS[launcher]:-0} + ${PSS[init]:-0} + gloved_pss ))
printf '%-22s %6s %14s %14s\n' "Glove, per session" "" "$(per "$glove_rss")" "$(per "$glove_pss")"
printf '%-22s %6s %14s %14s\n' "agent (not counted)" "${COUNT[agent]:-0}" "$(per "${RSS[agent]:-0}")" "$(per "${PSS[agent]:-0}")"
echo "goal: <= 4.00 MiB per session (PSS is the fair share; RSS counts shared pages in every process)"

for i in $(seq 1 "$N"); do "$G" session stop "density-$i" --grace-ms 200 > /dev/null || true; done
