"""The plan cache of ``clusterforge diff`` (``clusterforge.plan.cache``) and the lazy ``pulumi_aws``
of the Pulumi program (``infra.lazy_aws``).

A repeated diff must give the same report without running the Pulumi program again, and any input
of the plan that changes (a spec byte, a fact file, the code, the clock for a capacity block) must
miss. Calls of the program are counted; nothing here measures time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import clusterforge.plan.mocks
from clusterforge.diff import diff_spec_files, to_json
from clusterforge.plan import cache
from clusterforge.resolve import resolve_file

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


@pytest.fixture
def plans(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A cache folder of this test alone; yields the folder the plans go to."""
    monkeypatch.setenv("CLUSTERFORGE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CLUSTERFORGE_NO_CACHE", raising=False)
    cache.code_version.cache_clear()
    yield tmp_path / "cache" / "plans"
    cache.code_version.cache_clear()  # a test may have changed what it hashes


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The clusters the Pulumi program ran for (``build_plan`` looks ``run_program`` up per call)."""
    calls: list[str] = []
    real = clusterforge.plan.mocks.run_program

    def counting(rc: Any, **kwargs: Any) -> Any:
        calls.append(rc.spec.name)
        return real(rc, **kwargs)

    monkeypatch.setattr(clusterforge.plan.mocks, "run_program", counting)
    return calls


def _pair(tmp_path: Path, name: str = "local-aws.yaml") -> tuple[Path, Path]:
    """An example as the base and the same with one more GPU node as the head, side by side."""
    base = tmp_path / "base.yaml"
    head = tmp_path / "head.yaml"
    text = (EXAMPLES / name).read_text()
    base.write_text(text)
    head.write_text(text.replace("count: 4,", "count: 5,", 1))
    assert head.read_text() != text
    return base, head


def _diff(base: Path, head: Path, **kwargs: Any) -> str:
    return to_json(diff_spec_files(base, head, **kwargs))


def test_repeated_diff_is_identical_and_does_not_run_the_program(
    tmp_path: Path, plans: Path, runs: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, head = _pair(tmp_path)
    first = _diff(base, head)
    assert runs == ["local-aws", "local-aws"] and len(list(plans.glob("*.json"))) == 2
    second = _diff(base, head)
    assert runs == ["local-aws", "local-aws"]  # both sides from the cache
    assert second == first
    assert json.loads(first)["specs"][0]["resources"]["counts"]  # the plans were compared at all
    monkeypatch.setenv("CLUSTERFORGE_NO_CACHE", "1")
    assert _diff(base, head) == first  # and a hit reads as no cache at all
    assert len(runs) == 4


def test_a_changed_spec_byte_misses(tmp_path: Path, plans: Path, runs: list[str]) -> None:
    base, head = _pair(tmp_path)
    first = _diff(base, head)
    base.write_text(base.read_text() + "# one more byte\n")
    assert _diff(base, head) == first  # a comment changes no plan ...
    assert len(runs) == 3  # ... but the base's bytes changed, so it was planned again (the head hit)


def test_a_changed_facts_file_misses(tmp_path: Path, plans: Path, runs: list[str]) -> None:
    base, head = _pair(tmp_path)
    facts = tmp_path / "facts"
    shutil.copytree(EXAMPLES / "facts" / "mi300x", facts)
    first = _diff(base, head, facts_dir=facts)
    assert not json.loads(first)["specs"][0]["error"]
    assert _diff(base, head, facts_dir=facts) == first
    assert len(runs) == 2
    lscpu = facts / "mi-03" / "lscpu.txt"
    lscpu.write_bytes(lscpu.read_bytes() + b"\n")
    assert _diff(base, head, facts_dir=facts) == first
    assert len(runs) == 4  # both sides resolve with that folder


def test_a_changed_code_version_input_misses(
    tmp_path: Path, plans: Path, runs: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, head = _pair(tmp_path)
    _diff(base, head)
    real = cache._distribution_version
    monkeypatch.setattr(cache, "_distribution_version", lambda d: "0.0.1" if d == "pulumi_aws" else real(d))
    cache.code_version.cache_clear()
    _diff(base, head)
    assert len(runs) == 4


def test_code_version_covers_every_source_file(tmp_path: Path, plans: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = tmp_path / "code"
    (code / "pkg" / "sub").mkdir(parents=True)
    (code / "pkg" / "sub" / "mod.py").write_text("X = 1\n")
    (code / "pkg" / "__pycache__").mkdir()
    monkeypatch.setattr(cache, "ROOT", code)
    monkeypatch.setattr(cache, "CODE_FOLDERS", ("pkg",))

    def version() -> str:
        cache.code_version.cache_clear()
        return cache.code_version()

    v1 = version()
    (code / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"compiled")
    assert version() == v1  # bytecode is not source
    (code / "pkg" / "sub" / "mod.py").write_text("X = 2\n")
    v2 = version()
    assert v2 != v1
    (code / "pkg" / "catalog.yaml").write_text("a: 1\n")  # package data shapes plans too
    assert version() != v2


def test_the_clock_of_a_capacity_block_is_in_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """p5-training's block starts 2027-01-04: a plan made before must not be reused during it."""
    import infra.node_group

    rc = resolve_file(EXAMPLES / "p5-training.yaml")
    before = cache.clock_inputs(rc)
    assert before  # the conftest's pinned clock: 2026-12-01, before the block
    monkeypatch.setattr(infra.node_group, "utcnow", lambda: datetime(2027, 1, 5, tzinfo=UTC))
    assert cache.clock_inputs(rc) != before
    assert cache.clock_inputs(resolve_file(EXAMPLES / "local-aws.yaml")) == []  # no block: no clock


