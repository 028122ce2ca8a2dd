"""The MCP benchmark's client (stdlib only): runs a stdio MCP server
command, completes the 2025-11-25 handshake, then times `tools/call` of
server-everything's `echo`: COUNT calls one at a time (latency), and
COUNT calls with WINDOW in flight (throughput).
Usage: mcp_client.py MODE COUNT WINDOW -- SERVER_COMMAND ...
Prints one JSON line with the mode, p50/p99 latency (ms) and calls/s."""
import json
import os
import socket
import subprocess
import sys
import time

mode, count, window = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cmd = sys.argv[sys.argv.index("--") + 1:]
if os.environ.get("MCP_BENCH_TRANSPORT", "pipe") == "socketpair":
    # What a Node client gives the server it starts (libuv's stdio
    # "pipe" is a socket pair per stream).
    a_in, b_in = socket.socketpair()
    a_out, b_out = socket.socketpair()
    p = subprocess.Popen(cmd, stdin=b_in.fileno(), stdout=b_out.fileno())
    b_in.close()
    b_out.close()
    a_out.shutdown(socket.SHUT_WR)
    a_in.shutdown(socket.SHUT_RD)
    write, close = a_in.sendall, a_in.close
    out = a_out.makefile("rb", buffering=0)
else:
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    write, close, out = p.stdin.write, p.stdin.close, p.stdout
next_id = [0]


def send(method, params, notify=False):
    m = {"jsonrpc": "2.0", "method": method, "params": params}
    if not notify:
        next_id[0] += 1
        m["id"] = next_id[0]
    write((json.dumps(m) + "\n").encode())
    return m.get("id")


buf = b""


def recv():
    global buf
    while b"\n" not in buf:
        chunk = out.read(65536)
        if not chunk:
            raise SystemExit("the server closed")
        buf += chunk
    line, buf = buf.split(b"\n", 1)
    return json.loads(line)


def answer(i):
    while True:
        m = recv()
        if m.get("id") == i:
            if "error" in m:
                raise SystemExit(f"error: {m}")
            return m


i = send("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                        "clientInfo": {"name": "bench", "version": "1"}})
answer(i)
send("notifications/initialized", {}, notify=True)
call = {"name": "echo", "arguments": {"message": "bench"}}
for _ in range(20):  # warm up
    answer(send("tools/call", call))
lat = []
for _ in range(count):
    t = time.perf_counter()
    answer(send("tools/call", call))
    lat.append((time.perf_counter() - t) * 1000)
lat.sort()
t = time.perf_counter()
pending = set()
sent = done = 0
while done < count:
    while sent < count and len(pending) < window:
        pending.add(send("tools/call", call))
        sent += 1
    m = recv()
    if m.get("id") in pending:
        pending.discard(m["id"])
        done += 1
rate = count / (time.perf_counter() - t)
close()
p.wait(10)
print(json.dumps({
    "mode": mode,
    "p50_ms": lat[len(lat) // 2],
    "p99_ms": lat[min(len(lat) - 1, int(len(lat) * 0.99))],
    "calls_per_s": rate,
}), flush=True)
