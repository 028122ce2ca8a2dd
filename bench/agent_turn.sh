#!/usr/bin/env bash
# One-command agent turns (issue 30): a codex and a claude-code turn
# against the scripted model endpoint, bare on the host against
# `glove run --agent` (workspace retained, key brokered), alternating, in
# one run (docs/performance.md, "One-command agent turns (issue 30)").
#
#   GLOVE_HARNESSES=…/node_modules bash bench/agent_turn.sh    # 5 rounds
#   QUICK=1 GLOVE_HARNESSES=… bash bench/agent_turn.sh         # 3 rounds
#
# Environment: GLOVE (the release binary), GLOVE_HARNESSES (the npm tree
# with @openai/codex and @anthropic-ai/claude-code), GLOVE_MCP_SERVERS
# (optional: the tests' MCP profile variant, server-everything), ROUNDS,
# QUICK, AGENTS (default "codex claude-code"). Needs root (retained
# workspaces); its files live under /var/lib/glove-tests and go at the end.
#
# The turn is the tests' (tests/agent.rs): the stub answers the first
# request with a shell call that writes env.txt, edits edit.txt, deletes
# gone.txt and writes new/added.txt, then "done". Each run gets a fresh
# copy of the same three-file workspace.
#
#   bare:      the harness's platform binary run directly, in a private
#              HOME made for the run, pointed straight at the stub with the
#              real key, other hosts refused at once (the stub as their
#              proxy: it answers CONNECT with an error). It runs as the stub's command under `stub.py
#              --isolate` (a network namespace of its own holding only
#              loopback: the bare harness reaches nothing but the stub).
#   contained: `glove run --agent A --model http://127.0.0.1:PORT
#              --key-file K --workspace W --harness-path NM --json -- ARGS`
#              against a stub on host loopback (the key brokered by the
#              egress proxy; the stage removed after the run, untimed).
#   mcp:       the contained run with the tests' MCP profile (--profile:
#              server-everything's echo, mediated); the same turn (the stub
#              does not call the tool). Only when GLOVE_MCP_SERVERS is set.
#
# Wall time is from just before the command starts to its exit, taken the
# same way for each ($EPOCHREALTIME in the same shell). The first model
# request's arrival is the stub's log (`time`), so "to first request" is
# the same for both. The contained runs set GLOVE_LAUNCH_TRACE=1: the marks
# (CLOCK_MONOTONIC) and the stub's `monotonic_ns` give the phases Glove
# adds before the first request.
set -euo pipefail
shopt -s inherit_errexit

here=$(cd "$(dirname "$0")" && pwd)
ROUNDS=${ROUNDS:-$([ "${QUICK:-0}" = 1 ] && echo 3 || echo 5)}
AGENTS=${AGENTS:-codex claude-code}
STUB=$here/../crates/glove-bin/tests/model_stub/stub.py
SCRIPT='cat /proc/[0-9]*/environ 2>/dev/null | tr '"'"'\0'"'"' '"'"'\n'"'"' | sort -u > env.txt && printf '"'"'one\n2\n'"'"' > edit.txt && rm gone.txt && mkdir -p new && echo fresh > new/added.txt && echo "read:ok:$PWD"'
PROMPT="Change the files as the task says."

if [ -z "${GLOVE:-}" ]; then
    for t in "${CARGO_TARGET_DIR:-$here/../target}" "$here/../target"; do
        for p in "$t/x86_64-unknown-linux-gnu/release/glove" "$t/release/glove"; do
            if [ -x "$p" ]; then GLOVE=$p; break 2; fi
        done
    done
fi
if [ -z "${GLOVE:-}" ] || [ ! -x "$GLOVE" ]; then
    echo "no release glove: cargo build --release -p glove-bin --bins, or set GLOVE" >&2
    exit 2
fi
[ "$(id -u)" = 0 ] || { echo "retained workspaces need root" >&2; exit 2; }
NM=${GLOVE_HARNESSES:-}
[ -d "$NM" ] || { echo "GLOVE_HARNESSES names no harness tree" >&2; exit 2; }
exe_of() {
    case $1 in
        codex) echo "$NM/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex" ;;
        claude-code) echo "$NM/@anthropic-ai/claude-code-linux-x64/claude" ;;
        *) echo "unknown agent $1" >&2; return 2 ;;
    esac
}