def test_a_corrupt_entry_is_ignored_and_replaced(tmp_path: Path, plans: Path, runs: list[str]) -> None:
    base, head = _pair(tmp_path)
    first = _diff(base, head)
    one, other = sorted(plans.glob("*.json"))
    one.write_text('{"key": "trunc')  # cut short
    other.write_text(json.dumps({"key": "not its own key", "resources": {}}))  # someone else's
    assert _diff(base, head) == first
    assert len(runs) == 4
    for entry in (one, other):  # written again, whole
        assert json.loads(entry.read_text())["key"] == entry.stem


def test_only_the_newest_entries_are_kept(tmp_path: Path) -> None:
    store = cache.PlanCache(tmp_path, keep=cache.KEEP)
    assert cache.KEEP == 64
    keys = [f"{i:064x}" for i in range(cache.KEEP + 6)]
    for i, key in enumerate(keys):
        store.put(key, {"r": {"n": i}})
        os.utime(tmp_path / f"{key}.json", (1_000_000 + i, 1_000_000 + i))  # distinct, increasing times
    assert len(list(tmp_path.glob("*.json"))) == cache.KEEP
    assert store.get(keys[0]) is None and store.get(keys[5]) is None  # the oldest went
    assert store.get(keys[6]) == {"r": {"n": 6}}  # a hit: now the most recently used
    store.put("f" * 64, {"r": {}})
    assert store.get(keys[6]) is not None and store.get(keys[7]) is None
    assert not list(tmp_path.glob(".tmp-*"))  # every write was renamed into place


def test_no_cache_keeps_nothing(tmp_path: Path, plans: Path, runs: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLUSTERFORGE_NO_CACHE", "1")
    base, head = _pair(tmp_path)
    _diff(base, head)
    _diff(base, head)
    assert len(runs) == 4 and not plans.exists()


# ----------------------------------------------------------------------------- lazy pulumi_aws


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # get_vpc loads ec2 whole, with its deprecated resources
def test_lazy_aws_gives_pulumi_aws_objects() -> None:
    import pulumi_aws

    from infra import lazy_aws

    assert lazy_aws.ec2.Vpc is pulumi_aws.ec2.Vpc
    assert lazy_aws.ec2.LaunchTemplateBlockDeviceMappingArgs is pulumi_aws.ec2.LaunchTemplateBlockDeviceMappingArgs
    assert lazy_aws.vpc.SecurityGroupIngressRule is pulumi_aws.vpc.SecurityGroupIngressRule
    assert lazy_aws.autoscaling.GroupTagArgs is pulumi_aws.autoscaling.GroupTagArgs
    assert lazy_aws.ec2.get_vpc is pulumi_aws.ec2.get_vpc  # not a class: the package's own attribute
    assert lazy_aws.Provider is pulumi_aws.Provider
    with pytest.raises(AttributeError):
        lazy_aws.ec2.NoSuchResource  # noqa: B018
    assert lazy_aws.module_of("SecurityGroupIngressRule") == "security_group_ingress_rule"
    assert lazy_aws.module_of("VpcArgs") == "_inputs" and lazy_aws.module_of("get_vpc") is None


LAZY_PROBE = """
import json, sys, types
import pulumi_aws
from pulumi._utils import lazy_import
from pulumi.runtime.rpc import get_resource_module
from infra import lazy_aws as aws

names = [("ec2", "Vpc"), ("ec2", "LaunchTemplate"), ("ec2", "LaunchTemplateBlockDeviceMappingArgs"),
         ("iam", "Role"), ("fsx", "LustreFileSystem"), ("autoscaling", "Group")]
objs = {n: getattr(getattr(aws, s), n) for s, n in names}
deferred = sorted({s for s, _ in names if type(sys.modules["pulumi_aws." + s]) is not types.ModuleType})
ec2_modules = len([m for m in sys.modules if m.startswith("pulumi_aws.ec2.")])
# what the engine does to rebuild a resource reference: the registered module's package, loaded whole
module = get_resource_module("aws", "ec2/vpc", "")
vpc = getattr(lazy_import(module.mod_info["fqn"]), "Vpc")
same = all(getattr(getattr(pulumi_aws, s), n) is objs[n] for s, n in names) and vpc is objs["Vpc"]
print(json.dumps({"deferred": deferred, "ec2_modules": ec2_modules, "same": same, "module": vpc.__module__,
                  "after": type(sys.modules["pulumi_aws.ec2"]).__name__}))
"""


def test_lazy_aws_imports_only_what_the_program_uses() -> None:
    """In a fresh interpreter: the services stay pulumi's lazy packages, ec2 loads a handful of its
    184 modules, and the engine's lookup through the registered resource modules (which loads the
    package whole) finds the very same classes afterwards."""
    res = subprocess.run([sys.executable, "-c", LAZY_PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout)
    assert got["deferred"] == ["autoscaling", "ec2", "fsx", "iam"]  # none of them loaded whole
    assert got["ec2_modules"] < 30 and got["same"]
    assert got["module"] == "pulumi_aws.ec2.vpc" and got["after"] == "module"  # loaded whole by the lookup
