"""Errors a user can act on. The CLI prints their message and exits 2 — never a traceback."""

from __future__ import annotations


class ClusterforgeError(Exception):
    """Base of every error the CLI reports as a plain message with exit code 2."""

    exit_code = 2


class SpecError(ClusterforgeError):
    """The spec file is missing, unreadable, not YAML, or does not fit the schema."""


class RenderError(ClusterforgeError):
    """The spec is valid but cannot be rendered (e.g. a hardware fact needed is unknown)."""
