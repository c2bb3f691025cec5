"""The operator's lexicon file is read again when it changes (a file check at most once a second) or on SIGHUP, over
HTTP on 127.0.0.1 with the default model; a bad file keeps the lexicon in use and logs one line."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from service_harness import free_port, serving

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BUNDLE = ROOT / "models" / "g2p-en"


def answer(url: str, word: str) -> str:
    r = httpx.post(url + "/generate", json={"inputs": word}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["generated_text"]


def wait_for(check, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return False


def test_a_changed_file_is_read_again_and_a_bad_one_keeps_the_old_lexicon(tmp_path, caplog):
    path = tmp_path / "mine.tsv"
    path.write_text("hello\tHH EH0 L OW1\n")
    with serving(DEFAULT_BUNDLE, lexicon=path) as s, caplog.at_level(logging.INFO, logger="attnserve.service"):
        assert answer(s.url, "hello") == "HH EH0 L OW1"
        path.write_text("hello\tHH AH1 L OW0\nzyxoplat\tZ IH1 K S OW0 P L AE2 T\n")
        assert wait_for(lambda: answer(s.url, "hello") == "HH AH1 L OW0")
        assert answer(s.url, "zyxoplat") == "Z IH1 K S OW0 P L AE2 T"
        assert httpx.get(s.url + "/info", timeout=10).json()["lexicon"]["overridden_sources"] == 2

        path.write_text("hello\tHH AH1 L OW0\nworld\tW ER1 L D XX9\n")  # a phone the model does not have
        assert wait_for(lambda: any("XX9" in r.getMessage() for r in caplog.records))
        time.sleep(2.5)  # two more checks of an unchanged bad file: no more lines
        bad = [r for r in caplog.records if "not reloaded" in r.getMessage()]
        assert len(bad) == 1 and bad[0].levelname == "WARNING"
        assert f"{path}:2" in bad[0].getMessage()
        assert answer(s.url, "hello") == "HH AH1 L OW0" and answer(s.url, "zyxoplat") == "Z IH1 K S OW0 P L AE2 T"

        path.unlink()  # a missing file is a bad file too
        assert wait_for(lambda: len([r for r in caplog.records if "not reloaded" in r.getMessage()]) == 2)
        assert answer(s.url, "hello") == "HH AH1 L OW0"

        path.write_text("hello\tHH EH1 L OW2\n")
        assert wait_for(lambda: answer(s.url, "hello") == "HH EH1 L OW2")
        assert answer(s.url, "zyxoplat") != "Z IH1 K S OW0 P L AE2 T"  # gone from the file: the model answers again


def test_sighup_reads_the_file_again_even_when_its_stamp_did_not_change(tmp_path):
    path = tmp_path / "mine.tsv"
    path.write_text("hello\tHH EH0 L OW1\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [
        sys.executable,
        "-m",
        "attnserve.service",
        str(DEFAULT_BUNDLE),
        "--lexicon",
        str(path),
        "--port",
        str(port),
        "--threads",
        "1",
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: _ready(url), 120), "the server did not become ready"
        assert answer(url, "hello") == "HH EH0 L OW1"
        # the same size, in place, with the old modification time: the once-a-second check cannot see it
        stamp = os.stat(path)
        with open(path, "r+") as f:
            f.write("hello\tHH AH1 L OW0\n")
        os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
        time.sleep(2.5)
        assert answer(url, "hello") == "HH EH0 L OW1"
        proc.send_signal(signal.SIGHUP)
        assert wait_for(lambda: answer(url, "hello") == "HH AH1 L OW0")
        assert proc.poll() is None  # SIGHUP did not stop the server
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def _ready(url: str) -> bool:
    try:
        return httpx.get(url + "/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
