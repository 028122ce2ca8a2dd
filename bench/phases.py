#!/usr/bin/env python3
"""Median time of each launch phase of `glove exec`, from GLOVE_LAUNCH_TRACE.

    for i in $(seq 100); do GLOVE_LAUNCH_TRACE=1 glove exec -- /bin/true; done 2>&1 \
        | python3 bench/phases.py

Every mark is `glove-trace <pid>@<cpu> <CLOCK_MONOTONIC ns> <label>` on the
supervisor's standard error (the sandbox init and the agent write to a copy
of it until the agent's execve). Times are from the run's `exec start` mark,
which `glove exec` writes first thing after parsing its arguments.
"""
import statistics
import sys

runs, cur = [], []
for line in sys.stdin:
    p = line.split(None, 3)
    if len(p) < 4 or p[0] != "glove-trace":
        continue
    label = p[3].strip()
    if label == "exec start" and cur:
        runs.append(cur)
        cur = []
    cur.append((int(p[2]), label))
if cur:
    runs.append(cur)

at, order = {}, []
for r in runs:
    r.sort()
    t0 = r[0][0]
    for t, label in r:
        if label not in at:
            at[label] = []
            order.append(label)
        at[label].append((t - t0) / 1e6)
order.sort(key=lambda label: statistics.median(at[label]))
print(f"{len(runs)} runs; median time of each mark after 'exec start'")
prev = 0.0
for label in order:
    m = statistics.median(at[label])
    print(f"  {label:22} {m:7.3f} ms  (+{m - prev:.3f})")
    prev = m
