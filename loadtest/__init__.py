"""Load tester for TGI-style and OpenAI-style streaming servers (`attnserve-loadtest URL`); needs no torch."""


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
