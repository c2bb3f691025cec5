"""The demo page (GET /demo) in a real browser: headless Debian chromium driven by Selenium through
Debian's chromium-driver, against a real uvicorn server on 127.0.0.1 serving the tiny bundle.

System test: `make system-deps` installs chromium and chromium-driver (Debian packages); the
dev extra has selenium. Screenshots go to test-artifacts/ (CI keeps them).

Run as a script, it retakes docs/API.md's screenshot of the page:
    python tests/system/test_browser.py BUNDLE docs/img/demo.png [--word attention]
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from pathlib import Path

import httpx
import pytest
from service_harness import ROOT, PacedEngine, ServerThread

from attnserve.service.engine.bundle import load_bundle

pytestmark = pytest.mark.system

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--window-size=1280,1200",
]


@contextlib.contextmanager
def browser(profile_dir: Path):
    """Headless chromium with a fresh profile; nothing is downloaded (both binaries are Debian's)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    assert not missing, f"{', '.join(missing)} missing: run `make system-deps` (Debian chromium and chromium-driver)"
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # console errors (CSP violations) are checked
    for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={profile_dir}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@contextlib.contextmanager
def serving(bundle_dir: Path, variant: str = "fp32", step_delay_s: float = 0.0, **settings):
    from attnserve.service.http.app import create_app
    from attnserve.service.settings import Settings

    engine = PacedEngine(load_bundle(bundle_dir), variant=variant, threads=1)
    engine.step_delay_s = step_delay_s
    app = create_app(Settings(bundle=bundle_dir, variant=variant, threads=1, **settings), engine)
    with ServerThread(app) as server:
        yield server


def wait_for(driver, condition, timeout: float = 60):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(lambda d: condition(d))


def state(driver, selector: str) -> str:
    return driver.find_element("css selector", selector).get_attribute("data-state")


def finished(driver, *selectors: str) -> bool:
    return all(state(driver, s) in ("done", "error") for s in selectors)


def submit(driver, url: str, word: str) -> None:
    """Open the page, type `word`, press Generate, wait for both outputs and the heatmap."""
    driver.get(url + "/demo")
    wait_for(driver, lambda d: "model " in d.find_element("id", "model-info").text)
    box = driver.find_element("id", "inputs")
    box.clear()
    box.send_keys(word)
    driver.find_element("id", "run").click()
    wait_for(driver, lambda d: finished(d, "#greedy", "#sampled"))
    wait_for(driver, lambda d: state(d, "#attention") in ("done", "error", "idle") and d.find_element("id", "run").is_enabled())


def screenshot(driver, path: Path) -> None:
    """The whole page: the window grows to the document's height first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(3):  # the window's outer size includes what is not viewport: adjust until the page fits
        missing = driver.execute_script("return document.documentElement.scrollHeight - window.innerHeight")
        if missing <= 0:
            break
        driver.set_window_size(1280, driver.get_window_size()["height"] + int(missing) + 24)
    driver.save_screenshot(str(path))


def heatmap(driver) -> list[list[float]]:
    """The table's cell weights, by their data-row / data-col attributes: [T][S]."""
    cells = driver.find_elements("css selector", "#heatmap td.cell")
    rows: dict[int, dict[int, float]] = {}
    for c in cells:
        rows.setdefault(int(c.get_attribute("data-row")), {})[int(c.get_attribute("data-col"))] = float(
            c.get_attribute("data-weight")
        )
    return [[r[j] for j in sorted(r)] for _, r in sorted(rows.items())]


def chips(driver, panel: str) -> list[str]:
    return [e.text for e in driver.find_elements("css selector", f"#{panel} .tok .tok-text")]


@pytest.fixture(scope="module")
def server(tiny_bundle_dir):
    with serving(tiny_bundle_dir) as s:
        yield s


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    with browser(tmp_path_factory.mktemp("chromium-profile")) as d:
        yield d


def test_page_streams_both_outputs_and_draws_one_row_per_output_and_one_column_per_input(server, driver):
    url, word = server.url, "phoneme"
    submit(driver, url, word)
    assert state(driver, "#greedy") == "done" and state(driver, "#sampled") == "done"
    assert state(driver, "#attention") == "done", driver.find_element("css selector", "#attention .error").text

    generated = httpx.post(url + "/generate", json={"inputs": word, "parameters": {"details": True}}, timeout=60).json()
    explained = httpx.post(url + "/explain", json={"inputs": word}, timeout=60).json()
    assert driver.find_element("css selector", "#greedy .text").text == generated["generated_text"]
    # one chip per streamed token (the end token included), each with its probability
    assert len(chips(driver, "greedy")) == len(generated["details"]["tokens"])
    probs = [e.text for e in driver.find_elements("css selector", "#greedy .tok .tok-prob")]
    assert probs and all(p.endswith("%") for p in probs)
    assert driver.find_element("css selector", "#sampled .seed").text.startswith("seed ")

    # the heatmap: rows = output tokens, columns = the input's characters, each cell addressable
    rows = driver.find_elements("css selector", "#heatmap tbody tr")
    assert len(rows) == len(explained["tokens"]) == len(chips(driver, "greedy"))
    sources = [e.text for e in driver.find_elements("css selector", "#heatmap th.src")]
    assert sources == [s["token"] for s in explained["source_tokens"]] == list(word)
    for row in rows:
        assert len(row.find_elements("css selector", "td.cell")) == len(word)
    shown = heatmap(driver)  # default view: last layer, mean of heads
    expected = explained["cross_attention_mean"][-1]
    assert all(abs(a - b) <= 1e-6 for ra, rb in zip(shown, expected) for a, b in zip(ra, rb))
    assert all(abs(sum(r) - 1) <= 1e-3 for r in shown)
    assert "Same tokens as the streamed output" in driver.find_element("css selector", "#attention .note").text

    # the layer/head selector redraws from the per-head weights
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element("id", "layer")).select_by_value("0")
    Select(driver.find_element("id", "head")).select_by_value("1")
    shown = heatmap(driver)
    expected = explained["cross_attentions"][0][1]
    assert all(abs(a - b) <= 1e-6 for ra, rb in zip(shown, expected) for a, b in zip(ra, rb))

    # the page loaded nothing from anywhere but this server
    resources = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert resources and all(r.startswith(url + "/") for r in resources), resources
    logs = driver.get_log("browser")
    assert not [entry for entry in logs if entry["level"] == "SEVERE"], logs
    Select(driver.find_element("id", "layer")).select_by_index(len(Select(driver.find_element("id", "layer")).options) - 1)
    Select(driver.find_element("id", "head")).select_by_value("mean")
    screenshot(driver, ARTIFACTS / "demo.png")

    # the sampled output is explained with the seed it used: the same tokens as its stream
    Select(driver.find_element("id", "attn-output")).select_by_value("sampled")
    wait_for(
        driver,
        lambda d: state(d, "#attention") == "done" and "Same tokens" in d.find_element("css selector", "#attention .note").text,
    )
    assert len(driver.find_elements("css selector", "#heatmap tbody tr")) == len(chips(driver, "sampled"))


