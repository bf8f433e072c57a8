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


@pytest.fixture(autouse=True)
def _pinned_now(monkeypatch: pytest.MonkeyPatch) -> None:
    """Infra compares capacity-block windows with the time; pin it so the examples' schedules
    (p5-training: a block from 2027-01-04) do not change with the calendar."""
    from datetime import UTC, datetime

    import infra.node_group

    monkeypatch.setattr(infra.node_group, "utcnow", lambda: datetime(2026, 12, 1, 12, 0, tzinfo=UTC))


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The user cache (compiled templates, diff plans) of the test session, not of the user:
    a test never reads what an earlier run or the developer's own commands left there."""
    import os

    os.environ["CLUSTERFORGE_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
