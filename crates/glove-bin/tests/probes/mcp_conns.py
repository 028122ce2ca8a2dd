"""Connection bounds of glove run's mediator, from inside the sandbox:
20 connections to one socket (16 are served, the rest wait), one freed
lets a waiting one in, 300 connections opened and closed leave the
mediator serving, and a handoff byte without descriptors is closed.
Prints one JSON line."""
import json
import socket

PATH = "/run/glove/mcp/everything.sock"
PING = (json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping",
                    "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}})
        + "\n").encode()


def conn():
    s = socket.socket(socket.AF_UNIX)
    s.connect(PATH)
    return s


def answered(s, timeout):
    """Whether the answer to the ping already sent on s arrives in time."""
    s.settimeout(timeout)
    got = b""
    try:
        while b"\n" not in got:
            chunk = s.recv(4096)
            if not chunk:
                return False
            got += chunk
        return b'"result"' in got.split(b"\n", 1)[0]
    except (socket.timeout, OSError):
        return False


def ping(s, timeout):
    try:
        s.sendall(PING)
    except OSError:
        return False
    return answered(s, timeout)


out = {}
held = [conn() for _ in range(20)]
out["served"] = sum(ping(s, 10) for s in held[:16])
out["waiting_answered"] = ping(held[16], 1.5)
held[0].close()
# The ping sent while it waited is answered once it is served (a second
# ping with the same id could be answered first, as a duplicate).
out["after_one_closed"] = answered(held[16], 10)
for s in held:
    s.close()
for _ in range(300):
    conn().close()
out["after_churn"] = ping(conn(), 10)
# A relay's handoff byte without the descriptors it must carry: the
# mediator closes the connection without a word.
bad = conn()
bad.settimeout(10)
bad.sendall(b"\x00")
try:
    out["bad_handoff_closed"] = bad.recv(16) == b""
except (socket.timeout, OSError):
    out["bad_handoff_closed"] = False
print(json.dumps(out), flush=True)
