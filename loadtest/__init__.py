"""Load tester for TGI-style streaming servers (`attnserve-loadtest URL`); needs no torch."""
