#!/usr/bin/env python3
"""A scripted model endpoint for harness tests (stdlib only).

    stub.py --port PORT --log FILE [--isolate] [--timeout S] [-- COMMAND ...]

Listens on 127.0.0.1:PORT (0 picks one) and prints the port it listens on
as its first line of stdout. It speaks three wire formats, streamed as
server-sent events when the request asks for `"stream": true` and as one
JSON body otherwise:

  POST .../responses         OpenAI Responses API         (codex)
  POST .../messages          Anthropic Messages API       (claude-code)
  POST .../chat/completions  OpenAI Chat Completions API  (opencode, pi, copilot)

Every conversation is scripted the same way, and the step is chosen from
the request itself (never from a counter, so a retried request gets the
same answer):

  * no tool result in the conversation and a shell tool offered: a call of
    that tool running `echo glove-turn > turn.txt && read l < turn.txt && echo \"read:$l:$PWD\"` (its arguments shaped
    after the tool's own JSON schema);
  * a tool result present, or no shell tool offered (title generation and
    other side requests): the text `done`.

With --mcp-tool NAME, a tool whose name is NAME or ends with `_NAME` (an
MCP tool as the harness names it, e.g. `mcp__everything__echo`) is called
instead of the shell when it is offered, with `message` (and any other
required string) set to `glove-mcp-turn`; with --then-shell as well, the
shell call follows the MCP tool's result (the text comes after both).
--shell-command CMD replaces the shell command.

GET .../models answers one model `glove-stub`, in a shape both the OpenAI
and the Anthropic clients accept. A CONNECT (a client using the stub as
its proxy) and anything else is answered with an error. Every request is
appended to the log file as one JSON line: its arrival (`time`, and
`monotonic_ns` on CLOCK_MONOTONIC, the clock of GLOVE_LAUNCH_TRACE), method,
path, headers (the API key among them) and body (parsed JSON when it is JSON).

With `-- COMMAND ...` the stub runs COMMAND once it listens, waits for it
(at most --timeout seconds, then kills its process group), and exits with
its status. With --isolate it first moves itself into a new network
namespace (and, when it is not root, a user namespace mapping its own ids)
holding only a loopback interface, so neither the stub nor COMMAND can
reach any address but 127.0.0.1 — no DNS, no telemetry, no update check
leaves the machine. Both share that namespace, so COMMAND reaches the stub.
"""

import argparse
import ctypes
import errno
import fcntl
import gzip
import http.server
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import zlib

MAX_BODY = 32 << 20  # bytes; larger requests are refused
SOCKET_TIMEOUT = 60  # seconds without progress on one connection
COMMAND = "echo glove-turn > turn.txt && read l < turn.txt && echo \"read:$l:$PWD\""
FINAL_TEXT = "done"
MODEL = "glove-stub"

# Tool names a harness gives its shell, most specific first.
SHELL_TOOLS = (
    "shell",
    "exec_command",
    "shell_command",
    "local_shell",
    "Bash",
    "bash",
    "run_shell_command",
    "run_in_terminal",
)

LOG_LOCK = threading.Lock()
LOG_PATH = None
MCP_TOOL = None
THEN_SHELL = False
MCP_TEXT = "glove-mcp-turn"


def record(entry):
    line = json.dumps(entry, sort_keys=True) + "\n"
    with LOG_LOCK:
        with open(LOG_PATH, "a", encoding="utf-8") as f:
            f.write(line)


# --- isolation ---------------------------------------------------------------

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1


def isolate():
    """Enters a new network namespace with only `lo`, and brings `lo` up."""
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(CLONE_NEWNET) != 0:
        if ctypes.get_errno() != errno.EPERM:
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET)")
        if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUSER|CLONE_NEWNET)")
        with open("/proc/self/setgroups", "w") as f:
            f.write("deny")
        with open("/proc/self/uid_map", "w") as f:
            f.write(f"{uid} {uid} 1")
        with open("/proc/self/gid_map", "w") as f:
            f.write(f"{gid} {gid} 1")
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        ifr = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s, SIOCGIFFLAGS, ifr))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))
    finally:
        s.close()


# --- the script --------------------------------------------------------------


def tool_list(body, fmt):
    """(name, JSON schema of the arguments or None) for each tool offered."""
    out = []
    for t in body.get("tools") or []:
        if not isinstance(t, dict):
            continue
        if fmt == "chat":
            fn = t.get("function") or {}
            out.append((fn.get("name"), fn.get("parameters"), t.get("type")))
        elif fmt == "anthropic":
            out.append((t.get("name"), t.get("input_schema"), t.get("type")))
        elif t.get("type") == "namespace":
            # Codex groups an MCP server's tools in a namespace; a call
            # names the tool and its namespace.
            for inner in t.get("tools") or []:
                if isinstance(inner, dict) and inner.get("name"):
                    full = f"{t.get('name')}__{inner['name']}"
                    out.append((full, inner.get("parameters"), "namespace:" + str(t.get("name"))))
        else:
            out.append((t.get("name") or t.get("type"), t.get("parameters"), t.get("type")))
    return out


