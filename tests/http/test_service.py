"""The service outside its routes: settings, start-up failures, SIGTERM draining in a real process,
the in-process API, bulk generation and the scheduler's bounds."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import service_harness
from service_harness import ROOT, free_port, load_engine, metric, scrape

from attnserve.service.engine.engine import DecodingOptions


def wait_ready(url: str, proc: subprocess.Popen, timeout_s: float = 120) -> None:
    """Until the served subprocess answers /ready with 200; fails at once if it exits."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(url + "/ready", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if proc.poll() is not None:
            pytest.fail(f"attnserve-serve exited {proc.returncode}: {proc.stderr.read()[-2000:]}")
        assert time.monotonic() < deadline, "server did not become ready"
        time.sleep(0.1)


def test_importing_the_service_does_not_import_torch():
    modules = "attnserve.service.http.app, attnserve.service.cli, attnserve.service.client, attnserve.service.engine.scheduler"
    code = f"import sys, {modules}; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "False"


# ---- settings ---------------------------------------------------------------------------------
def test_settings_flag_beats_environment_beats_default(monkeypatch):
    from attnserve.service.cli import parse_settings
    from attnserve.service.settings import Settings

    for name in ("PORT", "MAX_BATCH_SIZE", "API_KEY", "BUNDLE"):
        monkeypatch.delenv(f"ATTNSERVE_{name}", raising=False)
    monkeypatch.chdir(ROOT)  # where models/g2p-en is the default as written
    defaults = parse_settings([])
    assert (defaults.port, defaults.host, defaults.max_batch_size, defaults.bundle) == (
        8000,
        "127.0.0.1",
        32,
        Path("models/g2p-en"),
    )
    assert defaults.api_key is None

    monkeypatch.setenv("ATTNSERVE_PORT", "9001")
    monkeypatch.setenv("ATTNSERVE_MAX_BATCH_SIZE", "4")
    monkeypatch.setenv("ATTNSERVE_BUNDLE", "/models/from-env")
    from_env = parse_settings([])
    assert (from_env.port, from_env.max_batch_size, from_env.bundle) == (9001, 4, Path("/models/from-env"))

    flagged = parse_settings(["/models/from-flag", "--port", "9002"])
    assert (flagged.port, flagged.max_batch_size, flagged.bundle) == (9002, 4, Path("/models/from-flag"))

    monkeypatch.setenv("ATTNSERVE_API_KEY", "")  # empty means off, not "the empty key"
    assert Settings().api_key is None


def test_every_setting_is_a_flag_made_from_its_field():
    """attnserve-serve's flags come from the Settings fields: one `--name-like-this` each (BUNDLE is positional),
    typed and with the field's choices, so a knob is declared once."""
    from attnserve.service.cli import build_parser, generate_parser
    from attnserve.service.settings import Settings

    parser = build_parser()
    flags = {a.dest: a for a in parser._actions if a.option_strings and a.dest not in ("help", "allow_unknown_env")}
    assert set(flags) == set(Settings.model_fields) - {"bundle"}
    # one flag each; a yes/no setting also has its `--no-` form (argparse.BooleanOptionalAction)
    flag = {name: "--" + name.replace("_", "-") for name in flags}
    assert all(a.option_strings in ([flag[n]], [flag[n], "--no-" + flag[n][2:]]) for n, a in flags.items())
    assert flags["max_batch_size"].type is int and flags["request_timeout_s"].type is float
    assert flags["provider"].choices == ("auto", "cpu", "cuda") and flags["lexicon"].metavar == "FILE.tsv"
    assert Settings.model_fields["max_batch_size"].description in flags["max_batch_size"].help
    with pytest.raises(SystemExit) as exit_status:
        parser.parse_args(["--provider", "tpu"])
    assert exit_status.value.code == 2
    generate_flags = {a.dest: a for a in generate_parser()._actions}
    for name in ("bundle", "variant", "provider", "threads", "max_batch_size", "lexicon"):  # attnserve-generate's settings
        assert generate_flags[name].help == flags.get(name, generate_flags["bundle"]).help


def test_threads_default_to_the_cpus_this_process_may_use():
    from attnserve.service.settings import Settings

    threads = Settings().threads
    assert 1 <= threads <= len(os.sched_getaffinity(0))


