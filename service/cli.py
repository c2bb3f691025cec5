"""`attnserve-serve [BUNDLE]` (also `python -m service`) and `attnserve-generate` (bulk, in-process).

Settings: a command-line flag wins over `ATTNSERVE_*`, which wins over the
default (service/settings.py). A bad bundle or setting stops start-up with one
line on stderr and exit status 2, before the port opens.

SIGTERM drains: /ready answers 503 at once, new generation requests get 503
`draining`, requests in flight finish (up to the drain timeout), then the
process exits 0. uvicorn's own SIGTERM handling would stop accepting and cut
streams at once, so the server class below takes the signal itself.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import logging
import os
import re
import signal
import socket
import sys
import tempfile
import time
import types
import typing
from pathlib import Path

import uvicorn
from pydantic import ValidationError

log = logging.getLogger("attnserve.service")


def _fail(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return 2


def _settings_error(e: ValidationError) -> str:
    parts = []
    for err in e.errors():
        name = ".".join(str(x) for x in err.get("loc", ()))
        if not name:  # an error of the settings as a whole (the default bundle not found): its message says it all
            parts.append(str(err.get("msg")))
            continue
        parts.append(f"{name} (--{name.replace('_', '-')} / ATTNSERVE_{name.upper()}): {err.get('msg')}")
    return "invalid setting: " + "; ".join(parts)


def build_parser() -> argparse.ArgumentParser:
    """attnserve-serve's flags: the positional BUNDLE, then one `--name-like-this` per `Settings` field."""
    p = argparse.ArgumentParser(
        prog="attnserve-serve",
        description="Serve a model bundle over HTTP (TGI-compatible API). Every flag is also ATTNSERVE_<NAME>.",
    )
    p.add_argument(
        "bundle", nargs="?", type=Path, help="model bundle directory (default: models/g2p-en here, else the source checkout's)"
    )
    add_setting_flags(p, exclude=("bundle",))
    add_allow_unknown_env(p)
    return p


def add_allow_unknown_env(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--allow-unknown-env",
        action="store_true",
        help="start even when an ATTNSERVE_* environment variable is not a setting (a typo is otherwise an error)",
    )


def check_environment(allow_unknown: bool) -> str | None:
    """The start-up error for ATTNSERVE_* variables that are not settings (None when there are none); with
    `allow_unknown` they are named in a warning on stderr instead."""
    import os

    from attnserve.service.settings import unknown_environment

    problem = unknown_environment(os.environ)
    if problem and allow_unknown:
        print(f"warning: {problem}", file=sys.stderr)
        return None
    return problem


def add_setting_flags(p: argparse.ArgumentParser, names: tuple[str, ...] | None = None, exclude: tuple[str, ...] = ()) -> None:
    """A flag per `Settings` field (`names`, default all but `exclude`), made from the field itself: its name
    (`max_batch_size` -> `--max-batch-size`), type, choices (a Literal) and description, so a knob is declared
    once, in service/settings.py. An unset flag is None: the environment or the default decides."""
    from attnserve.service.settings import Settings

    for name, field in Settings.model_fields.items():
        if (names is not None and name not in names) or name in exclude:
            continue
        kind = field.annotation
        if typing.get_origin(kind) in (typing.Union, types.UnionType):  # `int | None`: the flag takes an int
            kind = next(a for a in typing.get_args(kind) if a is not type(None))
        choices = typing.get_args(kind) if typing.get_origin(kind) is typing.Literal else None
        # the default, unless the description says what it is (a default found or computed at start-up)
        default = field.get_default() if field.default_factory is None and "default" not in field.description else None
        shown = "" if default is None else f" (default: {default:g})" if isinstance(default, float) else f" (default: {default})"
        if kind is bool:  # --context / --no-context: argparse's type=bool would read "false" as true
            p.add_argument(
                "--" + name.replace("_", "-"), action=argparse.BooleanOptionalAction, default=None, help=field.description
            )
            continue
        p.add_argument(
            "--" + name.replace("_", "-"),
            type=str if choices else kind,
            choices=choices,
            metavar=FLAG_METAVARS.get(name),
            help=(field.description or "") + shown,
        )