BASE=/var/lib/glove-tests
mkdir -p "$BASE" && chmod 0755 "$BASE"
TMP=$(mktemp -d "$BASE/bench-agent.XXXXXX")
chmod 0755 "$TMP"
mkdir -p "$TMP/state" "$TMP/trust" "$TMP/runs"
export GLOVE_STAGE_DIR=$TMP/stages GLOVE_APPLY_DIR=$TMP/apply \
    GLOVE_APPLY_TRUST=$TMP/trust/policy.json XDG_STATE_HOME=$TMP/state
STUB_PID=
cleanup() {
    if [ -n "$STUB_PID" ]; then kill "$STUB_PID" 2>/dev/null; wait "$STUB_PID" 2>/dev/null || true; fi
    local s
    for s in $("$GLOVE" stages list --json 2>/dev/null | python3 -c \
        'import json,sys; print(*sorted({s["session_id"] for s in json.load(sys.stdin)["stages"]}))' \
        2>/dev/null); do
        "$GLOVE" stages rm "$s" >/dev/null 2>&1 || true
    done
    [ "${KEEP:-0}" = 1 ] && echo "kept $TMP" >&2 || rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

KEY=$TMP/model.key
REAL=sk-glove-bench-real-51c3
(umask 077 && echo "$REAL" > "$KEY")

# The host stub, for the contained runs.
/usr/bin/python3 "$STUB" --shell-command "$SCRIPT" --port 0 --log "$TMP/host.jsonl" \
    > "$TMP/stub.port" 2> "$TMP/stub.err" < /dev/null &
STUB_PID=$!
for _ in $(seq 100); do [ -s "$TMP/stub.port" ] && break; sleep 0.05; done
PORT=$(head -1 "$TMP/stub.port")
[ -n "$PORT" ] || { echo "the stub did not start" >&2; cat "$TMP/stub.err" >&2; exit 1; }

PROFILE=
MCP_NM=${GLOVE_MCP_SERVERS:-}
if [ -n "$MCP_NM" ] && [ -f "$MCP_NM/@modelcontextprotocol/server-everything/dist/index.js" ]; then
    PROFILE=$TMP/mcp-profile.json
    python3 - "$MCP_NM" "$PROFILE" <<'EOF'
import json, os, sys
servers, out = sys.argv[1], sys.argv[2]
v = {"schema_version": 1, "servers": [{
    "server_id": "everything",
    "command": {"path": "/usr/bin/node",
                "arguments": [os.path.join(servers, "@modelcontextprotocol/server-everything/dist/index.js"), "stdio"],
                "environment": ["PATH=/usr/bin:/bin"], "working_directory": "/"},
    "tools": [{"name": "echo"}]}]}
with open(out, "w") as f:
    json.dump(v, f)
os.chmod(out, 0o600)
EOF
fi

# The harness's one-turn arguments (those of tests/agent.rs).
turn_args() {
    case $1 in
        codex) printf '%s\n' exec --skip-git-repo-check -s danger-full-access "$PROMPT" ;;
        claude-code)
            if [ "${2:-}" = mcp ]; then
                printf '%s\n' -p "$PROMPT" --allowedTools Bash mcp__everything__echo
            else
                printf '%s\n' -p "$PROMPT" --allowedTools Bash
            fi ;;
    esac
}

fresh_workspace() {
    mkdir -p "$1"
    printf 'one\ntwo\n' > "$1/edit.txt"
    echo bye > "$1/gone.txt"
    echo k > "$1/keep.txt"
}

