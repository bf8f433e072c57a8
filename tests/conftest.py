"""Shared fixtures: repository paths and rendering of the examples."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
EXAMPLE_SPECS = sorted(p.name for p in EXAMPLES.glob("*.yaml"))


@pytest.fixture
def root() -> Path:
    return ROOT