def shell_tool(body, fmt):
    tools = {name: (schema, kind) for name, schema, kind in tool_list(body, fmt) if name}
    for name in SHELL_TOOLS:
        if name in tools:
            return name, tools[name][0] or {}, tools[name][1]
    return None


def fill(schema, name, required):
    """A value for one argument `name` of the shell tool."""
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if name in ("command", "cmd", "script"):
        if kind == "array":
            return ["bash", "-lc", COMMAND]
        return COMMAND
    if not required:
        return None
    if "enum" in schema and schema["enum"]:
        return schema["enum"][0]
    if "default" in schema:
        return schema["default"]
    if kind == "string":
        return "write turn.txt"
    if kind in ("integer", "number"):
        return 60000 if "timeout" in name.lower() else 1
    if kind == "boolean":
        return False
    if kind == "array":
        return []
    if kind == "object":
        return {}
    return None


def shell_arguments(schema):
    props = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    args = {}
    for name, sub in props.items():
        v = fill(sub if isinstance(sub, dict) else {}, name, name in required)
        if v is not None:
            args[name] = v
    if not props:
        args["command"] = COMMAND
    return args


def tool_results(body, fmt):
    """How many tool results the conversation holds."""
    if fmt == "chat":
        return sum(
            1 for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "tool"
        )
    if fmt == "anthropic":
        n = 0
        for m in body.get("messages") or []:
            content = m.get("content") if isinstance(m, dict) else None
            if isinstance(content, list):
                n += sum(
                    1 for c in content if isinstance(c, dict) and c.get("type") == "tool_result"
                )
        return n
    items = body.get("input")
    if not isinstance(items, list):
        return 0
    return sum(
        1 for i in items if isinstance(i, dict) and str(i.get("type", "")).endswith("_call_output")
    )


def has_tool_result(body, fmt):
    return tool_results(body, fmt) > 0


def mcp_tool(body, fmt):
    if not MCP_TOOL:
        return None
    for name, schema, kind in tool_list(body, fmt):
        if name and (name == MCP_TOOL or name.endswith("_" + MCP_TOOL)):
            schema = schema or {}
            props = schema.get("properties") or {}
            required = set(schema.get("required") or [])
            args = {k: MCP_TEXT for k, v in props.items()
                    if k == "message" or (k in required and isinstance(v, dict) and v.get("type") == "string")}
            return ("tool", name, args, kind)
    return None


def plan(body, fmt):
    """("tool", name, arguments, kind) or ("text", FINAL_TEXT)."""
    n = tool_results(body, fmt)
    mcp = mcp_tool(body, fmt)
    if n == 0 and mcp is not None:
        return mcp
    # With --then-shell, the MCP tool's result is followed by the shell call.
    if n > (1 if (mcp is not None and THEN_SHELL) else 0):
        return ("text", FINAL_TEXT)
    tool = shell_tool(body, fmt)
    if tool is None:
        return ("text", FINAL_TEXT)
    name, schema, kind = tool
    if kind == "local_shell":
        return ("tool", name, {"command": ["bash", "-lc", COMMAND]}, kind)
    return ("tool", name, shell_arguments(schema), kind)


def ident(prefix, body):
    """An id stable for a given request body (so retries look alike)."""
    h = zlib.crc32(json.dumps(body, sort_keys=True).encode()) & 0xFFFFFFFF
    return f"{prefix}_{h:08x}"


# --- wire formats ------------------------------------------------------------


