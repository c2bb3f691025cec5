"""The error every export step raises when a bundle cannot be built or fails a check.

A leaf, so that each step (bundle, explain, variants, verify) can raise it without importing the others.
"""


class BuildError(RuntimeError):
    """The bundle could not be built or failed its checks; one line."""