FLAG_METAVARS = {"lexicon": "FILE.tsv", "bundle": "BUNDLE"}


def parse_settings(argv: list[str] | None = None):
    """Settings from flags over `ATTNSERVE_*` over defaults; raises pydantic's ValidationError."""
    from attnserve.service.settings import Settings

    args = build_parser().parse_args(argv)
    return Settings(**{k: v for k, v in vars(args).items() if v is not None and k != "allow_unknown_env"})


def serve_main(argv: list[str] | None = None) -> int:
    # ONNX Runtime's native logger writes to file descriptor 2 at import (a GPU discovery warning in containers,
    # at a fixed level no setting lowers), ahead of the JSON log: such lines are caught and logged as JSON
    runtime_lines = import_capturing_native_output("onnxruntime")
    problem = check_environment(build_parser().parse_args(argv).allow_unknown_env)
    if problem:
        return _fail(problem)
    try:
        settings = parse_settings(argv)
    except ValidationError as e:
        return _fail(_settings_error(e))
    return serve(settings, native_lines=runtime_lines)


ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


def import_capturing_native_output(module: str) -> list[str]:
    """Import `module` with file descriptor 2 sent to a temporary file; the non-blank lines it wrote there,
    colour codes removed. A module already imported writes nothing and gives []."""
    if module in sys.modules:
        return []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            importlib.import_module(module)
        except ImportError:
            pass  # not installed: the code that needs it says so, with the extra to install
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        caught.seek(0)
        text = caught.read().decode("utf-8", errors="replace")
    return [ANSI_ESCAPE.sub("", line).strip() for line in text.splitlines() if line.strip()]


def serve(settings, engine=None, *, keepalive_s: float | None = None, native_lines: list[str] = ()) -> int:
    """Load (unless given an engine), then run uvicorn until SIGTERM/SIGINT; the exit status. `native_lines`:
    what a native library wrote to stderr before logging was configured, logged here as warnings."""
    from attnserve.service.engine.bundle import BundleError
    from attnserve.service.engine.engine import EngineError
    from attnserve.service.http.app import create_app
    from attnserve.service.http.logs import configure_logging
    from attnserve.service.http.state import SSE_KEEPALIVE_S, load_engine, load_lexicon, resolve_limits
    from attnserve.service.settings import ConfigError
    from attnserve.service.text.lexicon import LexiconError

    configure_logging(settings.log_level)
    for line in native_lines:
        log.warning("onnxruntime: %s", line)
    try:
        sock = bind(settings.host, settings.port)  # a port already taken fails here, before loading or any "ready"
    except OSError as e:
        return _fail(f"cannot listen on {settings.host}:{settings.port} (--port / ATTNSERVE_PORT): {e.strerror or e}")
    try:
        if engine is None:
            engine = load_engine(settings)
        resolve_limits(settings, engine)
        lexicon = load_lexicon(settings, engine)  # a bad override line stops here, before the port opens
    except (BundleError, EngineError, ConfigError, LexiconError) as e:
        sock.close()
        return _fail(str(e))
    app = create_app(settings, engine, keepalive_s=SSE_KEEPALIVE_S if keepalive_s is None else keepalive_s, lexicon=lexicon)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_config=None,  # keep the JSON logging configured above
        access_log=False,  # the app logs each request with its id
        lifespan="on",
        timeout_graceful_shutdown=max(5.0, settings.drain_timeout_s),
        timeout_keep_alive=settings.keepalive_timeout_s,  # uvicorn's 5 s equals httpx's idle expiry: see Settings
    )
    DrainingServer(config, app).run(sockets=[sock])  # uvicorn listens on the socket bound above
    return 0


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to host:port as uvicorn binds (SO_REUSEADDR), not yet listening: a client is refused until
    uvicorn listens on it, after start-up. Raises OSError when the port is taken or the address is not this host's."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


