"""Load tester for TGI-style and OpenAI-style streaming servers (`attnserve-loadtest URL`); needs no torch.

Owns the command (cli.py), the HTTP client and its SSE parser, the runner, statistics, reports and
comparisons, the server's samples, and the Locust file.

May import `service.client` (the in-process target), `service.extras` and `training.data` (--input datasets),
each inside the function that needs it, so the slim load-test image runs with loadtest/ alone.
"""


def main(argv: list[str] | None = None) -> int:
    """`attnserve-loadtest`: one line naming the `loadtest` extra when it is missing, then loadtest.cli.main.

    The check lives in service/extras.py; the slim load-test image ships loadtest/ alone (with its extra
    installed), so there the tool starts directly."""
    try:
        from service.extras import command
    except ImportError:
        from loadtest.cli import main as run

        return run(argv)
    return command("attnserve-loadtest", "loadtest.cli:main", "loadtest")(argv)


main.extras = ("loadtest",)  # what it needs, as every command built by service.extras.command records
