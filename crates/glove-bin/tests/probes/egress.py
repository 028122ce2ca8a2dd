"""Egress probes run inside `glove exec --egress`: each case tries one way
out and prints one JSON line with what happened. The test decides."""

import json
import os
import socket
import sys
import time
import urllib.request

PROXY = ("127.0.0.1", 3128)


def out(case, **kw):
    kw["case"] = case
    print(json.dumps(kw), flush=True)


def head_of(sock, limit=65536):
    data = b""
    while b"\r\n\r\n" not in data and len(data) < limit:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def status_and_refusal(data):
    text = data.decode("latin-1")
    lines = text.split("\r\n")
    status = lines[0].split(" ")[1] if lines and len(lines[0].split(" ")) > 1 else ""
    refusal = ""
    for line in lines[1:]:
        if line.lower().startswith("x-glove-refusal:"):
            refusal = line.split(":", 1)[1].strip()
    return status, refusal


def raw(case, request, timeout=15):
    """Sends `request` to the proxy and reads the response head."""
    try:
        s = socket.create_connection(PROXY, timeout=timeout)
        s.sendall(request)
        data = head_of(s)
        body = b""
        if b"\r\n\r\n" in data:
            body = data.split(b"\r\n\r\n", 1)[1]
        status, refusal = status_and_refusal(data)
        out(case, status=status, refusal=refusal, body=body.decode("latin-1")[:200])
    except OSError as e:
        out(case, error=type(e).__name__, errno=e.errno)


def get_via_env(case, url, headers=None):
    """urllib honours HTTP_PROXY / NO_PROXY from the environment."""
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=15) as r:
            out(case, status=str(r.status), refusal="", body=r.read().decode()[:200])
    except urllib.error.HTTPError as e:
        out(case, status=str(e.code), refusal=e.headers.get("x-glove-refusal", ""))
    except OSError as e:
        out(case, error=type(e).__name__, errno=getattr(e, "errno", None), text=str(e)[:200])


def direct(case, host, port):
    try:
        fam = socket.AF_INET6 if ":" in host else socket.AF_INET
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.settimeout(5)
        s.connect((host, int(port)))
        out(case, connected=True)
    except OSError as e:
        out(case, connected=False, errno=e.errno, error=type(e).__name__)


def main():
    args = sys.argv[1:]
    while args:
        case = args.pop(0)
        if case == "get":  # URL through the environment's proxy settings
            get_via_env(case, args.pop(0))
        elif case == "get_header":  # URL NAME VALUE
            url, name, value = args.pop(0), args.pop(0), args.pop(0)
            get_via_env(case, url, {name: os.path.expandvars(value)})
        elif case == "connect":  # HOST:PORT, a CONNECT tunnel; sends a GET inside
            target = args.pop(0)
            try:
                s = socket.create_connection(PROXY, timeout=15)
                s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
                data = head_of(s)
                status, refusal = status_and_refusal(data)
                body = ""
                if status == "200":
                    s.sendall(f"GET /tunnel HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n".encode())
                    inner = b""
                    while True:
                        c = s.recv(4096)
                        if not c:
                            break
                        inner += c
                    body = inner.decode("latin-1")[-200:]
                out(case, status=status, refusal=refusal, body=body)
            except OSError as e:
                out(case, error=type(e).__name__, errno=e.errno)
        elif case == "tls":  # HOST:PORT through CONNECT, TLS trusting $NODE_EXTRA_CA_CERTS only, $TLS_API_KEY
            import ssl
            target = args.pop(0)
            host = target.rsplit(":", 1)[0]
            try:
                s = socket.create_connection(PROXY, timeout=15)
                s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
                status, _ = status_and_refusal(head_of(s))
                ctx = ssl.create_default_context(cafile=os.environ["NODE_EXTRA_CA_CERTS"])
                t = ctx.wrap_socket(s, server_hostname=host)
                t.sendall(f"GET /tls HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {os.environ.get('TLS_API_KEY', '')}\r\nConnection: close\r\n\r\n".encode())
                inner_status, refusal = status_and_refusal(head_of(t))
                out(case, connect=status, verified=True, status=inner_status, refusal=refusal)
            except ssl.SSLError as e:
                out(case, verified=False, error=str(e)[:200])
            except OSError as e:
                out(case, error=type(e).__name__, errno=e.errno)
        elif case == "absolute":  # a raw absolute-URI request: URL
            url = args.pop(0)
            host = url.split("/")[2]
            raw(case, f"GET {url} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        elif case == "origin_form":
            raw(case, b"GET / HTTP/1.1\r\nHost: 127.0.0.1:3128\r\nConnection: close\r\n\r\n")
        elif case == "big_header":
            raw(case, b"GET http://model.test:%s/ HTTP/1.1\r\nHost: x\r\nX-Big: " % args.pop(0).encode()
                + b"a" * (200 * 1024) + b"\r\n\r\n")
        elif case == "slowloris":
            try:
                s = socket.create_connection(PROXY, timeout=60)
                s.sendall(b"GET http://model.test/ HTTP/1.1\r\nHost: model.test\r\n")
                start = time.monotonic()
                data = s.recv(4096)
                out(case, closed=True, got=data.decode("latin-1")[:40], waited=round(time.monotonic() - start))
            except OSError as e:
                out(case, closed=False, error=type(e).__name__)
        elif case == "direct":  # HOST PORT without any proxy
            direct(case, args.pop(0), args.pop(0))
        elif case == "dns":  # NAME through the system resolver
            name = args.pop(0)
            try:
                socket.getaddrinfo(name, 80)
                out(case, resolved=True)
            except OSError as e:
                out(case, resolved=False, error=type(e).__name__)
        elif case == "udp":
            try:
                socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                out(case, created=True)
            except OSError as e:
                out(case, created=False, errno=e.errno)
        elif case == "env_has":  # VALUE: is it anywhere in the environment?
            v = args.pop(0)
            out(case, found=any(v in x for x in os.environ.values()))
        elif case == "env":  # NAME
            out(case, value=os.environ.get(args.pop(0)))
        elif case == "unset_proxy_get":  # URL with no proxy at all
            url = args.pop(0)
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            try:
                with opener.open(url, timeout=15) as r:
                    out(case, status=str(r.status), body=r.read().decode()[:200])
            except urllib.error.HTTPError as e:
                out(case, status=str(e.code))
            except OSError as e:
                out(case, error=type(e).__name__, text=str(e)[:200])
        else:
            out(case, error="unknown case")


main()