def responses_events(body, step):
    """(final response object, [events]) of the OpenAI Responses API."""
    rid = ident("resp", body)
    model = body.get("model") or MODEL
    usage = {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 15,
    }
    base = {
        "id": rid,
        "object": "response",
        "created_at": int(time.time()),
        "model": model,
        "status": "in_progress",
        "output": [],
        "usage": None,
    }
    ev = [{"type": "response.created", "response": dict(base)}]
    ev.append({"type": "response.in_progress", "response": dict(base)})
    if step[0] == "tool":
        _, name, args, kind = step
        call_id = ident("call", body)
        if kind == "local_shell":
            item = {
                "type": "local_shell_call",
                "id": ident("lsh", body),
                "call_id": call_id,
                "status": "completed",
                "action": {"type": "exec", "command": args["command"], "env": {}},
            }
            ev.append({"type": "response.output_item.added", "output_index": 0, "item": item})
        else:
            arguments = json.dumps(args)
            item = {
                "type": "function_call",
                "id": ident("fc", body),
                "call_id": call_id,
                "name": name,
                "arguments": "",
                "status": "in_progress",
            }
            if isinstance(kind, str) and kind.startswith("namespace:"):
                ns = kind[len("namespace:"):]
                item["namespace"] = ns
                item["name"] = name[len(ns) + 2:]
            ev.append({"type": "response.output_item.added", "output_index": 0, "item": item})
            ev.append(
                {
                    "type": "response.function_call_arguments.delta",
                    "item_id": item["id"],
                    "output_index": 0,
                    "delta": arguments,
                }
            )
            ev.append(
                {
                    "type": "response.function_call_arguments.done",
                    "item_id": item["id"],
                    "output_index": 0,
                    "arguments": arguments,
                }
            )
            item = dict(item, arguments=arguments, status="completed")
    else:
        text = step[1]
        mid = ident("msg", body)
        part = {"type": "output_text", "text": "", "annotations": []}
        item = {"type": "message", "id": mid, "role": "assistant", "status": "in_progress", "content": []}
        ev.append({"type": "response.output_item.added", "output_index": 0, "item": item})
        ev.append(
            {
                "type": "response.content_part.added",
                "item_id": mid,
                "output_index": 0,
                "content_index": 0,
                "part": part,
            }
        )
        ev.append(
            {
                "type": "response.output_text.delta",
                "item_id": mid,
                "output_index": 0,
                "content_index": 0,
                "delta": text,
            }
        )
        ev.append(
            {
                "type": "response.output_text.done",
                "item_id": mid,
                "output_index": 0,
                "content_index": 0,
                "text": text,
            }
        )
        part = dict(part, text=text)
        ev.append(
            {
                "type": "response.content_part.done",
                "item_id": mid,
                "output_index": 0,
                "content_index": 0,
                "part": part,
            }
        )
        item = dict(item, status="completed", content=[part])
    ev.append({"type": "response.output_item.done", "output_index": 0, "item": item})
    final = dict(base, status="completed", output=[item], usage=usage)
    ev.append({"type": "response.completed", "response": final})
    for i, e in enumerate(ev):
        e["sequence_number"] = i
    return final, ev


def anthropic_events(body, step):
    mid = ident("msg", body)
    model = body.get("model") or MODEL
    if step[0] == "tool":
        _, name, args, _ = step
        block = {"type": "tool_use", "id": ident("toolu", body), "name": name, "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(args)}
        full = dict(block, input=args)
        stop = "tool_use"
    else:
        block = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": step[1]}
        full = {"type": "text", "text": step[1]}
        stop = "end_turn"
    message = {
        "id": mid,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {
            "input_tokens": 10,
            "output_tokens": 1,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }
    ev = [
        {"type": "message_start", "message": message},
        {"type": "content_block_start", "index": 0, "content_block": block},
        {"type": "ping"},
        {"type": "content_block_delta", "index": 0, "delta": delta},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": 5},
        },
        {"type": "message_stop"},
    ]
    final = dict(message, content=[full], stop_reason=stop)
    final["usage"] = dict(message["usage"], output_tokens=5)
    return final, ev


def chat_events(body, step):
    cid = ident("chatcmpl", body)
    model = body.get("model") or MODEL
    created = int(time.time())

    def chunk(delta, finish=None):
        return {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }

    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    if step[0] == "tool":
        _, name, args, _ = step
        call_id = ident("call", body)
        arguments = json.dumps(args)
        ev = [
            chunk(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": call_id,
                            "type": "function",
                            "function": {"name": name, "arguments": ""},
                        }
                    ],
                }
            ),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments}}]}),
            chunk({}, "tool_calls"),
        ]
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            ],
        }
        finish = "tool_calls"
    else:
        ev = [
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": step[1]}),
            chunk({}, "stop"),
        ]
        message = {"role": "assistant", "content": step[1]}
        finish = "stop"
    if (body.get("stream_options") or {}).get("include_usage"):
        ev.append(dict(chunk({}), choices=[], usage=usage))
    final = {
        "id": cid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": usage,
    }
    return final, ev


MODELS = {
    "object": "list",
    "data": [
        {
            "id": MODEL,
            "object": "model",
            "type": "model",
            "created": 0,
            "created_at": "2025-01-01T00:00:00Z",
            "owned_by": "glove",
            "display_name": "Glove stub",
        }
    ],
    "has_more": False,
    "first_id": MODEL,
    "last_id": MODEL,
    "models": [],
}


