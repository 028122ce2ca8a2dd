"""The egress benchmark's client: the same code runs on the host (direct to
the upstream) and inside `glove exec --egress` (through the proxy's CONNECT
tunnel). Prints one JSON line."""

import json
import socket
import sys
import time

mode, host, source_port, ping_port, count, total = sys.argv[1:7]
count, total = int(count), int(total)
PROXY = ("127.0.0.1", 3128)


def connect(port):
    if mode == "direct":
        return socket.create_connection((host, int(port)))
    s = socket.create_connection(PROXY)
    target = f"{host}:{port}"
    s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        c = s.recv(4096)
        if not c:
            raise OSError("proxy closed")
        head += c
    if not head.startswith(b"HTTP/1.1 200"):
        raise OSError(head[:80].decode("latin-1"))
    return s


# Connection setup: connect, one byte each way, close.
times = []
for _ in range(count):
    t = time.perf_counter()
    s = connect(ping_port)
    s.sendall(b"p")
    if s.recv(1) != b"p":
        raise OSError("no echo")
    s.close()
    times.append(time.perf_counter() - t)
times.sort()

# Throughput: the upstream sends `total` bytes.
s = connect(source_port)
buf = bytearray(1 << 20)
view = memoryview(buf)
got = 0
t = time.perf_counter()
while got < total:
    n = s.recv_into(view)
    if n == 0:
        break
    got += n
took = time.perf_counter() - t
s.close()
print(json.dumps({
    "mode": mode,
    "connections": count,
    "p50_ms": times[len(times) // 2] * 1e3,
    "mean_ms": sum(times) / len(times) * 1e3,
    "bytes": got,
    "mib_per_s": got / took / (1 << 20),
}), flush=True)