@pytest.mark.parametrize(
    ("args", "env", "needle"),
    [
        (["/no/such/bundle", "--port", "PORT"], {}, "bundle directory not found: /no/such/bundle"),
        (["BUNDLE"], {"ATTNSERVE_PORT": "eighty"}, "ATTNSERVE_PORT"),
        (["BUNDLE", "--max-batch-size", "0", "--port", "PORT"], {}, "max_batch_size"),
        (["BUNDLE", "--max-new-tokens", "4096", "--port", "PORT"], {}, "max_new_tokens=4096 exceeds"),
    ],
)
def test_a_bad_bundle_or_setting_stops_start_up_with_one_line(tiny_bundle_dir, args, env, needle):
    args = [{"BUNDLE": str(tiny_bundle_dir), "PORT": str(free_port())}.get(a, a) for a in args]
    proc = subprocess.run(
        [sys.executable, "-m", "attnserve.service", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **env},
        timeout=120,
    )
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], proc.stderr


# ---- the default model from any directory -------------------------------------------------------
def _env_without_bundle(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "ATTNSERVE_BUNDLE"}
    return {**env, **extra}


def test_attnserve_serve_finds_the_default_model_from_another_directory(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "attnserve-serve"), "--port", str(port), "--threads", "1"],
        cwd=tmp_path,  # no models/g2p-en here: the source checkout's is served
        env=_env_without_bundle(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_ready(url, proc)
        r = httpx.post(url + "/generate", json={"inputs": "hello"}, timeout=30)
        assert r.status_code == 200 and r.json()["generated_text"], r.text
        assert httpx.get(url + "/info", timeout=10).json()["model_id"] == "g2p-en"
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_a_missing_default_model_names_every_path_tried(tmp_path):
    # A copy of the service package with no model inside it, run from a directory with none either.
    shutil.copytree(ROOT / "service", tmp_path / "src" / "service", ignore=shutil.ignore_patterns("__pycache__"))
    # the namespace as the checkout lays it out: attnserve/service links to the stage's folder
    (tmp_path / "src" / "attnserve").mkdir()
    shutil.copy(ROOT / "attnserve" / "__init__.py", tmp_path / "src" / "attnserve" / "__init__.py")
    (tmp_path / "src" / "attnserve" / "service").symlink_to("../service")
    (tmp_path / "cwd").mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "attnserve.service", "--port", str(free_port())],
        cwd=tmp_path / "cwd",
        env=_env_without_bundle(PYTHONPATH=str(tmp_path / "src")),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "default model bundle not found" in lines[0], proc.stderr
    # under the working directory, then inside the installed package (the wheel's attnserve/models)
    for tried in (tmp_path / "cwd" / "models" / "g2p-en", tmp_path / "src" / "attnserve" / "models" / "g2p-en"):
        assert str(tried) in lines[0]
    assert "ATTNSERVE_BUNDLE" in lines[0]