# --- HTTP --------------------------------------------------------------------


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = SOCKET_TIMEOUT
    server_version = "glove-model-stub"

    def log_message(self, fmt, *args):  # quiet; the JSON log has it all
        pass

    def read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                if len(data) + size > MAX_BODY:
                    raise ValueError("body too large")
                data += self.rfile.read(size)
                self.rfile.readline()
        else:
            n = int(self.headers.get("Content-Length") or 0)
            if n > MAX_BODY:
                raise ValueError("body too large")
            data = self.rfile.read(n) if n else b""
        enc = self.headers.get("Content-Encoding", "").lower()
        if enc == "gzip":
            data = gzip.decompress(data)
        elif enc == "deflate":
            data = zlib.decompress(data)
        elif enc and enc != "identity":
            raise ValueError(f"unsupported Content-Encoding {enc}")
        if len(data) > MAX_BODY:
            raise ValueError("body too large")
        return data

    def entry(self, raw):
        e = {
            "time": time.time(),
            "monotonic_ns": time.monotonic_ns(),
            "method": self.command,
            "path": self.path,
            "headers": [[k, v] for k, v in self.headers.items()],
        }
        if raw:
            try:
                e["body"] = json.loads(raw)
            except ValueError:
                e["body_text"] = raw.decode("utf-8", "replace")[:65536]
        return e

    def send_json(self, code, obj, close=False):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(data)

    def send_sse(self, events, named):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def write(text):
            data = text.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        for e in events:
            head = f"event: {e['type']}\n" if named else ""
            write(f"{head}data: {json.dumps(e)}\n\n")
        if not named:
            write("data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def handle_any(self):
        try:
            raw = self.read_body()
        except (ValueError, OSError, EOFError, zlib.error) as err:
            record({"time": time.time(), "method": self.command, "path": self.path, "error": str(err)})
            self.send_json(400, {"error": {"message": str(err)}}, close=True)
            return
        e = self.entry(raw)
        body = e.get("body") if isinstance(e.get("body"), dict) else {}
        path = self.path.split("?")[0].rstrip("/")
        fmt = None
        if self.command == "POST":
            if path.endswith("/responses"):
                fmt = "responses"
            elif path.endswith("/messages"):
                fmt = "anthropic"
            elif path.endswith("/chat/completions"):
                fmt = "chat"
        if fmt:
            step = plan(body, fmt)
            e["answer"] = list(step[:3])
            record(e)
            final, events = {
                "responses": responses_events,
                "anthropic": anthropic_events,
                "chat": chat_events,
            }[fmt](body, step)
            if body.get("stream"):
                self.send_sse(events, named=fmt != "chat")
            else:
                self.send_json(200, final)
            return
        record(e)
        if self.command == "HEAD":
            # A reachability probe (claude-code sends `HEAD /`).
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.command == "GET" and re.search(r"/models$", path):
            self.send_json(200, MODELS)
        elif self.command == "CONNECT":
            self.send_json(403, {"error": {"message": "the model stub is no proxy"}}, close=True)
        else:
            self.send_json(404, {"error": {"message": f"no {self.command} {path} here"}})

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = handle_any
    do_CONNECT = handle_any


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A client going away mid-request is no news; the log has the rest.
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


def main():
    global LOG_PATH, MCP_TOOL, THEN_SHELL, COMMAND
    p = argparse.ArgumentParser()
    p.add_argument("--mcp-tool", default=None)
    p.add_argument("--then-shell", action="store_true")
    p.add_argument("--shell-command", default=None)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--log", required=True)
    p.add_argument("--isolate", action="store_true")
    p.add_argument("--timeout", type=float, default=300)
    # HTTPS: serve TLS with this certificate chain and key (PEM files).
    p.add_argument("--tls-cert", default=None)
    p.add_argument("--tls-key", default=None)
    p.add_argument("command", nargs="*")
    a = p.parse_args()
    LOG_PATH = a.log
    MCP_TOOL = a.mcp_tool
    THEN_SHELL = a.then_shell
    if a.shell_command:
        COMMAND = a.shell_command
    if a.isolate:
        isolate()
    srv = Server(("127.0.0.1", a.port), Handler)
    if a.tls_cert:
        import ssl
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(a.tls_cert, a.tls_key)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    print(srv.server_address[1], flush=True)
    if not a.command:
        try:
            srv.serve_forever()
        except KeyboardInterrupt:
            pass
        return 0
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    child = subprocess.Popen(a.command, start_new_session=True)
    try:
        code = child.wait(timeout=a.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        print(f"stub: {a.command[0]} timed out after {a.timeout} s", file=sys.stderr)
        return 124
    # The harness's own leftovers (a language server, say) go with it.
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
