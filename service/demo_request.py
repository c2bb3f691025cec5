"""Wait for a server to be ready, send one /generate request and print the answer (`make demo`).

Given the server's process id, it stops waiting as soon as that process has exited (a port
already taken, a bad bundle) instead of polling a port that some other program may answer.
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


def wait_ready(url: str, timeout_s: float, server_pid: int | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        if server_pid is not None and process_exited(server_pid):
            raise ServerExited(f"the server (pid {server_pid}) exited before {url} was ready")
        try:
            with urllib.request.urlopen(f"{url}/ready", timeout=2) as r:
                if r.status == 200:
                    return
        except urllib.error.HTTPError as e:
            last = f"/ready answered {e.code}"
        except OSError as e:
            last = str(e)
        time.sleep(0.25)
    raise TimeoutError(f"{url} not ready after {timeout_s:.0f}s ({last})")


def generate(url: str, text: str, max_new_tokens: int) -> dict:
    body = json.dumps({"inputs": text, "parameters": {"max_new_tokens": max_new_tokens, "details": True}}).encode()
    req = urllib.request.Request(f"{url}/generate", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Send one generation request to a running attnserve server.")
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--text", default="attention")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--timeout-s", type=float, default=120)
    p.add_argument("--server-pid", type=int, help="stop waiting as soon as this process (the server) has exited")
    args = p.parse_args(argv)
    try:
        wait_ready(args.url, args.timeout_s, args.server_pid)
        out = generate(args.url, args.text, args.max_new_tokens)
    except ServerExited as e:
        where = urllib.parse.urlsplit(args.url)
        host, port = where.hostname or "127.0.0.1", where.port or 80
        if port_in_use(host, port):
            print(
                f"error: port {port} is already in use by another program, so the server could not listen on it; "
                f"choose another port, e.g. make demo DEMO_PORT={port + 1}",
                file=sys.stderr,
            )
        else:
            print(f"error: {e}; its own message is above", file=sys.stderr)
        return 1
    except (OSError, TimeoutError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"$ curl -s {args.url}/generate -H 'Content-Type: application/json' \\")
    print(f'    -d \'{{"inputs": "{args.text}", "parameters": {{"max_new_tokens": {args.max_new_tokens}}}}}\'')
    print(json.dumps({"generated_text": out["generated_text"], "finish_reason": out["details"]["finish_reason"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
