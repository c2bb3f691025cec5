"""Load tester for TGI-style streaming servers (`attnserve-loadtest URL`); needs no torch."""

from service.extras import command

main = command("attnserve-loadtest", "loadtest.cli:main", "loadtest")  # the entry point: one line when the extra is missing
