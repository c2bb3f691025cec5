"""Locust user for TGI-style `/generate_stream` servers, reporting TTFT, ITL and end-to-end latency.

    locust -f loadtest/locustfile.py --host http://127.0.0.1:8000 --headless -u 16 -r 16 -t 60s

Each user is a closed-loop client (no wait between requests). Besides Locust's
own `POST /generate_stream` entry (whose time, for a streamed answer, ends when
the response headers arrive), every successful request fires three custom
request events of type `stream`: `TTFT` (time to the first token event),
`ITL` (genai-perf's per-request inter-token latency,
(e2e - TTFT) / (output_tokens - 1), first token excluded; only for answers of
2+ tokens) and `e2e` (time to the event carrying `generated_text`). Their
`response_length` is the number of tokens streamed.

Options (after Locust's own): --input-file FILE (one input per line; default
the server's GET /samples, inputs of its model's own task, as attnserve-loadtest sends;
a server without them stops the run, naming --input-file), --max-new-tokens N, --do-sample, --temperature T,
--api-key KEY (or $ATTNSERVE_API_KEY), --endpoint (default /generate_stream).
"""

from __future__ import annotations

import itertools
import sys
import time
from pathlib import Path

import gevent
from locust import HttpUser, constant, events, task

from attnserve.loadtest.inputs import load_inputs
from attnserve.loadtest.samples import NoSamples, server_samples_blocking
from attnserve.loadtest.sse import StreamTally

_inputs: itertools.cycle | None = None


@events.init_command_line_parser.add_listener
def _add_options(parser) -> None:
    parser.add_argument("--input-file", default="", help="inputs, one per line (default: the server's GET /samples)")
    parser.add_argument("--max-new-tokens", type=int, default=0, help="TGI max_new_tokens (0: the server's default)")
    parser.add_argument("--do-sample", action="store_true", default=False, help="sample instead of greedy decoding")
    parser.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (0: the server's default)")
    parser.add_argument(
        "--allow-lexicon", action="store_true", default=False, help="let the lexicon answer (default: lexicon=false)"
    )
    parser.add_argument("--api-key", default="", env_var="ATTNSERVE_API_KEY", help="sent as 'Authorization: Bearer KEY'")
    parser.add_argument("--endpoint", default="/generate_stream", help="streaming route")


@events.test_start.add_listener
def _load_inputs(environment, **_kwargs) -> None:
    global _inputs
    opts = environment.parsed_options
    if opts and opts.input_file:
        inputs, _source = load_inputs(Path(opts.input_file))
    else:
        headers = {"Authorization": f"Bearer {opts.api_key}"} if opts and opts.api_key else {}
        try:
            inputs, _source = server_samples_blocking(environment.host.rstrip("/"), headers)
        except NoSamples as e:
            print(f"error: {e} (here: --input-file FILE)", file=sys.stderr, flush=True)
            environment.process_exit_code = 2
            gevent.spawn_later(0, environment.runner.quit)  # not from inside the start event's own greenlet
            return
    _inputs = itertools.cycle(inputs)


class GenerateStreamUser(HttpUser):
    wait_time = constant(0)

    def on_start(self) -> None:
        opts = self.environment.parsed_options
        params: dict = {"do_sample": bool(opts.do_sample)}
        if not opts.allow_lexicon:
            params["lexicon"] = False  # measure the model path, as attnserve-loadtest does
        if opts.max_new_tokens:
            params["max_new_tokens"] = opts.max_new_tokens
        if opts.temperature:
            params["temperature"] = opts.temperature
        self.params = params
        self.endpoint = opts.endpoint
        self.headers = {"Authorization": f"Bearer {opts.api_key}"} if opts.api_key else {}

    def _fire(self, name: str, seconds: float, tokens: int) -> None:
        self.environment.events.request.fire(
            request_type="stream", name=name, response_time=seconds * 1000, response_length=tokens, exception=None, context={}
        )

    @task
    def generate_stream(self) -> None:
        payload = {"inputs": next(_inputs), "parameters": self.params}
        start = time.perf_counter()
        tally = StreamTally()  # the events' parser (loadtest/sse.py), shared with attnserve-loadtest
        with self.client.post(
            self.endpoint, json=payload, headers=self.headers, stream=True, catch_response=True, name=self.endpoint
        ) as resp:
            if resp.status_code != 200:
                resp.failure(f"HTTP {resp.status_code}: {resp.text[:200]}")
                return
            try:
                for raw in resp.iter_lines():
                    line = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
                    if tally.feed(line, time.perf_counter()):
                        break
            except (OSError, ValueError) as e:  # connection cut, chunk errors, bad JSON
                resp.failure(f"stream broken: {type(e).__name__}: {e}")
                return
            if tally.failed:
                resp.failure(f"error event: {tally.error}")
                return
            if tally.final is None or tally.first is None:
                resp.failure("stream ended before the event carrying generated_text")
                return
            resp.success()
        first, final, tokens = tally.first, tally.final, tally.tokens
        self._fire("TTFT", first - start, tokens)
        self._fire("e2e", final - start, tokens)
        if tokens >= 2:
            self._fire("ITL", (final - first) / (tokens - 1), tokens)
