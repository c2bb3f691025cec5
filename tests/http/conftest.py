"""The API tests' shared server: a real uvicorn server on 127.0.0.1 serving the tiny bundle, one per test module;
tests that need other settings (a tight bound, a short timeout, an API key, a failing engine, fresh counters)
start their own, which costs about a second each."""

from __future__ import annotations

import pytest
from service_harness import serving


@pytest.fixture(scope="module")
def server(tiny_bundle_dir):
    with serving(tiny_bundle_dir, max_batch_size=8, max_concurrent_requests=64) as s:
        yield s


@pytest.fixture(scope="module")
def url(server) -> str:
    return server.url


@pytest.fixture()
def paced(server):
    """Slow each decoder step of the shared server for one test, so requests overlap for sure."""

    def set_delay(seconds: float) -> None:
        server.service.engine.step_delay_s = seconds

    yield set_delay
    server.service.engine.step_delay_s = 0.0