def test_invalid_input_shows_the_servers_message(server, driver):
    word = "\u2603"  # nothing readable (in a text with words it would be skipped, with a warning)
    submit(driver, server.url, word)
    expected = httpx.post(server.url + "/generate_stream", json={"inputs": word}, timeout=30).json()
    assert expected["error_type"] == "validation"
    for panel in ("greedy", "sampled"):
        assert state(driver, f"#{panel}") == "error"
        shown = driver.find_element("css selector", f"#{panel} .error").text
        assert expected["error"] in shown and shown.startswith("422 validation")
    assert driver.find_elements("css selector", "#heatmap td.cell") == []
    screenshot(driver, ARTIFACTS / "demo-invalid-input.png")


def test_overload_shows_the_servers_429_message(tiny_bundle_dir, driver):
    """One request at a time and a slowed engine: of the page's two simultaneous streams one is refused."""
    with serving(tiny_bundle_dir, step_delay_s=0.05, max_concurrent_requests=1) as s:
        submit(driver, s.url, "cat")
        states = {p: state(driver, f"#{p}") for p in ("greedy", "sampled")}
        assert sorted(states.values()) == ["done", "error"], states
        refused = next(p for p, v in states.items() if v == "error")
        shown = driver.find_element("css selector", f"#{refused} .error").text
        assert shown.startswith("429 overloaded: the server is at its bound of queued + running requests; retry after")
        screenshot(driver, ARTIFACTS / "demo-overload.png")


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(description="Screenshot the demo page after one request (for docs/API.md).")
    p.add_argument("bundle", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--word", default="attention")
    p.add_argument("--variant", default="auto")
    args = p.parse_args(argv)
    with serving(args.bundle, variant=args.variant) as s, tempfile.TemporaryDirectory() as profile, browser(Path(profile)) as d:
        submit(d, s.url, args.word)
        screenshot(d, args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
