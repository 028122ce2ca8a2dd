"""The raw contained agent of glove run's tests: runs Glove's relay for a
server and sends it frames as they are (malformed, oversized, batches
included). Usage: mcp_raw.py SERVER CASES_JSON, where CASES_JSON is a list
of [name, frame_text or null, expect_answer]; a null frame sends a 5 MiB
line. Prints one JSON line {name: answer or null}."""
import json
import select
import subprocess
import sys
import time

server, cases = sys.argv[1], json.loads(sys.argv[2])
p = subprocess.Popen(
    ["/run/glove/bin/glove", "mcp-relay", server],
    stdin=subprocess.PIPE,
    stdout=subprocess.PIPE,
)
buf = b""


def answer(timeout):
    global buf
    end = time.time() + timeout
    while b"\n" not in buf:
        left = end - time.time()
        if left <= 0:
            return None
        r, _, _ = select.select([p.stdout], [], [], left)
        if not r:
            return None
        chunk = p.stdout.read1(1 << 16)
        if not chunk:
            return None
        buf += chunk
    line, buf = buf.split(b"\n", 1)
    return json.loads(line)


out = {}
for name, frame, expect in cases:
    data = frame.encode() if frame is not None else b'{"x":"' + b"a" * (5 << 20) + b'"}'
    p.stdin.write(data + b"\n")
    p.stdin.flush()
    out[name] = answer(30 if expect else 1.5)
p.stdin.close()
p.wait(30)
print(json.dumps(out), flush=True)
