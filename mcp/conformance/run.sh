#!/usr/bin/env bash
# The official MCP conformance suite's server scenarios against
# server-everything twice, through bridge.mjs (Streamable HTTP in front of
# a stdio server, one child per session):
#   (a) directly: `node server-everything stdio`;
#   (b) through Glove: `glove run --profile P -- /run/glove/bin/glove
#       mcp-relay everything`, the relay contained, every request mediated,
#       pinned and audited (one `glove run`, one audit journal per session).
# Prints the table (compare.mjs) and fails when a scenario that passes
# directly fails through Glove unless expected-differences.txt lists it
# (and when a listed one no longer differs); then verifies every session's
# audit journal (`glove audit verify`, at the head its `glove run`
# reported) and shows what the journals recorded.
#
#   bash mcp/conformance/run.sh GLOVE_BINARY
#
# Needs node and GLOVE_MCP_SERVERS, the node_modules of mcp/package.json
# (.ci/run installs it). Listens on 127.0.0.1 only (a free port). Set
# GLOVE_CONFORMANCE_KEEP=1 to keep the work directory.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
[ $# -eq 1 ] || { echo "usage: run.sh GLOVE_BINARY" >&2; exit 2; }
glove=$(readlink -f "$1")
nm=${GLOVE_MCP_SERVERS:?GLOVE_MCP_SERVERS must name the node_modules of mcp/package.json}
node=$(readlink -f "$(command -v node)")
everything=$nm/@modelcontextprotocol/server-everything/dist/index.js
suite=$nm/@modelcontextprotocol/conformance/dist/index.js
for f in "$glove" "$node"; do
  [ -x "$f" ] || { echo "run.sh: $f is not executable" >&2; exit 2; }
done
for f in "$everything" "$suite" "$nm/@modelcontextprotocol/sdk/package.json"; do
  [ -f "$f" ] || { echo "run.sh: $f is missing (npm ci in mcp/)" >&2; exit 2; }
done
version() { "$node" -p "require(process.argv[1]).version" "$nm/@modelcontextprotocol/$1/package.json"; }
echo "conformance $(version conformance), server-everything $(version server-everything)," \
  "SDK $(version sdk), node $("$node" --version), $("$glove" --version 2>/dev/null || echo '?')"

work=$(mktemp -d "${TMPDIR:-/tmp}/glove-conformance.XXXXXX")
chmod 700 "$work"
mkdir -m 700 "$work/audit" "$work/pins" "$work/state"

bridge_pid=""
suite_pid=""
stop_bridge() {
  [ -n "$bridge_pid" ] || return 0
  # The bridge closes every session's child (stdin, then SIGTERM, then
  # SIGKILL) and exits; past 40 s its process group is killed.
  kill -TERM "$bridge_pid" 2>/dev/null || true
  local i
  for i in $(seq 200); do
    kill -0 "$bridge_pid" 2>/dev/null || break
    sleep 0.2
  done
  if kill -0 "$bridge_pid" 2>/dev/null; then
    echo "run.sh: the bridge did not stop in 40 s; killing its process group" >&2
  fi
  # Whatever of its group is left (nothing, unless the bridge died).
  kill -KILL -- "-$bridge_pid" 2>/dev/null || true
  wait "$bridge_pid" 2>/dev/null || true
  bridge_pid=""
}
cleanup() {
  if [ -n "$suite_pid" ]; then
    kill -TERM "$suite_pid" 2>/dev/null || true
    wait "$suite_pid" 2>/dev/null || true
  fi
  stop_bridge
  if [ "${GLOVE_CONFORMANCE_KEEP:-0}" = 1 ]; then
    echo "work directory kept: $work"
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# run_suite LABEL CMD...: the suite against a bridge over CMD.
run_suite() {
  local label=$1
  shift
  local dir=$work/$label
  mkdir -m 700 "$dir" "$dir/stderr"
  # Job control on: the bridge gets a process group of its own (its id).
  set -m
  "$node" "$here/bridge.mjs" --sdk "$nm" --child-stderr "$dir/stderr/{session}.log" \
    -- "$@" >"$dir/bridge.out" 2>"$dir/bridge.log" &
  bridge_pid=$!
  set +m
  local url="" i
  for i in $(seq 75); do
    url=$(sed -n 's/^listening //p' "$dir/bridge.out")
    [ -n "$url" ] && break
    kill -0 "$bridge_pid" 2>/dev/null || break
    sleep 0.2
  done
  if [ -z "$url" ]; then
    echo "run.sh: the $label bridge did not start" >&2
    cat "$dir/bridge.log" >&2
    return 1
  fi
  local start=$SECONDS rc=0
  # In the background so that a signal to this script is handled at once.
  (cd "$dir" && exec timeout -k 5 150 "$node" "$suite" server --url "$url" -o "$dir/results") \
    >"$dir/suite.log" 2>&1 &
  suite_pid=$!
  wait "$suite_pid" || rc=$?
  suite_pid=""
  # The suite exits 1 when any scenario fails (most fail against
  # server-everything, which is not the suite's reference server); 124 is
  # the timeout.
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 1 ]; then
    echo "run.sh: the $label suite run ended with $rc" >&2
    tail -n 20 "$dir/suite.log" >&2
  fi
  stop_bridge
  echo "$label: $(grep -c '^bridge: session [0-9]*: [0-9a-f-]*$' "$dir/bridge.log") sessions, $((SECONDS - start)) s" \
    "($(sed -n 's/^Total: //p' "$dir/suite.log"))"
}

"$node" "$here/profile.mjs" --sdk "$nm" --out "$work/profile.json" -- "$node" "$everything" stdio

run_suite direct "$node" "$everything" stdio
XDG_STATE_HOME=$work/state run_suite glove "$glove" run --profile "$work/profile.json" \
  --audit-journal "$work/audit/{session}.journal" --pins "$work/pins/pins.json" \
  -- /run/glove/bin/glove mcp-relay everything

echo
status=0
"$node" "$here/compare.mjs" --direct "$work/direct/results" --glove "$work/glove/results" \
  --expected "$here/expected-differences.txt" || status=1

# The first session pinned every tool; none of the later ones saw a
# definition differ.
echo
if ! "$glove" run pins show --pins "$work/pins/pins.json" --json >"$work/pins.out" 2>&1 ||
  ! "$node" -e '
    const pins = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).servers.everything;
    const tools = JSON.parse(require("fs").readFileSync(process.argv[2], "utf8")).servers[0].tools;
    const pending = Object.keys(pins?.pending ?? {});
    const pinned = Object.keys(pins?.tools ?? {});
    console.log(`pins: ${pinned.length} of ${tools.length} tools pinned, ${pending.length} pending${pending.length ? ": " + pending.join(", ") : ""}`);
    process.exit(pinned.length === tools.length && pending.length === 0 ? 0 : 1);
  ' "$work/pins.out" "$work/profile.json"; then
  echo "pins FAILED:" >&2
  cat "$work/pins.out" >&2
  status=1
