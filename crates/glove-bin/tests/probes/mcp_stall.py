"""An agent that stops reading, from inside the sandbox: connection A
(a 4 KiB receive buffer) sends pings, each padded with a 4 MiB-frame
array when asked, and never reads; then connection B pings. Prints one
JSON line: whether B was answered (within 5 s) and whether A was closed
by the mediator once it had stalled past the bound."""
import json
import socket
import sys
import time

PATH = "/run/glove/mcp/everything.sock"
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}
count, big = int(sys.argv[1]), sys.argv[2] == "big"
pad = [0] * ((4 << 20) // 2 - 64) if big else []

a = socket.socket(socket.AF_UNIX)
a.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
a.connect(PATH)
a.setblocking(False)
sent = 0
params = {"_meta": META}
if big:
    params["pad"] = pad
body = json.dumps(params)
for i in range(count):
    data = ('{"jsonrpc":"2.0","id":%d,"method":"ping","params":%s}\n' % (i, body)).encode()
    end = time.time() + 5
    while data and time.time() < end:
        try:
            n = a.send(data)
            data = data[n:]
        except BlockingIOError:
            time.sleep(0.01)
    if data:
        break
    sent += 1

b = socket.socket(socket.AF_UNIX)
b.connect(PATH)
b.settimeout(5)
b.sendall((json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"_meta": META}}) + "\n").encode())
try:
    answered = b'"result"' in b.recv(4096)
except OSError:
    answered = False

# Still not reading past the mediator's write-stall bound (10 s), A is
# cut off: reading what had been sent then ends at EOF.
if not big:
    time.sleep(12)
a.setblocking(True)
a.settimeout(30)
closed = False
try:
    while True:
        chunk = a.recv(1 << 16)
        if not chunk:
            closed = True
            break
except ConnectionResetError:
    # Closed with A's unread requests still queued: a reset.
    closed = True
except OSError:
    pass
print(json.dumps({"sent": sent, "other_answered": answered, "stalled_closed": closed}), flush=True)
