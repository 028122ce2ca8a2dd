#!/usr/bin/env python3
"""The figures of bench/agent_turn.sh from its run directories.

    agent_turn_report.py RUNS HOST_LOG ROUNDS "AGENTS"

RUNS/<agent>.<kind>.<round>/ holds `times` ("t0 t1 rc", $EPOCHREALTIME),
for a bare run its stub's `requests.jsonl`, for a contained run (kinds
`contained` and `mcp`) its standard error with the GLOVE_LAUNCH_TRACE
marks; HOST_LOG is the log of the stub the contained runs used. Every log
entry has `time` (realtime) and `monotonic_ns` (CLOCK_MONOTONIC, the
marks' clock), which also gives the offset between the two clocks.
"""
import json
import os
import statistics
import sys

runs_dir, host_log, rounds, agents = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split()

# (label, mark that starts it, mark that ends it); "t0" is the command's
# start as the bench took it, "first" the stub's first request.
# Serial steps of the supervisor (durations). Without an MCP profile the
# sandbox's agent is not held at the build: it goes on to its execve while
# the proxy starts.
PHASES = [
    ("exec of glove, to main", "t0", "main"),
    ("arguments, session id, MCP profile read", "main", "agent: find"),
    ("stage lookup (finding the harness)", "agent: find", "agent: found"),
    ("preset, exec spec, workspace check", "agent: found", "parts: prepare"),
    ("egress proxy: prepare", "parts: prepare", "egress prepared"),
    ("MCP mediator: prepare", "egress prepared", "mcp prepared"),
    ("retained workspace staging", "mcp prepared", "workspace staged"),
    ("sandbox launch (build)", "workspace staged", "sandbox built"),
    ("egress proxy: start", "sandbox built", "egress started"),
    ("MCP mediator: start", "egress started", "mcp started"),
]
# From the command's start.
TOTALS = [
    ("glove's start to the harness's execve", "t0", "agent execve"),
    ("the harness's execve to its first model request", "agent execve", "first"),
    ("glove's start to the first model request", "t0", "first"),
]


def read_log(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return out


host = read_log(host_log)


def run(agent, kind, r):
    d = os.path.join(runs_dir, f"{agent}.{kind}.{r}")
    try:
        t0, t1, rc = open(os.path.join(d, "times")).read().split()
    except (OSError, ValueError):
        return None
    t0, t1 = float(t0), float(t1)
    if kind == "bare":
        log = read_log(os.path.join(d, "requests.jsonl"))
    else:
        log = [e for e in host if t0 <= e.get("time", 0) <= t1]
    log = [e for e in log if e.get("method") != "CONNECT"]  # refused hosts, not the model
    first = min(log, key=lambda e: e["time"]) if log else None
    res = {"wall": t1 - t0, "rc": int(rc), "requests": len(log), "first": None}
    if first is None:
        return res
    res["first"] = first["time"] - t0
    if kind != "bare":
        off = first["time"] * 1e9 - first["monotonic_ns"]  # realtime - monotonic, ns
        marks = {"t0": t0 * 1e9 - off, "first": first["monotonic_ns"]}
        try:
            with open(os.path.join(d, "err"), errors="replace") as f:
                for line in f:
                    p = line.split(None, 3)
                    if len(p) == 4 and p[0] == "glove-trace":
                        marks.setdefault(p[3].strip(), int(p[2]))
        except OSError:
            pass
        res["marks"] = marks
    return res


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, unit=1.0, nd=3):
    return "—" if x is None else f"{x * unit:.{nd}f}"


kinds = ["bare", "contained"] + (["mcp"] if any(
    os.path.isdir(os.path.join(runs_dir, f"{a}.mcp.1")) for a in agents) else [])
data = {(a, k, r): run(a, k, r) for a in agents for k in kinds for r in range(1, rounds + 1)}

print()
print("Wall time per turn, s (ratio = contained / bare of the same round)")
head = "| agent | round | bare | contained | ratio |" + (" contained + MCP profile |" if "mcp" in kinds else "")
print(head)
print("|" + " --- |" * (head.count("|") - 1))
for a in agents:
    for r in range(1, rounds + 1):
        b, c = data[(a, "bare", r)], data[(a, "contained", r)]
        m = data.get((a, "mcp", r))
        ratio = c["wall"] / b["wall"] if b and c else None
        row = f"| {a} | {r} | {fmt(b and b['wall'])} | {fmt(c and c['wall'])} | {fmt(ratio, nd=2)} |"
        if "mcp" in kinds:
            row += f" {fmt(m and m['wall'])} |"
        print(row)
print()
print("Medians: wall per turn and time to the first model request (from the command's start)")
print("| agent | bare wall, s | contained wall, s | ratio of medians | median of ratios | bare to 1st request, ms | contained to 1st request, ms | added, ms |"
      + (" MCP wall, s | MCP to 1st request, ms |" if "mcp" in kinds else ""))
print("|" + " --- |" * (10 if "mcp" in kinds else 8))
for a in agents:
    get = lambda k, f: [data[(a, k, r)] and data[(a, k, r)][f] for r in range(1, rounds + 1)]
    bw, cw = med(get("bare", "wall")), med(get("contained", "wall"))
    ratios = [c / b for b, c in zip(get("bare", "wall"), get("contained", "wall")) if b and c]
    bf, cf = med(get("bare", "first")), med(get("contained", "first"))
    row = (f"| {a} | {fmt(bw)} | {fmt(cw)} | {fmt(cw / bw if bw and cw else None, nd=2)} | "
           f"{fmt(med(ratios), nd=2)} | {fmt(bf, 1e3, 1)} | {fmt(cf, 1e3, 1)} | "
           f"{fmt(cf - bf if bf is not None and cf is not None else None, 1e3, 1)} |")
    if "mcp" in kinds:
        row += f" {fmt(med(get('mcp', 'wall')))} | {fmt(med(get('mcp', 'first')), 1e3, 1)} |"
    print(row)
    bad = [f"{k}.{r}: rc {data[(a, k, r)]['rc']}" for k in kinds for r in range(1, rounds + 1)
           if data[(a, k, r)] and data[(a, k, r)]["rc"] != 0]
    if bad:
        print(f"  ({a}: nonzero exits: {', '.join(bad)})")

for k in [k for k in kinds if k != "bare"]:
    print()
    print(f"Glove's phases before the first model request, median ms over the {k} runs"
          + (" (--profile: server-everything mediated)" if k == "mcp" else ""))
    print("| phase | " + " | ".join(agents) + " |")
    print("|" + " --- |" * (len(agents) + 1))
    totals = {a: [] for a in agents}
    for label, s, e in PHASES + TOTALS:
        cells = []
        for a in agents:
            xs = []
            for r in range(1, rounds + 1):
                m = (data[(a, k, r)] or {}).get("marks") or {}
                if s in m and e in m:
                    xs.append((m[e] - m[s]) / 1e6)
            cells.append(fmt(med(xs), nd=1))
        print(f"| {label} | " + " | ".join(cells) + " |")
    for a in agents:
        bf = med([data[(a, 'bare', r)] and data[(a, 'bare', r)]["first"] for r in range(1, rounds + 1)])
        totals[a] = bf
    print("| bare harness, start to first model request (same turn) | "
          + " | ".join(fmt(totals[a], 1e3, 1) for a in agents) + " |")
