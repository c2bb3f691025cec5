"""Wait for a server to be ready, send one /generate request and print the answer (`make demo`).

Standard library only, so it runs in the slimmest environment that has the service.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request


def wait_ready(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
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
    args = p.parse_args(argv)
    try:
        wait_ready(args.url, args.timeout_s)
        out = generate(args.url, args.text, args.max_new_tokens)
    except (OSError, TimeoutError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"$ curl -s {args.url}/generate -H 'Content-Type: application/json' \\")
    print(f'    -d \'{{"inputs": "{args.text}", "parameters": {{"max_new_tokens": {args.max_new_tokens}}}}}\'')
    print(json.dumps({"generated_text": out["generated_text"], "finish_reason": out["details"]["finish_reason"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
