"""Load tester for TGI-style and OpenAI-style streaming servers (`attnserve-loadtest URL`); needs no torch.

Owns the command (cli.py), the HTTP client and its SSE parser, the runner, statistics, reports and
comparisons, the server's samples, and the Locust file.

May import `attnserve.service.client` (the in-process target), `attnserve.service.extras` and
`attnserve.training.data` (--input datasets), each inside the function that needs it, so the slim load-test image
runs with loadtest/ alone.
"""


def main(argv: list[str] | None = None) -> int:
    """`attnserve-loadtest`: one line naming the `loadtest` extra when it is missing, then attnserve.loadtest.cli.main.

    The check lives in service/extras.py; the slim load-test image ships loadtest/ alone (with its extra
    installed), so there the tool starts directly."""
    try:
        from attnserve.service.extras import command
    except ImportError:
        from attnserve.loadtest.cli import main as run

        return run(argv)
    return command("attnserve-loadtest", "attnserve.loadtest.cli:main", "loadtest")(argv)


main.extras = ("loadtest",)  # what it needs, as every command built by attnserve.service.extras.command records
