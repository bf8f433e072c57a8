"""slurm.cred_expire_s: the job credential lifetime, printed as ``AuthInfo=cred_expire=N``.

It is also how long a requeued job waits before it may start again (slurmctld/job_mgr.c of
22.05..26.05: ``begin_time = now + cred_lifetime + 1`` on requeue), which is why the local
examples shorten it: their fault tests requeue jobs. The real daemons of every family load the
local examples' render in the check tests (tests/test_check*.py)."""

from __future__ import annotations

import copy

import pytest
import yaml

from clusterforge.clusterspec import load_spec
from clusterforge.clusterspec.models import Cluster
from clusterforge.render import render_cluster
from clusterforge.render.restart import ImpactClass, global_rule
from clusterforge.render.writer import render_tree

from .conftest import EXAMPLES


def _conf(spec: Cluster) -> list[str]:
    return render_tree(render_cluster(spec, base_dir=EXAMPLES))["slurm/slurm.conf"].decode().splitlines()


def test_absent_by_default_so_slurm_keeps_its_120_s() -> None:
    spec = load_spec(EXAMPLES / "onprem-dgx.yaml")
    assert spec.slurm.cred_expire_s is None
    assert not [ln for ln in _conf(spec) if ln.startswith("AuthInfo=")]


def test_local_examples_print_it_once() -> None:
    for name in ("local.yaml", "local-aws.yaml"):
        lines = _conf(load_spec(EXAMPLES / name))
        assert [ln for ln in lines if ln.startswith("AuthInfo=")] == ["AuthInfo=cred_expire=20"], name


@pytest.mark.parametrize("bad", [0, 4, -1, 86401, "soon"])
def test_values_slurm_would_ignore_are_refused(bad: object) -> None:
    # below 5 Slurm logs "AuthInfo=cred_expire=N invalid" and silently keeps 120 (slurm_cred.c)
    doc = yaml.safe_load((EXAMPLES / "local.yaml").read_text())
    doc = copy.deepcopy(doc)
    doc["slurm"]["cred_expire_s"] = bad
    with pytest.raises(Exception) as e:
        Cluster.model_validate(doc)
    assert "cred_expire_s" in str(e.value)


@pytest.mark.parametrize("version", [(22, 5), (23, 11), (24, 11), (26, 5)])
def test_a_change_restarts_every_daemon_on_every_release(version: tuple[int, int]) -> None:
    cls, why, _src = global_rule("AuthInfo", version)
    assert cls is ImpactClass.RESTART_ALL, why