# The bare command: the harness's endpoint settings as the preset's
# (crates/glove-types/src/harness/{codex,claude_code}.rs), straight at the
# stub, in a private HOME.
bare_script() { # AGENT RUNDIR
    local a=$1 d=$2 exe url=http://127.0.0.1:18080
    # Anything but the stub goes to the stub as a proxy, which refuses its
    # CONNECT at once, as Glove's proxy refuses a host it does not allow
    # (without it, codex's look-ups of github.com and chatgpt.com wait out
    # the resolver's timeout in the loopback-only namespace: 5 s a turn).
    local proxy="HTTPS_PROXY=$url HTTP_PROXY=$url https_proxy=$url http_proxy=$url NO_PROXY=127.0.0.1 no_proxy=127.0.0.1"
    exe=$(exe_of "$a")
    mapfile -t args < <(turn_args "$a")
    {
        echo 'set -u'
        printf 'cd %q\n' "$d/ws"
        if [ "$a" = codex ]; then
            local provider="model_providers.glove={name=\"glove\",base_url=\"$url/v1\",env_key=\"OPENAI_API_KEY\",wire_api=\"responses\"}"
            printf 'mkdir -p %q\n' "$d/home/.codex"
            printf 'cmd=(env -i %s PATH=/usr/bin:/bin HOME=%q CODEX_HOME=%q OPENAI_API_KEY=%q %q exec -m glove-stub -c %q -c model_provider=glove' \
                "$proxy" "$d/home" "$d/home/.codex" "$REAL" "$exe" "$provider"
            printf ' %q' "${args[@]:1}"
        else
            printf 'mkdir -p %q\n' "$d/home/.claude"
            printf 'cmd=(env -i %s PATH=/usr/bin:/bin HOME=%q CLAUDE_CONFIG_DIR=%q ANTHROPIC_API_KEY=%q ANTHROPIC_BASE_URL=%q ANTHROPIC_MODEL=glove-stub CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 %q' \
                "$proxy" "$d/home" "$d/home/.claude" "$REAL" "$url" "$exe"
            printf ' %q' "${args[@]}"
        fi
        echo ')'
        printf 't0=$EPOCHREALTIME; "${cmd[@]}" > %q 2> %q < /dev/null; rc=$?; t1=$EPOCHREALTIME\n' \
            "$d/out" "$d/err"
        printf 'echo "$t0 $t1 $rc" > %q\n' "$d/times"
    } > "$d/bare.sh"
}

run_bare() { # AGENT RUNDIR
    local d=$2
    fresh_workspace "$d/ws"
    mkdir -p "$d/home"
    bare_script "$1" "$d"
    /usr/bin/python3 "$STUB" --isolate --shell-command "$SCRIPT" --port 18080 \
        --log "$d/requests.jsonl" --timeout 600 -- /bin/bash "$d/bare.sh" \
        > /dev/null 2> "$d/stub.err" < /dev/null || true
    # The turn did its work.
    if [ ! -f "$d/ws/new/added.txt" ] || [ -e "$d/ws/gone.txt" ]; then
        echo "bare $1 ($d): the turn did not change the workspace" >&2
        tail -5 "$d/err" >&2 || true
        return 1
    fi
}

run_contained() { # AGENT RUNDIR [mcp]
    local a=$1 d=$2 extra=()
    fresh_workspace "$d/ws"
    [ "${3:-}" = mcp ] && extra=(--profile "$PROFILE")
    mapfile -t args < <(turn_args "$a" "${3:-}")
    local t0 t1 rc=0
    t0=$EPOCHREALTIME
    GLOVE_LAUNCH_TRACE=1 "$GLOVE" run --agent "$a" --model "http://127.0.0.1:$PORT" \
        --model-name glove-stub --key-file "$KEY" --workspace "$d/ws" --harness-path "$NM" \
        --disk 2G --memory 3G --pids 1024 --wall-ms 300000 --cpu-ms 600000 --json \
        "${extra[@]}" -- "${args[@]}" > "$d/out.json" 2> "$d/err" < /dev/null || rc=$?
    t1=$EPOCHREALTIME
    echo "$t0 $t1 $rc" > "$d/times"
    local session
    session=$(python3 -c 'import json,sys; v=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); w=v.get("workspace") or {}; assert w.get("changed") is True, "unchanged"; print(w["session_id"])' "$d/out.json" 2>/dev/null) || {
        echo "contained $a ($d): exit $rc, no changed workspace" >&2
        tail -5 "$d/err" >&2 || true
        return 1
    }
    "$GLOVE" stages rm "$session" > /dev/null 2>&1 || true
}

echo "glove $GLOVE; harnesses $NM; $ROUNDS rounds; stub on 127.0.0.1:$PORT;" \
    "MCP variant: $([ -n "$PROFILE" ] && echo yes || echo 'no (GLOVE_MCP_SERVERS unset)')"
for r in $(seq "$ROUNDS"); do
    for a in $AGENTS; do
        kinds=(bare contained)
        # Alternate which goes first.
        [ $((r % 2)) = 0 ] && kinds=(contained bare)
        [ -n "$PROFILE" ] && kinds+=(mcp)
        for k in "${kinds[@]}"; do
            d=$TMP/runs/$a.$k.$r
            mkdir -p "$d"
            case $k in
                bare) run_bare "$a" "$d" ;;
                contained) run_contained "$a" "$d" ;;
                mcp) run_contained "$a" "$d" mcp ;;
            esac
            sync
        done
    done
done

python3 "$here/agent_turn_report.py" "$TMP/runs" "$TMP/host.jsonl" "$ROUNDS" "$AGENTS"