class DrainingServer(uvicorn.Server):
    """uvicorn.Server whose first SIGTERM drains instead of stopping at once."""

    def __init__(self, config: uvicorn.Config, app):
        super().__init__(config)
        self.app = app

    def handle_exit(self, sig: int, frame) -> None:
        svc = self.app.state.service
        if sig == signal.SIGTERM and svc is not None and svc.loop is not None and not svc.draining:
            svc.draining = True  # /ready and new generation requests answer 503 from here on
            svc.loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self._drain(svc)))
            return  # not recorded as captured: uvicorn would re-raise it at exit and the status would not be 0
        super().handle_exit(sig, frame)  # a second signal, or SIGINT: uvicorn's immediate shutdown

    async def _drain(self, svc) -> None:
        timeout = svc.settings.drain_timeout_s
        log.info("SIGTERM: draining", extra={"in_flight": svc.scheduler.in_flight, "drain_timeout_s": timeout})
        deadline = time.monotonic() + timeout
        while svc.scheduler.in_flight and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if svc.scheduler.in_flight:
            log.warning("drain timeout: failing the requests still in flight", extra={"in_flight": svc.scheduler.in_flight})
            await asyncio.to_thread(svc.scheduler.stop, "the server shut down before this request finished")
        log.info("drained; shutting down")
        self.should_exit = True


GENERATE_SETTINGS = (
    "bundle",
    "variant",
    "provider",
    "threads",
    "max_batch_size",
    "lexicon",
    "context",
)  # Settings the bulk tool takes
DECODING_FLAGS = ("max_new_tokens", "temperature", "top_k", "top_p", "repetition_penalty", "seed", "best_of", "num_beams")