fi

# Every session's journal holds, ends at the head its glove run reported,
# and all of them together show the suite's requests decided.
echo
sessions=$(grep -c '^bridge: session [0-9]*: child [0-9]* started' "$work/glove/bridge.log" || true)
shopt -s nullglob
journals=("$work"/audit/*.journal)
shopt -u nullglob
echo "audit: ${#journals[@]} journals for $sessions glove run sessions"
if [ "${#journals[@]}" -eq 0 ] || [ "${#journals[@]}" -ne "$sessions" ]; then
  echo "audit FAILED: one journal per session expected" >&2
  status=1
fi
: >"$work/events.jsonl"
for j in "${journals[@]}"; do
  log=$work/glove/stderr/$(basename "$j" .journal).log
  head=$(sed -n "s|^glove: MCP: .*; audit $j ([0-9]* records, head \([0-9a-f]\{64\}\))\$|\1|p" "$log")
  if [ -z "$head" ]; then
    echo "audit FAILED: the glove run of $j reported no head; its standard error:" >&2
    cat "$log" >&2
    status=1
    continue
  fi
  if ! "$glove" audit verify --journal "$j" --head "$head" >"$work/verify.out" 2>&1; then
    echo "audit FAILED: glove audit verify --journal $j --head $head:" >&2
    cat "$work/verify.out" >&2
    status=1
    continue
  fi
  "$glove" audit show --journal "$j" --head "$head" --json >>"$work/events.jsonl"
  echo >>"$work/events.jsonl"
done
echo "glove audit verify: $(grep -c . "$work/events.jsonl" || true) journals verified at their reported heads"
"$node" -e '
  const fs = require("fs");
  const counts = new Map();
  let n = 0;
  for (const line of fs.readFileSync(process.argv[1], "utf8").split("\n")) {
    if (!line) continue;
    for (const e of JSON.parse(line).events) {
      const k = `${e.method ?? "(frame)"} ${e.decision}${e.code ? " " + e.code : ""}`;
      counts.set(k, (counts.get(k) ?? 0) + 1);
      n++;
    }
  }
  console.log(`audited decisions (${n} events):`);
  for (const [k, v] of [...counts].sort()) console.log(`  ${String(v).padStart(4)}  ${k}`);
' "$work/events.jsonl"

exit "$status"