def test_an_explicit_relative_bundle_is_taken_as_given(tmp_path):
    # Only the default falls back to the source checkout: a bundle named by the operator is read where it says.
    proc = subprocess.run(
        [sys.executable, "-m", "attnserve.service", "--port", str(free_port())],
        cwd=tmp_path,
        env={**os.environ, "ATTNSERVE_BUNDLE": "models/g2p-en"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "bundle directory not found: models/g2p-en" in proc.stderr, proc.stderr


# ---- make demo ----------------------------------------------------------------------------------
def test_make_demo_on_a_taken_port_fails_at_once_naming_the_port():
    venv = Path(sys.executable).parent.parent  # the venv this suite runs in; -o: make must not reinstall it
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        start = time.monotonic()
        proc = subprocess.Popen(
            ["make", "--no-print-directory", "demo", f"DEMO_PORT={port}", f"VENV={venv}"]
            + ["-o", f"{venv}/bin/.installed-serve"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its own process group, so a hung demo's server goes with it
        )
        try:
            out, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        elapsed = time.monotonic() - start
    assert proc.returncode != 0, out
    assert elapsed < 15, f"make demo took {elapsed:.1f}s to fail"
    assert f"port {port} is already in use" in out and "DEMO_PORT=" in out, out


# ---- SIGTERM ----------------------------------------------------------------------------------
def test_sigterm_drains_in_flight_requests_then_exits_zero(tiny_bundle_dir):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, service_harness.__file__, str(tiny_bundle_dir), "--port", str(port), "--step-delay", "0.05"]
        + ["--max-batch-size", "2"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_ready(url, proc)

        body = {"inputs": "supercalifragilistic", "parameters": {"max_new_tokens": 48}}
        with ThreadPoolExecutor(6) as pool:
            futures = [pool.submit(httpx.post, url + "/generate", json=body, timeout=60) for _ in range(6)]
            deadline = time.monotonic() + 30
            while True:  # all six admitted (two running, four queued) before the signal
                m = scrape(url)
                if metric(m, "attnserve_running_sequences") + metric(m, "attnserve_queue_size") == 6:
                    break
                assert time.monotonic() < deadline and not any(f.done() for f in futures), "requests not all in flight"
                time.sleep(0.01)
            proc.send_signal(signal.SIGTERM)

            ready = httpx.get(url + "/ready", timeout=10)
            late = httpx.post(url + "/generate", json=body, timeout=10)
            results = [f.result() for f in futures]

        assert ready.status_code == 503 and ready.json()["error_type"] == "draining"
        assert late.status_code == 503 and late.json()["error_type"] == "draining"
        assert [r.status_code for r in results] == [200] * 6
        assert len({r.json()["generated_text"] for r in results}) == 1
        assert proc.wait(timeout=60) == 0
        assert "draining" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ---- the in-process API and bulk generation ---------------------------------------------------
@pytest.fixture(scope="module", params=["tiny_bundle_dir", "tiny_int8_bundle_dir"], ids=["fp32", "int8"])
def generator(request):
    """The in-process API over the tiny bundle serving fp32, then serving int8."""
    from attnserve.service.client import Generator

    bundle_dir = request.getfixturevalue(request.param)
    with Generator(bundle_dir, engine=load_engine(bundle_dir), max_batch_size=2) as g:
        yield g


def test_the_engine_thread_is_named_in_the_os(generator):
    """So its CPU can be told from the event loop's (top -H, /proc, benchmarks/http_overhead.py)."""
    from attnserve.service.engine.runtime import ENGINE_THREAD_OS_NAME

    generator.generate("cat")
    tasks = Path(f"/proc/{os.getpid()}/task")
    names = [(t / "comm").read_text().strip() for t in tasks.iterdir() if (t / "comm").exists()]
    assert ENGINE_THREAD_OS_NAME in names, names


WORDS = ["attention", "cat", "a", "hello", "phoneme", "transformer", "zebra", "data", "encoder", "supercalifragilistic"]


def test_generator_matches_the_engine_and_streams(generator):
    engine = generator.engine
    expected = engine.generate(WORDS, DecodingOptions(max_new_tokens=engine.max_target_len))
    assert [r.text for r in generator.generate_many(WORDS)] == [r.text for r in expected]
    one = generator.generate("attention")
    assert one.token_ids == expected[0].token_ids and one.finish_reason == expected[0].finish_reason
    assert "".join(t.text for t in generator.stream("attention")) == expected[0].text

    sampled = generator.generate("attention", do_sample=True, seed=5)
    assert generator.generate("attention", do_sample=True, seed=5).token_ids == sampled.token_ids
    assert sampled.seed == 5


def test_a_caller_that_stops_reading_many_answers_leaves_none_in_flight(generator, monkeypatch):
    """generate_many, generate_text_many and score_many share one windowed pipeline: closing it early cancels the
    requests it admitted ahead, so they leave the batch instead of decoding for nobody."""
    from attnserve.service.engine.tickets import Ticket

    cancelled = []
    cancel = Ticket.cancel
    monkeypatch.setattr(Ticket, "cancel", lambda t: (cancelled.append(t), cancel(t)))
    words = WORDS * 8
    pairs = [(w, ["K AE1 T"]) for w in words]
    for many in (generator.generate_many(words), generator.generate_text_many(words), generator.score_many(pairs)):
        cancelled.clear()
        next(many)
        assert generator.scheduler.in_flight > 0  # the window ahead was admitted
        many.close()
        assert cancelled  # the admitted requests were cancelled, not left to decode
        deadline = time.monotonic() + 10
        while generator.scheduler.in_flight and time.monotonic() < deadline:
            time.sleep(0.01)
        assert generator.scheduler.in_flight == 0


def test_a_whole_answer_in_process_decodes_its_text_once_and_a_stream_every_token(generator):
    engine, calls = generator.engine, []
    decode = engine.decode_ids
    engine.decode_ids = lambda ids: calls.append(list(ids)) or decode(ids)  # what the engine thread's steps call
    try:
        one = generator.generate("attention")
        assert calls == [one.token_ids]  # once, at its end
        calls.clear()
        streamed = list(generator.stream("attention"))
        assert len(calls) >= len(one.token_ids) > 1  # every token's text, as it is chosen
        assert "".join(t.text for t in streamed) == one.text
    finally:
        del engine.decode_ids


def test_generator_calls_from_threads_share_the_batch_within_its_bound(generator):
    m = generator.metrics
    before = _batch_hist(m)
    generator.engine.step_delay_s = 0.005
    try:
        with ThreadPoolExecutor(6) as pool:
            texts = list(pool.map(lambda w: generator.generate(w).text, WORDS))
    finally:
        generator.engine.step_delay_s = 0.0
    assert texts == [generator.generate(w).text for w in WORDS]
    after = _batch_hist(m)
    steps = after["count"] - before["count"]
    assert after["le2"] - before["le2"] == steps  # never more rows than max_batch_size=2
    assert steps - (after["le1"] - before["le1"]) > 0  # and some steps ran two rows


def _batch_hist(m) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    out = {"count": 0.0, "le1": 0.0, "le2": 0.0}
    for fam in text_string_to_metric_families(m.exposition().decode()):
        for s in fam.samples:
            if s.name == "attnserve_batch_size_count":
                out["count"] = s.value
            elif s.name == "attnserve_batch_size_bucket" and s.labels["le"] in ("1.0", "2.0"):
                out["le" + s.labels["le"][0]] = s.value
    return out


def test_generator_reports_input_the_model_cannot_read(generator):
    from attnserve.service.engine.engine import InputError

    with pytest.raises(InputError, match="'\u2603'"):
        generator.generate("snow\u2603man")
    results = list(generator.generate_many(["cat", "snow\u2603", "hello"]))
    assert isinstance(results[1], InputError) and results[0].text and results[2].text


def test_attnserve_generate_writes_a_tsv_in_input_order(tmp_path, generator):
    tiny_bundle_dir = generator.engine.bundle.dir
    from attnserve.service.cli import generate_main

    src = tmp_path / "words.txt"
    src.write_text("\n".join(WORDS) + "\n\n")
    out = tmp_path / "lexicon.tsv"
    assert generate_main([str(src), "-o", str(out), "--bundle", str(tiny_bundle_dir), "--threads", "1", "--no-progress"]) == 0
    rows = [line.split("\t") for line in out.read_text().splitlines()]
    assert [r[0] for r in rows] == WORDS
    assert [r[1] for r in rows] == [generator.generate(w).text for w in WORDS]

    src.write_text("cat\n\u2603\n")  # a line with nothing readable
    assert generate_main([str(src), "-o", str(out), "--bundle", str(tiny_bundle_dir), "--no-progress"]) == 1
    assert [line.split("\t")[0] for line in out.read_text().splitlines()] == ["cat"]
    assert generate_main([str(tmp_path / "missing.txt"), "--bundle", str(tiny_bundle_dir)]) == 2


def test_a_cancelled_queued_request_frees_its_slot(tiny_bundle_dir):
    from attnserve.service.engine.scheduler import Failed, Finished, Scheduler
    from attnserve.service.metrics import ServiceMetrics

    engine = load_engine(tiny_bundle_dir, step_delay_s=0.02)
    sched = Scheduler(engine, ServiceMetrics("t"), max_batch_size=1, max_concurrent_requests=2, request_timeout_s=30)
    sched.start()
    try:
        ids = engine.encode_text("supercalifragilistic")
        running = sched.submit(ids, DecodingOptions(max_new_tokens=48))
        queued = sched.submit(ids, DecodingOptions(max_new_tokens=48))
        with pytest.raises(Exception) as refused:
            sched.submit(ids, DecodingOptions(max_new_tokens=48))
        assert refused.value.error_type == "overloaded" and refused.value.retry_after_s >= 1
        queued.cancel()
        deadline = time.monotonic() + 5
        while sched.in_flight > 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sched.in_flight == 1  # the slot came back while the first request still runs
        third = sched.submit(ids, DecodingOptions(max_new_tokens=1))
        for ticket in (running, third):
            events = []
            while not any(isinstance(e, Finished | Failed) for e in events):
                events += ticket.next_events_blocking(timeout=10)
            assert isinstance(events[-1], Finished)
    finally:
        sched.stop()
    assert not sched.alive


def test_a_request_the_engine_refuses_fails_alone_not_with_its_group(tiny_bundle_dir):
    from attnserve.service.engine.scheduler import Failed, Finished, Scheduler
    from attnserve.service.metrics import ServiceMetrics

    engine = load_engine(tiny_bundle_dir, step_delay_s=0.05)
    sched = Scheduler(engine, ServiceMetrics("t"), max_batch_size=4, max_concurrent_requests=8, request_timeout_s=30)
    sched.start()
    try:
        ids = engine.encode_text("attention")
        busy = sched.submit(ids, DecodingOptions(max_new_tokens=3))  # the two below queue behind its step
        good = sched.submit(ids, DecodingOptions(max_new_tokens=3))
        bad = sched.submit(ids, DecodingOptions(max_new_tokens=engine.max_target_len + 1))  # past what the graph can do
        last = {}
        for name, ticket in (("busy", busy), ("good", good), ("bad", bad)):
            events = []
            while not any(isinstance(e, Finished | Failed) for e in events):
                events += ticket.next_events_blocking(timeout=10)
            last[name] = events[-1]
        assert isinstance(last["busy"], Finished) and isinstance(last["good"], Finished)
        assert isinstance(last["bad"], Failed) and last["bad"].error.error_type == "validation"
        assert "max_new_tokens" in last["bad"].error.message
    finally:
        sched.stop()


def test_an_owner_reading_answers_whole_is_woken_once_per_ending_ticket(tiny_bundle_dir):
    """/generate's tickets share one event, set when a ticket ends, not at every token; a stream's own event
    is set at every step that gives it a token."""
    from attnserve.service.engine.scheduler import Finished, Scheduler
    from attnserve.service.metrics import ServiceMetrics

    class CountingEvent(asyncio.Event):
        def __init__(self):
            super().__init__()
            self.sets = 0

        def set(self):
            self.sets += 1
            super().set()

    engine = load_engine(tiny_bundle_dir)
    sched = Scheduler(engine, ServiceMetrics("t"), max_batch_size=8, request_timeout_s=30)
    sched.start()
    options = DecodingOptions(max_new_tokens=6, min_new_tokens=6)  # six tokens each, whatever the model says

    async def run() -> tuple[int, int, list, list]:
        loop = asyncio.get_running_loop()
        ids = engine.encode_text("attention")
        whole = CountingEvent()
        tickets = sched.submit_many([(ids, options), (ids, options)], loop, whole)
        streamed = sched.submit_many([(ids, options)], loop)[0]
        streamed._async_ready = per_step = CountingEvent()
        got: list = []
        while not all(t.done for t in tickets):
            whole.clear()
            await asyncio.wait_for(whole.wait(), 10)
        for t in tickets:
            got.append(t.take_events())
        events = []
        while not any(isinstance(e, Finished) for e in events):
            events += await asyncio.wait_for(streamed.wait_events(), 10)
        return whole.sets, per_step.sets, got, events

    try:
        whole_sets, stream_sets, got, streamed_events = asyncio.run(run())
    finally:
        sched.stop()
    for events in got:  # every token is still there for the answer, read at the end
        assert len(events) == 7 and isinstance(events[-1], Finished)
    assert 1 <= whole_sets <= 2  # once per ending ticket (both may end at one step), not once per token
    assert len(streamed_events) == 7 and stream_sets >= 3  # woken as its tokens come (the first may precede the count)


def test_a_stream_interval_wakes_a_streaming_owner_at_its_first_token_and_at_its_end(tiny_bundle_dir):
    """With an interval longer than the whole answer, the engine wakes a stream's owner twice: for the first
    token (time to first token is not delayed) and when the answer ends; every token is still there, in order."""
    from attnserve.service.engine.scheduler import Finished, Scheduler
    from attnserve.service.metrics import ServiceMetrics

    engine = load_engine(tiny_bundle_dir, step_delay_s=0.005)
    sched = Scheduler(engine, ServiceMetrics("t"), max_batch_size=8, request_timeout_s=30, stream_interval_s=60.0)
    sched.start()
    options = DecodingOptions(max_new_tokens=6, min_new_tokens=6)
    sets = 0

    async def run() -> list[list]:
        nonlocal sets
        ticket = sched.submit_many([(engine.encode_text("attention"), options)], asyncio.get_running_loop())[0]
        ready = ticket._async_ready
        plain_set = ready.set

        def counting_set() -> None:
            nonlocal sets
            sets += 1
            plain_set()

        ready.set = counting_set
        reads = []
        while not reads or not isinstance(reads[-1][-1], Finished):
            reads.append(await asyncio.wait_for(ticket.wait_events(), 10))
        return reads

    try:
        reads = asyncio.run(run())
    finally:
        sched.stop()
    assert sets == 2
    assert len(reads) == 2 and len(reads[0]) == 1  # the first token alone, at once
    tokens = [e.token_id for read in reads for e in read if not isinstance(e, Finished)]
    assert len(tokens) == 6 and len(reads[1]) == 6  # the other five with the end, in one read


def _stream_chunks(url: str, body: dict) -> list[bytes]:
    """POST /generate_stream on a raw socket; the chunks of its chunked body as the server wrote them."""
    import json as json_module

    host, port = url.removeprefix("http://").split(":")
    payload = json_module.dumps(body).encode()
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(
            b"POST /generate_stream HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        stream = sock.makefile("rb")
        while stream.readline() not in (b"\r\n", b""):  # status line and headers
            pass
        chunks = []
        while (size := int(stream.readline().strip(), 16)) > 0:
            chunks.append(stream.read(size))
            stream.read(2)  # the CRLF after each chunk
        return chunks


def test_stream_interval_writes_a_streams_events_together_and_changes_none_of_them(tiny_bundle_dir):
    """The same stream from a server that writes every token (0) and from one with an interval longer than
    the answer: the same events, byte for byte, but the first token alone and the rest in one write."""
    body = {"inputs": "attention", "parameters": {"max_new_tokens": 6, "min_new_tokens": 6, "details": True}}
    written = {}
    for interval in (0.0, 1000.0):
        with service_harness.serving(tiny_bundle_dir, step_delay_s=0.02, stream_interval_ms=interval) as server:
            written[interval] = _stream_chunks(server.url, body)
    each, together = written[0.0], written[1000.0]
    assert b"".join(each) == b"".join(together) and b"".join(each).count(b"data:") == 6
    assert len(each) == 6  # 20 ms between steps: every token its own write
    assert len(together) == 2 and together[0].count(b"data:") == 1 and b'"index":1,' in together[0]


def test_repeated_parameters_share_their_checked_options_and_bad_ones_are_refused_each_time():
    """The validator keeps the DecodingOptions of parameter sets it has seen: the same set gives the same
    (frozen) options; any field that differs gives its own; a refused set is refused again, not remembered."""
    from attnserve.service.errors import InvalidRequest
    from attnserve.service.http.schemas import GenerateParameters
    from attnserve.service.http.validation import Validator
    from attnserve.service.requests.validation import Limits

    v = Validator(Limits(max_new_tokens=16, max_best_of=2, max_top_n_tokens=5))
    greedy = v.options(GenerateParameters(max_new_tokens=8), stream=False)
    assert v.options(GenerateParameters(max_new_tokens=8), stream=False) is greedy
    assert greedy.max_new_tokens == 8 and not greedy.logprobs and not greedy.sampling
    streamed = v.options(GenerateParameters(max_new_tokens=8), stream=True)
    assert streamed is not greedy and streamed.logprobs  # a stream's tokens carry logprobs
    assert v.options(GenerateParameters(max_new_tokens=8, stop=["a"]), stream=False).stop == ("a",)
    stop_a = v.options(GenerateParameters(max_new_tokens=8, stop=["a"]), stream=False)  # a list field: kept as a tuple
    assert v.options(GenerateParameters(max_new_tokens=8, stop=["a"]), stream=False) is stop_a
    assert v.options(GenerateParameters(max_new_tokens=8, stop=["b"]), stream=False).stop == ("b",)
    sampled = v.options(GenerateParameters(max_new_tokens=8, do_sample=True, seed=3), stream=False)
    assert sampled.sampling and sampled.seed == 3
    assert v.options(GenerateParameters(max_new_tokens=8, do_sample=True, seed=4), stream=False).seed == 4
    for _ in range(2):
        with pytest.raises(InvalidRequest, match="best_of must be at most 2"):
            v.options(GenerateParameters(best_of=3), stream=False)
        with pytest.raises(InvalidRequest, match="max_new_tokens must be between 1 and 16"):
            v.options(GenerateParameters(max_new_tokens=17), stream=False)