def generate_parser() -> argparse.ArgumentParser:
    """attnserve-generate's flags: the input and output, the server's settings it shares, and the decoding options."""
    p = argparse.ArgumentParser(
        prog="attnserve-generate",
        description="Generate for every line of a file with the server's engine and batching, in-process.",
    )
    p.add_argument("input", type=Path, nargs="?", help="text file, one input (a word, or running text) per line ('-': stdin)")
    p.add_argument(
        "--score",
        type=Path,
        metavar="FILE.tsv",
        help="score instead of generating: FILE.tsv holds source<TAB>target lines ('-': stdin); writes "
        "source, target, total log-probability, score (their mean, end token included) per line. The lexicon is not read",
    )
    p.add_argument("-o", "--output", type=Path, help="TSV to write (default: stdout)")
    add_setting_flags(p, names=GENERATE_SETTINGS)
    add_allow_unknown_env(p)
    p.add_argument("--max-new-tokens", type=int, help="default: the bundle's max_target_len")
    p.add_argument("--do-sample", action="store_true", help="sample instead of greedy")
    p.add_argument("--temperature", type=float)
    p.add_argument("--top-k", type=int)
    p.add_argument("--top-p", type=float)
    p.add_argument("--repetition-penalty", type=float)
    p.add_argument("--seed", type=int, help="seed of every sampled line (default: a new one per line)")
    p.add_argument(
        "--best-of",
        type=int,
        help="N ranked answers per input (beam search of width N; with --do-sample, N sampled candidates): "
        "writes input, rank, output, score (mean log-probability), source",
    )
    p.add_argument("--num-beams", type=int, help="beam width when larger than --best-of")
    p.add_argument("--no-lexicon", action="store_true", help="the model answers every word, even those the lexicon knows")
    p.add_argument(
        "--alphabet",
        choices=("arpabet", "ipa", "espeak"),
        default="arpabet",
        help="write answers in ARPAbet, IPA or espeak-ng's IPA (docs/IPA.md)",
    )
    p.add_argument("--no-stress", action="store_true", help="leave out stress (ARPAbet's digits, IPA's marks)")
    p.add_argument(
        "--pronunciations",
        type=Path,
        metavar="FILE",
        help="this run's own pronunciations, over the lexicon and the model: a JSON object {word or words: phones} or "
        "word<TAB>phones lines; phones in ARPAbet, IPA or espeak-ng IPA (the HTTP parameter `pronunciations`)",
    )
    p.add_argument(
        "--pronunciations-alphabet",
        choices=("arpabet", "ipa", "espeak"),
        help="how --pronunciations is written (default: detected)",
    )
    p.add_argument(
        "--words",
        action="store_true",
        help='write a JSON line per input: {"input", "text", "words"}, each word with its span, answer and source '
        '(the HTTP answer\'s details: "words")',
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    return p


def generate_main(argv: list[str] | None = None) -> int:
    """Bulk generation: one input per line in, `input<TAB>output` lines out (for G2P: a lexicon);
    with --best-of N, N ranked rows per input: `input<TAB>rank<TAB>output<TAB>score<TAB>source`.
    Answered as the server answers: the lexicon first (unless --no-lexicon), and for a word-level
    bundle each line is running text whose words' answers are joined by " | "."""
    args = generate_parser().parse_args(argv)

    from attnserve.service.client import Generator
    from attnserve.service.engine.bundle import BundleError
    from attnserve.service.engine.engine import EngineError, InputError
    from attnserve.service.settings import Settings
    from attnserve.service.text.lexicon import LexiconError

    problem = check_environment(args.allow_unknown_env)
    if problem:
        return _fail(problem)
    try:
        settings = Settings(**{k: getattr(args, k) for k in GENERATE_SETTINGS if getattr(args, k) is not None})
    except ValidationError as e:
        return _fail(_settings_error(e))
    if (args.input is None) == (args.score is None):
        return _fail("give an input file to generate for, or --score FILE.tsv (not both)")
    source = args.score or args.input
    if str(source) == "-":
        lines = sys.stdin.read().splitlines()
    elif not source.is_file():
        return _fail(f"input file not found: {source}")
    else:
        lines = source.read_text(encoding="utf-8").splitlines()
    inputs = [(n, line.strip()) for n, line in enumerate(lines, 1) if line.strip()]
    params = {k: getattr(args, k) for k in DECODING_FLAGS if getattr(args, k) is not None}
    params["do_sample"] = args.do_sample
    params["logprobs"] = args.best_of is not None or args.num_beams is not None  # ranked rows: the score column
    try:
        gen = Generator(
            settings.bundle,
            variant=settings.variant,
            provider=settings.provider,
            threads=settings.threads,
            max_batch_size=settings.max_batch_size,
            lexicon_file=settings.lexicon,
            context=settings.context,
        )
    except (BundleError, EngineError, LexiconError) as e:
        return _fail(str(e))
    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
    try:
        if args.score is not None:
            failed = write_scores(gen, inputs, out, progress=not args.no_progress)
        else:
            gen.options(**params)  # bad parameters stop here with their message, before any work
            form = {"alphabet": args.alphabet, "stress": not args.no_stress, **own_pronunciations(args)}
            failed = write_answers(
                gen, inputs, params, out, lexicon=not args.no_lexicon, progress=not args.no_progress, form=form, words=args.words
            )
    except (InputError, OSError) as e:
        return _fail(str(e))
    finally:
        gen.close()
        if out is not sys.stdout:
            out.close()
    if failed:
        print(f"{failed} of {len(inputs)} lines could not be read by the model (see above)", file=sys.stderr)
        return 1
    return 0


def write_scores(gen, lines: list[tuple[int, str]], out, *, progress: bool) -> int:
    """Score every (line number, "source<TAB>target") line and write `source<TAB>target<TAB>total<TAB>score`; a line
    that cannot be read (no tab, a symbol the model does not write) is named on stderr. Returns how many lines
    failed; prints the rate after start-up on stderr."""
    from tqdm import tqdm

    from attnserve.service.engine.engine import InputError

    failed = 0
    pairs: list[tuple[int, str, str]] = []
    for n, line in lines:
        source, tab, target = line.partition("\t")
        if not tab or not source.strip() or not target.strip() or "\t" in target:
            failed += 1
            print(f"line {n}: expected source<TAB>target", file=sys.stderr)
            continue
        pairs.append((n, source.strip(), target.strip()))
    bar = tqdm(total=len(pairs), unit="line", disable=not progress or None, file=sys.stderr)
    t0 = time.perf_counter()
    # one request per line, so a line that cannot be read fails alone; the requests in flight share the batch
    results = gen.score_many((source, [target]) for _, source, target in pairs)
    for (n, source, target), result in zip(pairs, results):
        if isinstance(result, InputError):
            failed += 1
            tqdm.write(f"line {n}: {result}", file=sys.stderr)
        else:
            out.write(f"{source}\t{target}\t{result[0].total:.6f}\t{result[0].score:.6f}\n")
        bar.update(1)
    bar.close()
    seconds = time.perf_counter() - t0
    out.flush()
    rate = len(pairs) / max(seconds, 1e-9)
    print(f"{len(pairs)} lines in {seconds:.2f} s after start-up: {rate:.1f} lines/s", file=sys.stderr)
    return failed


def own_pronunciations(args: argparse.Namespace) -> dict:
    """`generate_text_many`'s pronunciations keywords from --pronunciations FILE (a JSON object, or word<TAB>phones
    lines) and --pronunciations-alphabet; {} when none is given. InputError naming a line that is neither."""
    from attnserve.service.engine.engine import InputError

    if args.pronunciations is None:
        return {}
    text = args.pronunciations.read_text(encoding="utf-8")
    try:
        entries = json.loads(text)
    except json.JSONDecodeError:
        entries = {}
        for n, line in enumerate(text.splitlines(), 1):
            key, tab, value = line.partition("\t")
            if line.strip() and not tab:
                raise InputError(f"{args.pronunciations} line {n}: expected word<TAB>phones, or a JSON object") from None
            if line.strip():
                entries[key.strip()] = value.strip()
    if not isinstance(entries, dict):
        raise InputError(f"{args.pronunciations}: expected a JSON object {{word: phones}}")
    return {"pronunciations": entries, "pronunciations_alphabet": args.pronunciations_alphabet}


def write_answers(
    gen,
    inputs: list[tuple[int, str]],
    params: dict,
    out,
    *,
    lexicon: bool,
    progress: bool,
    form: dict | None = None,
    words: bool = False,
) -> int:
    """Answer every (line number, text) and write its TSV rows (ranked when params["logprobs"]); a line the model
    cannot read is named on stderr. Returns how many failed; prints the rate after start-up on stderr."""
    from tqdm import tqdm

    from attnserve.service.engine.engine import InputError

    ranked, failed = params["logprobs"], 0
    bar = tqdm(total=len(inputs), unit="line", disable=not progress or None, file=sys.stderr)
    t0 = time.perf_counter()  # after start-up (bundle, sessions, warm-up): what decoding alone takes
    results = gen.generate_text_many([t for _, t in inputs], lexicon=lexicon, **(form or {}), **params)
    for (n, text), result in zip(inputs, results):
        if isinstance(result, InputError):
            failed += 1
            tqdm.write(f"line {n}: {result}", file=sys.stderr)
        elif words:
            line = {"input": text, "text": result.text, "words": result.word_details()}
            out.write(json.dumps(line, ensure_ascii=False) + "\n")
        elif ranked:
            for rank, a in enumerate(result.ranked(), 1):
                score = "" if a.score is None else f"{a.score:.6f}"  # a lexicon answer has no score
                out.write(f"{text}\t{rank}\t{a.text}\t{score}\t{a.source}\n")
        else:
            out.write(f"{text}\t{result.text}\n")
        bar.update(1)
    bar.close()
    seconds = time.perf_counter() - t0
    out.flush()  # the answers first, then the figure, in a terminal that shows both streams
    rate = len(inputs) / max(seconds, 1e-9)
    print(f"{len(inputs)} lines in {seconds:.2f} s after start-up: {rate:.1f} lines/s", file=sys.stderr)
    return failed
