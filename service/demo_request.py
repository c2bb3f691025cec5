"""Wait for a server to be ready, send one /generate request and print it and its answer (`make demo`).

Given the server's process id, it makes sure the answer comes from that process: it fails at
once when another program (another attnserve included) already listens on the port, stops
waiting as soon as that process has exited (a port already taken, a bad bundle), and, where
/proc shows sockets, checks that the socket that answered /ready is that process's.
Standard library only, so it runs in the slimmest environment that has the service.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request


class ServerExited(RuntimeError):
    """The server process ended before it was ready."""


def process_exited(pid: int) -> bool:
    """True once `pid` has ended; a zombie counts (the shell that started it reaps it only later)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True
    except OSError:  # no /proc: whether the id still exists is the best this can tell
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
        return False


def port_in_use(host: str, port: int) -> bool:
    """Whether another program holds `host:port` (bound as uvicorn binds, with SO_REUSEADDR)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def listening_inodes(port: int) -> set[str] | None:
    """Inodes of the TCP sockets listening on `port` (any address), from /proc/net; None where there is no /proc."""
    found: set[str] = set()
    seen = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.readlines()[1:]
        except OSError:
            continue
        seen = True
        for row in rows:
            fields = row.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and int(local.rpartition(":")[2], 16) == port:  # 0A: LISTEN
                found.add(inode)
    return found if seen else None


def listens_on(pid: int, port: int) -> bool | None:
    """Whether process `pid` holds a socket listening on `port`; None when this cannot be told (no /proc)."""
    inodes = listening_inodes(port)
    if inodes is None:
        return None
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:[") and link[8:-1] in inodes:
            return True
    return False


class PortTaken(RuntimeError):
    """Another program listens on the port the server was started on."""


def check_port(host: str, port: int, server_pid: int | None) -> None:
    """Raise PortTaken when a program other than `server_pid` listens on host:port."""
    if port_in_use(host, port) and not (server_pid is not None and listens_on(server_pid, port)):
        raise PortTaken("")


def wait_ready(url: str, timeout_s: float, server_pid: int | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        if server_pid is not None and process_exited(server_pid):
            raise ServerExited(f"the server (pid {server_pid}) exited before {url} was ready")
        try:
            with urllib.request.urlopen(f"{url}/ready", timeout=2) as r:
                ready = r.status == 200
            if ready and server_pid is not None and listens_on(server_pid, urllib.parse.urlsplit(url).port or 80) is False:
                raise PortTaken(f"{url}/ready was answered by another program, not the server this demo started")
            if ready:
                return
        except urllib.error.HTTPError as e:
            last = f"/ready answered {e.code}"
        except OSError as e:
            last = str(e)
        time.sleep(0.25)
    raise TimeoutError(f"{url} not ready after {timeout_s:.0f}s ({last})")


def request_body(text: str, max_new_tokens: int) -> dict:
    return {"inputs": text, "parameters": {"max_new_tokens": max_new_tokens}}


def generate(url: str, body: dict) -> dict:
    req = urllib.request.Request(f"{url}/generate", json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def curl_command(url: str, body: dict) -> str:
    """The curl command that sends `body` to /generate, as a user would paste it."""
    return f"curl -s {url}/generate -H 'Content-Type: application/json' -d '{json.dumps(body)}'"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Send one generation request to a running attnserve server.")
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--text", default="attention")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--timeout-s", type=float, default=120)
    p.add_argument("--server-pid", type=int, help="stop waiting as soon as this process (the server) has exited")
    args = p.parse_args(argv)
    where = urllib.parse.urlsplit(args.url)
    host, port = where.hostname or "127.0.0.1", where.port or 80
    taken = (
        f"error: port {port} is already in use by another program, so the server could not listen on it; "
        f"choose another port, e.g. make demo DEMO_PORT={port + 1}"
    )
    body = request_body(args.text, args.max_new_tokens)
    try:
        if args.server_pid is not None:
            check_port(host, port, args.server_pid)  # before any answer: another attnserve would answer /ready too
        wait_ready(args.url, args.timeout_s, args.server_pid)
        out = generate(args.url, body)
    except PortTaken as e:
        print(f"{taken} ({e})" if str(e) else taken, file=sys.stderr)
        return 1
    except ServerExited as e:
        if port_in_use(host, port):
            print(taken, file=sys.stderr)
        else:
            print(f"error: {e}; its own message is above", file=sys.stderr)
        return 1
    except (OSError, TimeoutError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"$ {curl_command(args.url, body)}")
    print(json.dumps(out, separators=(",", ":"), ensure_ascii=False))  # what that command prints, byte for byte
    return 0


if __name__ == "__main__":
    sys.exit(main())
