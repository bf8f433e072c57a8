"""Capacity-block windows (STUB by helper T; helper L's module replaces this file at merge)."""

from __future__ import annotations

from typing import Any


def blocks_config(cluster: Any) -> list[dict[str, Any]]:
    """The capacity-block entries of ``cloud/agent.json`` ([] when none); L defines the keys."""
    return []


def tick(config: dict[str, Any], now: Any) -> None:
    """One capacity-block step of the cloud agent (stub: nothing to do)."""
