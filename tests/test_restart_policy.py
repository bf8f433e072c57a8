"""The PR comment and the Slurm role do the same thing for every kind of change.

One restart policy (``clusterforge.render.restart``) is read two ways: ``clusterforge diff`` prints
``impacts`` and the operator's steps (``summarise``), and the Slurm role's filter plugin
(``roles/slurm/filter_plugins/clusterforge_restart.py``) turns it into the handlers each host runs.
Every case below changes one thing of the local example (a spec field, or, where no spec field
reaches it, the two manifests directly), then checks three things against values written by hand:

* the impact classes the diff reports, and its steps;
* the handlers the role's filter returns on the controller, on a compute node the change touches
  and on one it does not (called as Ansible calls it: plain dicts from ``manifest.json``, the names
  of the files whose copy changed on that host);
* that both agree: the daemons the steps restart are the daemons the hosts restart.

Then the filter's fallbacks (no copy of the last install, a file rewritten without a render change,
actions a failed run owed) and one real run of the role's tasks. One module, over 400 lines, because
the case table is the point: every kind of change side by side with what each host does.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from clusterforge import hostlist
from clusterforge.clusterspec import parse_spec
from clusterforge.render import render_cluster
from clusterforge.render.manifest import ConfigRecords, GresRecord, Manifest, NodeRecord
from clusterforge.render.restart import GLOBAL_KEYS, ImpactClass, impacts, policy_version, summarise

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
PLUGIN = ROOT / "roles" / "slurm" / "filter_plugins" / "clusterforge_restart.py"

RESTART_CTLD = ["restart slurmctld"]
RESTART_SLURMD = ["restart slurmd"]
RECONF = ["reconfigure"]
DBD = ["restart slurmdbd"]


def _plugin() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cf_restart_plugin", PLUGIN)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


PLUGIN_MOD = _plugin()


def _base_spec(version: str | None = None) -> dict[str, Any]:
    d = yaml.safe_load((EXAMPLES / "local.yaml").read_text())
    # the cases without a version are 22.05's (the local example's release until it moved to
    # Debian 13 / 24.11); the per-release cases name theirs
    d["os"], d["slurm"]["version"] = "debian-12", "22.05"
    d["monitoring"]["grafana"] = True  # the dashboards too (the example has Grafana off)
    if version:
        d["slurm"]["version"] = version
    return d


def _render(d: dict[str, Any]) -> Manifest:
    return render_cluster(parse_spec(d, "test"), base_dir=EXAMPLES).manifest()


def _group(d: dict[str, Any], name: str) -> dict[str, Any]:
    return next(g for g in d["node_groups"] if g["name"] == name)


# ----------------------------------------------------------------------------- manifest edits
# For what no spec field reaches (a CPU count of a catalog profile, a GRES device line, cgroup.conf,
# a health script): the head manifest is the base one with that record or file changed.


def _bump(m: Manifest, name: str) -> Manifest:
    files = tuple(
        f.model_copy(update={"sha256": hashlib.sha256(f"{f.sha256}+edit".encode()).hexdigest()}) if f.name == name
        else f
        for f in m.files
    )
    assert files != m.files, name
    return m.model_copy(update={"files": files})


def _records(m: Manifest, **update: Any) -> Manifest:
    config: ConfigRecords = m.config.model_copy(update=update)
    return m.model_copy(update={"config": config})


def _node_param(m: Manifest, group: str, key: str, value: str) -> Manifest:
    nodes = tuple(
        NodeRecord(group=r.group, names=r.names, params={**r.params, key: value}) if r.group == group else r
        for r in m.config.nodes
    )
    return _bump(_records(m, nodes=nodes), "slurm/slurm.conf")


def _gres_lines(m: Manifest, group: str, edit: Callable[[list[dict[str, str]]], list[dict[str, str]]]) -> Manifest:
    gres = tuple(
        GresRecord(group=r.group, names=r.names, lines=tuple(edit([dict(x) for x in r.lines]))) if r.group == group
        else r
        for r in m.config.gres
    )
    return _bump(_records(m, gres=gres), "slurm/gres.conf")


def _gres_file(lines: list[dict[str, str]]) -> list[dict[str, str]]:
    lines[0]["File"] = "/dev/nvidia7"
    lines[-1]["File"] = "/dev/nvidia0"
    return lines


def _gres_cores(lines: list[dict[str, str]]) -> list[dict[str, str]]:
    lines[0]["Cores"] = "0-3"
    return lines


def _gres_type(lines: list[dict[str, str]]) -> list[dict[str, str]]:
    return [{**x, "Type": "h200"} for x in lines]


# ----------------------------------------------------------------------------- the cases

Spec = Callable[[dict[str, Any]], object]
Edit = Callable[[Manifest], Manifest]


def _extra(key: str, value: str) -> Spec:
    return lambda d: d["slurm"].setdefault("extra_conf", {}).update({key: value})


def _add_gpu(d: dict[str, Any]) -> None:
    on = _group(d, "gpu")["onprem"]
    on.update(hosts="gpu-[001-003]", addresses="10.79.0.[21-23]")
    on["placement"][0]["hosts"] = "gpu-[001-003]"


def _remove_cpu(d: dict[str, Any]) -> None:
    on = _group(d, "cpu")["onprem"]
    on.update(hosts="cpu-001", addresses="10.79.0.31")
    on["placement"][0]["hosts"] = "cpu-001"


def _move_controller(d: dict[str, Any]) -> None:
    _group(d, "ctl")["onprem"].update(addresses="10.79.0.12")


def _rename_switch(d: dict[str, Any]) -> None:
    d["topology"]["switches"][0]["name"] = "leaf2"
    for g in d["node_groups"]:
        for p in g["onprem"].get("placement", []):
            p["switch"] = "leaf2"


# id: (slurm version, spec change or None, manifest edit or None, expected changed files,
#      impact classes, steps, {host: handlers}); ``in``/``out`` below name the compute node the
#      change touches and one it does not (both the same when it touches all or none).
CASES: dict[str, tuple[Any, ...]] = {
    # slurm.conf globals, one per class of GLOBAL_KEYS (and one unlisted key)
    "global restart-all (AuthAltTypes)": (
        None, _extra("AuthAltTypes", "auth/jwt"), None, ["slurm/slurm.conf"], {"restart-all"},
        ["install", "restart slurmctld", "restart slurmd on cpu-[001-002],gpu-[001-002]"],
        {"ctl": RESTART_CTLD, "gpu-001": RESTART_SLURMD, "cpu-001": RESTART_SLURMD},
    ),
    "global restart-all (AuthInfo from slurm.cred_expire_s)": (
        None, lambda d: d["slurm"].update(cred_expire_s=30), None, ["slurm/slurm.conf"], {"restart-all"},
        ["install", "restart slurmctld", "restart slurmd on cpu-[001-002],gpu-[001-002]"],
        {"ctl": RESTART_CTLD, "gpu-001": RESTART_SLURMD, "cpu-001": RESTART_SLURMD},
    ),
    "global restart-slurmctld (StateSaveLocation)": (
        None, lambda d: d["slurm"].update(state_save_location="/srv/slurmctld"), None, ["slurm/slurm.conf"],
        {"restart-slurmctld"}, ["install", "restart slurmctld"],
        {"ctl": RESTART_CTLD, "gpu-001": [], "cpu-001": []},
    ),
    "global restart-slurmd (SlurmdUser)": (
        None, _extra("SlurmdUser", "root"), None, ["slurm/slurm.conf"], {"restart-slurmd"},
        ["install", "restart slurmd on cpu-[001-002],gpu-[001-002]"],
        {"ctl": [], "gpu-001": RESTART_SLURMD, "cpu-001": RESTART_SLURMD},
    ),
    "global reconfigure (SlurmdTimeout)": (
        None, lambda d: d["slurm"].update(slurmd_timeout_s=60), None, ["slurm/slurm.conf"], {"reconfigure"},
        ["install", "scontrol reconfigure"], {"ctl": RECONF, "gpu-001": [], "cpu-001": []},
    ),
    # NodeName lines
    "node hardware (CPUs of the gpu nodes)": (
        None, None, lambda m: _node_param(m, "gpu", "CPUs", "112"), ["slurm/slurm.conf"], {"restart-slurmctld"},
        ["drain gpu-[001-002]", "stop slurmd on gpu-[001-002]", "install", "restart slurmctld",
         "start slurmd on gpu-[001-002]", "resume gpu-[001-002]"],
        {"ctl": RESTART_CTLD, "gpu-001": RESTART_SLURMD, "cpu-001": []},
    ),
    "node hardware (profile of the cpu nodes)": (
        None, lambda d: _group(d, "cpu")["onprem"].update(profile="m7i.4xlarge"), None,
        ["grafana/cluster-overview.json", "slurm/slurm.conf"],  # the overview names each group's profile
        {"restart-slurmctld", "reconfigure", "none"},  # DefMemPerCPU of the partitions follows the memory
        ["drain cpu-[001-002]", "stop slurmd on cpu-[001-002]", "install", "restart slurmctld",
         "start slurmd on cpu-[001-002]", "resume cpu-[001-002]"],
        {"ctl": RESTART_CTLD, "cpu-001": RESTART_SLURMD, "gpu-001": []},
    ),
    "NodeAddr": (
        None, lambda d: _group(d, "gpu")["onprem"].update(addresses="10.79.0.[23-24]"), None, ["slurm/slurm.conf"],
        {"restart-all"},
        ["install", "restart slurmctld", "restart slurmd on cpu-[001-002],gpu-[001-002]"],
        {"ctl": RESTART_CTLD, "gpu-001": RESTART_SLURMD, "cpu-001": RESTART_SLURMD},
    ),
    "Weight": (
        None, lambda d: _group(d, "gpu").update(weight=20), None, ["slurm/slurm.conf"], {"reconfigure"},
        ["install", "scontrol reconfigure"], {"ctl": RECONF, "gpu-001": [], "cpu-001": []},
    ),
    "Features": (
        None, lambda d: _group(d, "gpu").update(features=["h100", "nvlink"]), None, ["slurm/slurm.conf"],
        {"reconfigure"}, ["install", "scontrol reconfigure"], {"ctl": RECONF, "gpu-001": [], "cpu-001": []},
    ),
    "partition": (
        None, lambda d: d["partitions"][1].update(max_time="2-00:00:00"), None, ["slurm/slurm.conf"],
        {"reconfigure"}, ["install", "scontrol reconfigure"], {"ctl": RECONF, "gpu-001": [], "cpu-001": []},
    ),
    # the node set (the FAQ's procedure: every daemon)
    "node set: add gpu-003": (
        None, _add_gpu, None,
        ["grafana/cluster-overview.json", "grafana/gpus.json", "slurm/gres.conf", "slurm/slurm.conf",
         "slurm/topology.conf"],
        # restart-slurmctld: 22.05's MaxNodeCount, which follows the node count
        {"restart-all", "restart-slurmctld", "restart-slurmd", "reconfigure", "none"},
        ["install", "restart slurmctld", "restart slurmd on cpu-[001-002],gpu-[001-003]"],
        {"ctl": RESTART_CTLD, "gpu-001": RESTART_SLURMD, "gpu-003": RESTART_SLURMD, "cpu-001": RESTART_SLURMD},
    ),
    "node set: remove cpu-002": (
        None, _remove_cpu, None, ["grafana/cluster-overview.json", "slurm/slurm.conf", "slurm/topology.conf"],
        {"restart-all", "restart-slurmctld", "reconfigure", "none"},
        ["drain cpu-002", "stop slurmd on cpu-002", "install", "restart slurmctld", "start slurmd on cpu-002",
         "restart slurmd on cpu-001,gpu-[001-002]", "resume cpu-002"],
        {"ctl": RESTART_CTLD, "gpu-001": RESTART_SLURMD, "cpu-001": RESTART_SLURMD},
    ),
    # the other files
    "gres.conf device lines (same count)": (
        None, None, lambda m: _gres_lines(m, "gpu", _gres_file), ["slurm/gres.conf"], {"restart-slurmd"},
        ["install", "restart slurmd on gpu-[001-002]"], {"ctl": [], "gpu-001": RESTART_SLURMD, "cpu-001": []},
    ),
    "gres.conf one device fewer": (
        None, None, lambda m: _gres_lines(m, "gpu", lambda x: x[:-1]), ["slurm/gres.conf"], {"restart-slurmd"},
        ["drain gpu-[001-002]", "install", "restart slurmd on gpu-[001-002]", "resume gpu-[001-002]"],
        {"ctl": [], "gpu-001": RESTART_SLURMD, "cpu-001": []},
    ),
    "cgroup.conf": (
        None, None, lambda m: _bump(m, "slurm/cgroup.conf"), ["slurm/cgroup.conf"], {"restart-slurmd"},
        ["install", "restart slurmd on cpu-[001-002],gpu-[001-002]"],
        {"ctl": [], "gpu-001": RESTART_SLURMD, "cpu-001": RESTART_SLURMD},
    ),
    "topology.conf": (
        None, _rename_switch, None, ["slurm/topology.conf"], {"reconfigure"}, ["install", "scontrol reconfigure"],
        {"ctl": RECONF, "gpu-001": [], "cpu-001": []},
    ),
    "topology.yaml (25.05)": (
        "25.05", _rename_switch, None, ["slurm/topology.yaml"], {"reconfigure"}, ["install", "scontrol reconfigure"],
        {"ctl": RECONF, "gpu-001": [], "cpu-001": []},
    ),
    "slurmdbd.conf": (
        None, lambda d: d["accounting"].update(database="acct2"), None, ["slurm/slurmdbd.conf"],
        {"restart-slurmdbd"}, ["install", "restart slurmdbd"], {"ctl": DBD, "gpu-001": [], "cpu-001": []},
    ),
    "nccl": (
        None, lambda d: d["gpu_stack"].update(nccl="2.27.3"), None, ["nccl/gpu.conf"], {"none"}, ["no daemon action"],
        {"ctl": [], "gpu-001": [], "cpu-001": []},
    ),
    "env": (
        None, None, lambda m: _bump(m, "env/gpu.sh"), ["env/gpu.sh"], {"none"}, ["no daemon action"],
        {"ctl": [], "gpu-001": [], "cpu-001": []},
    ),
    "jobs": (
        None, None, lambda m: _bump(m, "jobs/env.sh"), ["jobs/env.sh"], {"none"}, ["no daemon action"],
        {"ctl": [], "gpu-001": [], "cpu-001": []},
    ),
    "health": (
        None, None, lambda m: _bump(m, "health/gpu.sh"), ["health/gpu.sh"], {"none"}, ["no daemon action"],
        {"ctl": [], "gpu-001": [], "cpu-001": []},
    ),
    "prometheus": (
        None, None, lambda m: _bump(m, "prometheus/alerts.yml"), ["prometheus/alerts.yml"], {"none"},
        ["no daemon action"], {"ctl": [], "gpu-001": [], "cpu-001": []},
    ),
    "alertmanager": (
        None, None, lambda m: _bump(m, "alertmanager/alertmanager.yml"), ["alertmanager/alertmanager.yml"], {"none"},
        ["no daemon action"], {"ctl": [], "gpu-001": [], "cpu-001": []},
    ),
    # a dashboard: Grafana's file provider rescans its folder
    "grafana": (
        None, None, lambda m: _bump(m, "grafana/gpus.json"), ["grafana/gpus.json"], {"none"},
        ["no daemon action"], {"ctl": [], "gpu-001": [], "cpu-001": []},
    ),
    "dcgm": (
        None, None, lambda m: _bump(m, "dcgm/counters.csv"), ["dcgm/counters.csv"], {"none"},
        ["no daemon action"], {"ctl": [], "gpu-001": [], "cpu-001": []},
    ),
    # slurmd runs the prolog/epilog folder anew for every job: nothing to restart
    "prolog": (
        None, None, lambda m: _bump(m, "slurm/prolog.d/dcgm-job-map.sh"), ["slurm/prolog.d/dcgm-job-map.sh"],
        {"none"}, ["no daemon action"], {"ctl": [], "gpu-001": [], "cpu-001": []},
    ),
    "epilog": (
        None, None, lambda m: _bump(m, "slurm/epilog.d/dcgm-job-map.sh"), ["slurm/epilog.d/dcgm-job-map.sh"],
        {"none"}, ["no daemon action"], {"ctl": [], "gpu-001": [], "cpu-001": []},
    ),
    "comments only (slurm.conf bytes, no record)": (
        None, None, lambda m: _bump(m, "slurm/slurm.conf"), ["slurm/slurm.conf"], {"none"}, ["no daemon action"],
        {"ctl": [], "gpu-001": [], "cpu-001": []},
    ),
    # gres.conf(5) 22.05 .. 26.05: "A restart of the slurmctld is needed for changes to the Cores option"
    "gres.conf Cores": (
        None, None, lambda m: _gres_lines(m, "gpu", _gres_cores), ["slurm/gres.conf"], {"restart-slurmctld"},
        ["install", "restart slurmctld", "restart slurmd on gpu-[001-002]"],
        {"ctl": RESTART_CTLD, "gpu-001": RESTART_SLURMD, "cpu-001": []},
    ),
    # gres.conf(5)@22.05: Type changes need slurmctld and slurmd restarted
    "gres.conf Type": (
        None, None, lambda m: _gres_lines(m, "gpu", _gres_type), ["slurm/gres.conf"], {"restart-slurmctld"},
        ["install", "restart slurmctld", "restart slurmd on gpu-[001-002]"],
        {"ctl": RESTART_CTLD, "gpu-001": RESTART_SLURMD, "cpu-001": []},
    ),
    # FAQ (controller) @slurm-24-11-0-1: "(Slurm 23.02 and older) Drain the cluster of running jobs"
    "SlurmctldHost (22.05: drain everything)": (
        None, _move_controller, None, ["slurm/slurm.conf"], {"restart-all"},
        ["drain cpu-[001-002],gpu-[001-002]", "stop slurmd on cpu-[001-002],gpu-[001-002]", "install",
         "restart slurmctld", "start slurmd on cpu-[001-002],gpu-[001-002]",
         "resume cpu-[001-002],gpu-[001-002]"],
        {"ctl": RESTART_CTLD, "gpu-001": RESTART_SLURMD, "cpu-001": RESTART_SLURMD},
    ),
    # ---- 23.11: reconfigure starts new slurmctld and slurmd processes (scontrol(1)@slurm-24-05-0-1)
    "23.11 SlurmctldHost (no drain)": (
        "23.11", _move_controller, None, ["slurm/slurm.conf"], {"restart-all"},
        ["install", "restart slurmctld", "restart slurmd on cpu-[001-002],gpu-[001-002]"],
        {"ctl": RESTART_CTLD, "gpu-001": RESTART_SLURMD, "cpu-001": RESTART_SLURMD},
    ),
    "23.11 plugin key by reconfigure (PluginDir)": (
        "23.11", _extra("PluginDir", "/opt/slurm/lib/slurm"), None, ["slurm/slurm.conf"], {"reconfigure"},
        ["install", "scontrol reconfigure"], {"ctl": RECONF, "gpu-001": [], "cpu-001": []},
    ),
    "23.11 authentication still restarts (AuthAltTypes)": (
        "23.11", _extra("AuthAltTypes", "auth/jwt"), None, ["slurm/slurm.conf"], {"restart-all"},
        ["install", "restart slurmctld", "restart slurmd on cpu-[001-002],gpu-[001-002]"],
        {"ctl": RESTART_CTLD, "gpu-001": RESTART_SLURMD, "cpu-001": RESTART_SLURMD},
    ),
    "23.11 StateSaveLocation still restarts slurmctld": (
        "23.11", lambda d: d["slurm"].update(state_save_location="/srv/slurmctld"), None, ["slurm/slurm.conf"],
        {"restart-slurmctld"}, ["install", "restart slurmctld"], {"ctl": RESTART_CTLD, "gpu-001": [], "cpu-001": []},
    ),
    "23.11 gres.conf device lines by reconfigure": (
        "23.11", None, lambda m: _gres_lines(m, "gpu", _gres_file), ["slurm/gres.conf"], {"reconfigure"},
        ["install", "scontrol reconfigure"], {"ctl": RECONF, "gpu-001": [], "cpu-001": []},
    ),
    "23.11 gres.conf one device fewer (drain, reconfigure)": (
        "23.11", None, lambda m: _gres_lines(m, "gpu", lambda x: x[:-1]), ["slurm/gres.conf"], {"reconfigure"},
        ["drain gpu-[001-002]", "install", "scontrol reconfigure", "resume gpu-[001-002]"],
        {"ctl": RECONF, "gpu-001": [], "cpu-001": []},
    ),
    "23.11 gres.conf Type by reconfigure": (
        "23.11", None, lambda m: _gres_lines(m, "gpu", _gres_type), ["slurm/gres.conf"], {"reconfigure"},
        ["install", "scontrol reconfigure"], {"ctl": RECONF, "gpu-001": [], "cpu-001": []},
    ),
    "23.11 gres.conf Cores still restarts slurmctld": (
        "23.11", None, lambda m: _gres_lines(m, "gpu", _gres_cores), ["slurm/gres.conf"], {"restart-slurmctld"},
        ["install", "restart slurmctld", "restart slurmd on gpu-[001-002]"],
        {"ctl": RESTART_CTLD, "gpu-001": RESTART_SLURMD, "cpu-001": []},
    ),
    "23.11 cgroup.conf by reconfigure": (
        "23.11", None, lambda m: _bump(m, "slurm/cgroup.conf"), ["slurm/cgroup.conf"], {"reconfigure"},
        ["install", "scontrol reconfigure"], {"ctl": RECONF, "gpu-001": [], "cpu-001": []},
    ),
    # the FAQ's restart procedure for the node set holds up to 24.05 (faq.shtml@slurm-24-11-0-1)
    "24.05 node set: add gpu-003 (still the FAQ's restart)": (
        "24.05", _add_gpu, None,
        ["grafana/cluster-overview.json", "grafana/gpus.json", "slurm/gres.conf", "slurm/slurm.conf",
         "slurm/topology.conf"],
        {"restart-all", "reconfigure", "none"},
        ["install", "restart slurmctld", "restart slurmd on cpu-[001-002],gpu-[001-003]"],
        {"ctl": RESTART_CTLD, "gpu-001": RESTART_SLURMD, "gpu-003": RESTART_SLURMD, "cpu-001": RESTART_SLURMD},
    ),
    "24.05 node hardware (still restarts)": (
        "24.05", None, lambda m: _node_param(m, "gpu", "CPUs", "112"), ["slurm/slurm.conf"], {"restart-slurmctld"},
        ["drain gpu-[001-002]", "stop slurmd on gpu-[001-002]", "install", "restart slurmctld",
         "start slurmd on gpu-[001-002]", "resume gpu-[001-002]"],
        {"ctl": RESTART_CTLD, "gpu-001": RESTART_SLURMD, "cpu-001": []},
    ),
    # ---- 24.11: reconfigure applies node additions, removals and changes (faq.shtml, slurm.conf(5))
    "24.11 node set: add gpu-003 by reconfigure": (
        "24.11", _add_gpu, None,
        ["grafana/cluster-overview.json", "grafana/gpus.json", "slurm/gres.conf", "slurm/slurm.conf", "slurm/topology.conf"], {"reconfigure", "none"},
        ["install", "scontrol reconfigure"],
        {"ctl": RECONF, "gpu-001": [], "gpu-003": [], "cpu-001": []},
    ),
    "24.11 node set: remove cpu-002 (drain, reconfigure)": (
        "24.11", _remove_cpu, None, ["grafana/cluster-overview.json", "slurm/slurm.conf", "slurm/topology.conf"],
        {"reconfigure", "none"},
        ["drain cpu-002", "install", "scontrol reconfigure", "resume cpu-002"],
        {"ctl": RECONF, "gpu-001": [], "cpu-001": []},
    ),
    "24.11 node hardware (drain, reconfigure)": (
        "24.11", None, lambda m: _node_param(m, "gpu", "CPUs", "112"), ["slurm/slurm.conf"], {"reconfigure"},
        ["drain gpu-[001-002]", "install", "scontrol reconfigure", "resume gpu-[001-002]"],
        {"ctl": RECONF, "gpu-001": [], "cpu-001": []},
    ),
    "24.11 NodeAddr by reconfigure": (
        "24.11", lambda d: _group(d, "gpu")["onprem"].update(addresses="10.79.0.[23-24]"), None,
        ["slurm/slurm.conf"], {"reconfigure"}, ["install", "scontrol reconfigure"],
        {"ctl": RECONF, "gpu-001": [], "cpu-001": []},
    ),
    "26.05 node set: remove cpu-002 (drain, reconfigure)": (
        "26.05", _remove_cpu, None, ["grafana/cluster-overview.json", "slurm/slurm.conf", "slurm/topology.yaml"],
        {"reconfigure", "none"},
        ["drain cpu-002", "install", "scontrol reconfigure", "resume cpu-002"],
        {"ctl": RECONF, "gpu-001": [], "cpu-001": []},
    ),
    "26.05 authentication still restarts (AuthAltTypes)": (
        "26.05", _extra("AuthAltTypes", "auth/jwt"), None, ["slurm/slurm.conf"], {"restart-all"},
        ["install", "restart slurmctld", "restart slurmd on cpu-[001-002],gpu-[001-002]"],
        {"ctl": RESTART_CTLD, "gpu-001": RESTART_SLURMD, "cpu-001": RESTART_SLURMD},
    ),
}

# how a step of ``summarise`` reads, by the short names used above ({} is the hostlist)
STEP_PATTERNS = {
    "install": r"install the new configs \(ansible-playbook playbooks/site\.yml\)",
    "no daemon action": r"install the new configs; no daemon action .*",
    "drain": r'scontrol update NodeName={} State=DRAIN Reason="config change" and wait for their jobs',
    "stop slurmd on": r"stop slurmd on {} \(a node must not re-register while slurmctld restarts: .*\)",
    "resume": r"scontrol update NodeName={} State=RESUME \(nodes that still exist\)",
}


def _step_regex(short: str) -> str:
    if short in STEP_PATTERNS:
        return STEP_PATTERNS[short]
    for key, full in STEP_PATTERNS.items():
        if short.startswith(key + " "):
            return full.replace("{}", re.escape(short[len(key) + 1:]))
    return re.escape(short)


def _hosts(m: Manifest) -> dict[str, tuple[str, bool, bool, bool]]:
    """Host -> (node group, controller, compute, dbd) for the local example's layout."""
    out = {"ctl": ("ctl", True, False, True), "login": ("login", False, False, False)}
    for r in m.config.nodes:
        for n in hostlist.expand(r.names):
            out[n] = (r.group, False, True, False)
    return out


def _changed_on(host_group: str, old: Manifest | None, new: Manifest) -> list[str]:
    """The files the role's copy tasks report changed on a host of this group."""
    return [
        f.name for f in new.files
        if host_group in f.node_groups and (old is None or old.file(f.name) is None
                                            or old.file(f.name).sha256 != f.sha256)  # type: ignore[union-attr]
    ]


def _role_actions(old: Manifest | None, new: Manifest, host: str, hosts: dict[str, tuple[str, bool, bool, bool]],
                  *, installed: Manifest | str | None = "old") -> list[str]:
    group, controller, compute, dbd = hosts[host]
    copy_on_host = old if installed == "old" else installed
    result = PLUGIN_MOD.slurm_actions(
        json.loads(copy_on_host.to_text()) if isinstance(copy_on_host, Manifest) else "",
        json.loads(new.to_text()),
        _changed_on(group, old, new),
        host=host, controller=controller, compute=compute, dbd=dbd,
        host_files=[f.name for f in new.files if group in f.node_groups],
    )
    assert isinstance(result, list)
    return result


@functools.cache
def _base(version: str | None) -> Manifest:
    return _render(_base_spec(version))


@pytest.fixture(scope="module")
def bases() -> dict[str | None, Manifest]:
    return {None: _base(None), "25.05": _base("25.05")}


def _sides(case: tuple[Any, ...], bases: dict[str | None, Manifest]) -> tuple[Manifest, Manifest]:
    version, spec_change, edit = case[:3]
    base = _base(version)
    if spec_change is not None:
        d = _base_spec(version)
        spec_change(d)
        head = _render(d)
    else:
        head = edit(base)
    return base, head


@pytest.mark.parametrize("case_id", list(CASES))
def test_diff_and_role_agree(case_id: str, bases: dict[str | None, Manifest]) -> None:
    case = CASES[case_id]
    files, classes, steps, expected = case[3:]
    base, head = _sides(case, bases)
    found = impacts(base, head)
    assert sorted({i.file for i in found}) == files
    assert {i.cls.value for i in found} == classes
    ops = summarise(found)
    assert len(ops.steps) == len(steps), ops.steps
    for short, step in zip(steps, ops.steps, strict=True):
        assert re.fullmatch(_step_regex(short), step), (short, step)

    hosts = _hosts(head)
    role = {h: _role_actions(base, head, h, hosts) for h in hosts}
    for host, want in expected.items():
        assert role[host] == want, (host, role[host])
    assert role["login"] == []  # clients read slurm.conf per command

    # the PR comment's steps and the hosts' handlers restart the same daemons on the same hosts
    step_slurmd = set()
    for step in ops.steps:
        m = re.fullmatch(r"(?:re)?start slurmd on (\S+)", step)
        if m:
            step_slurmd |= set(hostlist.expand(m.group(1)))
    role_slurmd = {h for h, acts in role.items() if "restart slurmd" in acts}
    assert role_slurmd == step_slurmd & set(hosts)  # a removed node is not configured any more
    assert ("restart slurmctld" in role["ctl"]) == ("restart slurmctld" in ops.steps)
    assert ("reconfigure" in role["ctl"]) == ("scontrol reconfigure" in ops.steps)
    assert ("restart slurmdbd" in role["ctl"]) == ("restart slurmdbd" in ops.steps)
    # and each impact line of the comment names the same daemons
    for i in found:
        acts = " ".join(a for a in i.actions if not a.startswith("drain "))  # a drain comes first, if any
        if i.cls is ImpactClass.RECONFIGURE:
            assert acts == "scontrol reconfigure"
        if i.cls is ImpactClass.NONE:
            assert acts == "no action"


def test_every_global_key_class_has_a_case() -> None:
    """The cases above cover every class a slurm.conf global key can have."""
    classes = {cls for cls, _why in GLOBAL_KEYS.values()} | {ImpactClass.RECONFIGURE}
    covered = {ImpactClass(c) for case_id, case in CASES.items() if case_id.startswith("global ") for c in case[4]}
    assert classes == covered


def test_every_rendered_file_kind_has_a_case(bases: dict[str | None, Manifest]) -> None:
    """Every Slurm file by name, every other folder (nccl/, env/, health/, prometheus/, grafana/) by one file."""

    def kind(name: str) -> str:
        return name if name.startswith("slurm/") else name.split("/")[0] + "/"

    rendered = {kind(f.name) for m in bases.values() for f in m.files}
    covered = {kind(f) for case in CASES.values() for f in case[3]}
    assert rendered == covered


# ----------------------------------------------------------------------------- per release
# The same change, every target release, classes written by hand from the gate's sources
# (render/versions.py); tests/test_versions.py names these as the gates' behaviour tests.

RELEASES = ("22.05", "23.02", "23.11", "24.05", "24.11", "25.05", "25.11", "26.05")


def _classes(version: str, spec_change: Spec | None = None, edit: Edit | None = None) -> dict[str, str]:
    """(file, subject) -> class of the change on ``version``."""
    base = _base(version)
    if spec_change is not None:
        d = _base_spec(version)
        spec_change(d)
        head = _render(d)
    else:
        assert edit is not None
        head = edit(base)
    return {f"{i.file} {i.subject}": i.cls.value for i in impacts(base, head)}


def test_reconfigure_restarts_daemons_from_2311() -> None:
    """23.11: reconfigure starts new daemons, so it loads plugins, reads gres.conf and cgroup.conf;
    TCP ports and authentication still need restarts (scontrol(1)@slurm-24-05-0-1)."""
    plugin = {"22.05": "restart-all", "23.02": "restart-all"} | dict.fromkeys(RELEASES[2:], "reconfigure")
    cgroup = {"22.05": "restart-slurmd", "23.02": "restart-slurmd"} | dict.fromkeys(RELEASES[2:], "reconfigure")
    gres = {"22.05": "restart-slurmd", "23.02": "restart-slurmd"} | dict.fromkeys(RELEASES[2:], "reconfigure")
    for v in RELEASES:
        assert _classes(v, _extra("PluginDir", "/opt/slurm/lib/slurm")) == {
            "slurm/slurm.conf PluginDir": plugin[v]}, v
        assert _classes(v, _extra("AuthAltTypes", "auth/jwt")) == {"slurm/slurm.conf AuthAltTypes": "restart-all"}, v
        assert _classes(v, edit=lambda m: _bump(m, "slurm/cgroup.conf")) == {
            "slurm/cgroup.conf whole file": cgroup[v]}, v
        assert _classes(v, edit=lambda m: _gres_lines(m, "gpu", _gres_file)) == {
            "slurm/gres.conf NodeName=gpu-[001-002]": gres[v]}, v
        # Cores: the same sentence in gres.conf(5) from 22.05 through 26.05
        assert _classes(v, edit=lambda m: _gres_lines(m, "gpu", _gres_cores)) == {
            "slurm/gres.conf NodeName=gpu-[001-002]": "restart-slurmctld"}, v
    d = _base_spec("24.05")
    _extra("PluginDir", "/opt/x")(d)
    (i,) = impacts(_base("24.05"), _render(d))
    assert i.why.startswith("Slurm 24.05: reconfigure starts new daemons") and "@slurm-24-05-0-1" in i.source


def test_node_changes_by_reconfigure_from_2411() -> None:
    """Adding, removing or changing nodes: the FAQ's restart of every daemon up to 24.05, scontrol
    reconfigure from 24.11 (faq.shtml add_nodes/rem_nodes, slurm.conf(5)@slurm-24-11-0-1)."""
    by_reconf = dict.fromkeys(RELEASES[:4], False) | dict.fromkeys(RELEASES[4:], True)
    for v in RELEASES:
        add = _classes(v, _add_gpu)
        assert add["slurm/slurm.conf NodeName (node set)"] == ("reconfigure" if by_reconf[v] else "restart-all"), v
        hw = _classes(v, edit=lambda m: _node_param(m, "gpu", "CPUs", "112"))
        assert hw == {"slurm/slurm.conf NodeName=gpu-[001-002]": "reconfigure" if by_reconf[v]
                      else "restart-slurmctld"}, v
    base = _base("24.11")
    d = _base_spec("24.11")
    _remove_cpu(d)
    (node_set,) = [i for i in impacts(base, _render(d)) if i.subject == "NodeName (node set)"]
    assert node_set.why == ("Slurm 24.11: scontrol reconfigure applies node additions and removals "
                            "(drain the removed nodes first: their jobs are lost)")
    assert node_set.drain_nodes == "cpu-002" and node_set.actions == ["drain cpu-002", "scontrol reconfigure"]
    base = _base("22.05")
    d = _base_spec("22.05")
    _remove_cpu(d)
    (node_set,) = [i for i in impacts(base, _render(d)) if i.subject == "NodeName (node set)"]
    assert node_set.why.startswith("Slurm 22.05: every daemon holds the node table: the FAQ's procedure restarts")
    assert node_set.actions == ["drain cpu-002", "restart slurmctld", "restart slurmd on cpu-[001-002],gpu-[001-002]"]


def test_moving_the_controller_drains_before_2311() -> None:
    """SlurmctldHost restarts every daemon in every release; before 23.11 running steps keep
    reporting to the old controller, so the FAQ drains the cluster first."""
    for v in RELEASES:
        (i,) = impacts(_base(v), _render(_move_controller_spec(v)))
        assert (i.subject, i.cls) == ("SlurmctldHost", ImpactClass.RESTART_ALL), v
        assert i.drain_nodes == ("cpu-[001-002],gpu-[001-002]" if v in ("22.05", "23.02") else ""), v


def _move_controller_spec(version: str) -> dict[str, Any]:
    d = _base_spec(version)
    _move_controller(d)
    return d


def test_a_release_change_restarts_every_daemon() -> None:
    """A new release is new binaries: slurmdbd, slurmctld, every slurmd (upgrade guide), whatever
    else changed; the installed release (the running daemons') classifies the rest."""
    old, new = _base("22.05"), _base("24.11")
    found = impacts(old, new)
    release = [i for i in found if i.subject == "slurm_version"]
    assert [(i.file, i.change, i.cls, i.slurmd_nodes) for i in release] == [
        ("(Slurm release)", "22.05 -> 24.11", ImpactClass.RESTART_ALL, "cpu-[001-002],gpu-[001-002]")
    ]
    assert policy_version(old, new) == (22, 5) and policy_version(None, new) == (24, 11)
    hosts = _hosts(new)
    assert _role_actions(old, new, "ctl", hosts) == ["restart slurmdbd", "restart slurmctld"]
    assert _role_actions(old, new, "gpu-001", hosts) == RESTART_SLURMD


def test_the_pr_comment_states_the_release_rule() -> None:
    """The steps end with what a reconfigure takes on the target release, in the PR comment too."""
    from clusterforge.diff.report import DiffReport, FileDiff, SpecDiff, to_markdown

    conf = FileDiff("slurm/slurm.conf", "changed", "/etc/slurm/slurm.conf", ("ctl",), "-a\n+b\n", 1, 1)

    rules = {}
    for v in ("22.05", "23.11", "24.11"):
        d = _base_spec(v)
        _add_gpu(d)
        base, head = _base(v), _render(d)
        found = impacts(base, head)
        ops = summarise(found, version=policy_version(base, head))
        rules[v] = ops.rule
        spec = SpecDiff("examples/local.yaml", "main", "pr", "modified", files=(conf,), impacts=tuple(found),
                        operations=ops)
        md = to_markdown(DiffReport("main", "pr", (spec,)))
        assert f"*{ops.rule}*" in md, v
    assert rules["22.05"].startswith("Slurm 22.05: scontrol reconfigure makes the running daemons re-read "
                                     "slurm.conf; plugins, TCP ports, authentication and adding or removing nodes "
                                     "restart slurmctld and all slurmd")
    assert rules["23.11"].startswith("Slurm 23.11: scontrol reconfigure starts new slurmctld and slurmd processes "
                                     "and applies plugin, GRES and cgroup changes; adding, removing or changing "
                                     "nodes still restarts slurmctld and all slurmd")
    assert rules["24.11"].startswith("Slurm 24.11: scontrol reconfigure starts new slurmctld and slurmd processes "
                                     "and applies plugin, GRES, cgroup and node changes, node additions and "
                                     "removals included")
    assert summarise([]).rule == ""


# ----------------------------------------------------------------------------- the role's fallbacks


def test_without_a_copy_of_the_last_install_each_file_rule_applies(bases: dict[str | None, Manifest]) -> None:
    """First run, or a host configured before the role kept the copy: the file-level rule of each
    changed file (``on_change``), which for slurm.conf restarts slurmctld and every slurmd."""
    base = bases[None]
    d = _base_spec()
    _group(d, "gpu").update(weight=20)
    head = _render(d)
    hosts = _hosts(head)
    got = {h: _role_actions(base, head, h, hosts, installed=None) for h in ("ctl", "gpu-001", "cpu-001", "login")}
    assert got == {"ctl": RESTART_CTLD, "gpu-001": RESTART_SLURMD, "cpu-001": RESTART_SLURMD, "login": []}
    # an unreadable copy (another clusterforge's format) is the same as none
    old = json.loads(base.to_text()) | {"format": 1}
    acts = PLUGIN_MOD.slurm_actions(old, json.loads(head.to_text()), ["slurm/slurm.conf"], host="ctl",
                                    controller=True, compute=False, dbd=True)
    assert acts == RESTART_CTLD
    # a first install of everything on the controller: slurmdbd, slurmctld (reconfigure is moot)
    first = PLUGIN_MOD.slurm_plan("", json.loads(base.to_text()), _changed_on("ctl", None, base), host="ctl",
                                  controller=True, compute=False, dbd=True)
    assert list(first) == ["restart slurmdbd", "restart slurmctld"]
    assert any("no copy of the last install" in r for r in first["restart slurmctld"])


def test_a_file_rewritten_without_a_render_change_gets_its_file_rule(bases: dict[str | None, Manifest]) -> None:
    """Same hash in both manifests but the role rewrote the file: it was edited on the host, or a
    secret filled into it changed (slurmdbd.conf's password comes from Vault, not the render)."""
    m = json.loads(bases[None].to_text())
    acts = PLUGIN_MOD.slurm_plan(m, m, ["slurm/slurmdbd.conf"], host="ctl", controller=True, compute=False, dbd=True)
    assert list(acts) == DBD and "secret changed" in acts["restart slurmdbd"][0]
    assert PLUGIN_MOD.slurm_actions(m, m, ["slurm/cgroup.conf"], host="gpu-001", controller=False, compute=True,
                                    dbd=False) == RESTART_SLURMD
    # nothing changed, nothing to do (the second run of the e2e test)
    assert PLUGIN_MOD.slurm_actions(m, m, [], host="ctl", controller=True, compute=False, dbd=True,
                                    host_files=[f["name"] for f in m["files"]]) == []


def test_actions_a_failed_run_owed_are_run_by_the_next(bases: dict[str | None, Manifest]) -> None:
    """A run installed the files and stopped before its handlers (the copy is written after them):
    the next run changes no file, but the copy still differs from the render, so the actions run."""
    base = bases[None]
    d = _base_spec()
    _group(d, "gpu").update(weight=20)
    head = _render(d)
    old, new = json.loads(base.to_text()), json.loads(head.to_text())
    ctl_files = [f.name for f in head.files if "ctl" in f.node_groups]
    assert PLUGIN_MOD.slurm_actions(old, new, [], host="ctl", controller=True, compute=False, dbd=True,
                                    host_files=ctl_files) == RECONF


def test_the_plugin_takes_text_or_parsed_manifests(bases: dict[str | None, Manifest]) -> None:
    """The role passes the copy it last installed as text (its read of the host) and the render's manifest parsed (from_json)."""
    d = _base_spec()
    _group(d, "gpu").update(weight=20)
    head = _render(d)
    kw = {"host": "ctl", "controller": True, "compute": False, "dbd": True}
    assert PLUGIN_MOD.slurm_actions(bases[None].to_text(), json.loads(head.to_text()), ["slurm/slurm.conf"],
                                    **kw) == RECONF
    with pytest.raises(PLUGIN_MOD.AnsibleFilterError, match="not in the render's manifest"):
        PLUGIN_MOD.slurm_actions("", head.to_text(), ["slurm/nope.conf"], **kw)
    with pytest.raises(PLUGIN_MOD.AnsibleFilterError, match="format"):
        PLUGIN_MOD.slurm_actions("", json.loads(head.to_text()) | {"format": 1}, [], **kw)


def test_the_manifest_copy_holds_no_secret(bases: dict[str | None, Manifest]) -> None:
    """The role keeps manifest.json on every host (0644): it names secrets, never holds one."""
    text = bases[None].to_text()
    assert "slurmdbd_storage_pass" in text  # the name, in secret_refs
    assert "StoragePass" not in text and "SECRET:" not in text


# ----------------------------------------------------------------------------- the real role

# "Reload systemd" first: a changed RequiresMountsFor drop-in (the state's file system) must be
# loaded before any restart
HANDLER_ORDER = [
    "Reload systemd", "Restart mariadb", "Restart slurmdbd", "Restart slurmctld", "Reconfigure slurm", "Restart slurmd",
]


def _handler_topics() -> list[str]:
    handlers = yaml.safe_load((ROOT / "roles" / "slurm" / "handlers" / "main.yml").read_text())
    topics: list[str] = []
    for h in handlers:
        t = h.get("listen", h["name"])
        if t not in topics:
            topics.append(t)
    return topics


def _install_render(m: Manifest, files: dict[str, str], folder: Path, root: Path, user: str) -> None:
    """A render folder whose manifest puts every file and Slurm path under ``root`` (the role's
    tasks then write there, not to this machine's /etc)."""
    def at(p: str) -> str:
        return str(root) + p

    layout = m.slurm
    dbd = layout.slurmdbd.model_copy(update={"log_file": at(layout.slurmdbd.log_file)}) if layout.slurmdbd else None
    moved = m.model_copy(update={
        "files": tuple(f.model_copy(update={"node_path": at(f.node_path), "owner": user if f.owner != "root" else "root",
                                            "group": user if f.group != "root" else "root"}) for f in m.files),
        "slurm": layout.model_copy(update={
            "user": user, "state_save_location": at(layout.state_save_location),
            "slurmd_spool_dir": at(layout.slurmd_spool_dir), "slurmctld_log_file": at(layout.slurmctld_log_file),
            "slurmd_log_file": at(layout.slurmd_log_file), "slurmdbd": dbd,
        }),
    })
    if folder.exists():
        import shutil

        shutil.rmtree(folder)
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    (folder / "manifest.json").write_text(moved.to_text())


@pytest.mark.skipif(not __import__("shutil").which("ansible-playbook"), reason="ansible-core is not installed")
def test_the_role_notifies_the_handlers_the_policy_names(tmp_path: Path) -> None:
    """The slurm role's real tasks (tasks/config.yml, then the handlers, then tasks/installed.yml)
    on two local hosts (controller with slurmdbd, a cpu node) whose files go under a temporary
    root; the handlers are replaced by recorders of the same names and order. Two runs (each takes
    ~13 s on a 2-core machine): the first install, then a Weight change plus a slurmd-only key.
    Every other case is the filter's, above; the e2e test runs the real handlers and a second
    configure that changes nothing."""
    import getpass
    import os
    import pwd
    import shutil
    import subprocess
    import sys

    assert _handler_topics() == HANDLER_ORDER
    try:
        user = pwd.getpwnam("slurm").pw_name
    except KeyError:
        user = getpass.getuser()
    roles = tmp_path / "roles"
    shutil.copytree(ROOT / "roles" / "slurm", roles / "slurm")
    log = tmp_path / "handlers.log"
    (roles / "slurm" / "handlers" / "main.yml").write_text(yaml.safe_dump([
        {"name": t, "ansible.builtin.shell": f"echo '{{{{ inventory_hostname }}}} {t}' >> {log}", "changed_when": True}
        for t in HANDLER_ORDER
    ], sort_keys=False))
    hosts = {"ctl": "ctl", "cpu-001": "cpu"}
    inventory = {"all": {
        "vars": {
            "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
            "clusterforge_cluster_name": "local", "clusterforge_service_manager": "direct",
            "clusterforge_accounting": {"enabled": True, "storage_host": "ctl", "database": "slurm_acct_db",
                                        "password_secret": "slurmdbd_storage_pass"},
            "clusterforge_secrets": {"slurmdbd_storage_pass": "unit-test-pass"},
        },
        "hosts": {h: {"clusterforge_node_group": g, "clusterforge_manifest_dir": str(tmp_path / h / "render")}
                  for h, g in hosts.items()},
        "children": {"slurm_controller": {"hosts": {"ctl": {}}}, "slurm_dbd": {"hosts": {"ctl": {}}},
                     "slurm_compute": {"hosts": {"cpu-001": {}}}},
    }}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(yaml.safe_dump([{
        "name": "Slurm role config tasks", "hosts": "all", "gather_facts": False,
        "tasks": [
            {"name": "Config", "ansible.builtin.import_role": {"name": "slurm", "tasks_from": "config.yml"}},
            {"name": "Handlers", "ansible.builtin.meta": "flush_handlers"},
            {"name": "Installed", "ansible.builtin.import_role": {"name": "slurm", "tasks_from": "installed.yml"}},
        ],
    }], sort_keys=False))
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_ROLES_PATH": str(roles),
           "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"}

    outputs: list[str] = []

    def run(spec: dict[str, Any]) -> tuple[dict[str, list[str]], dict[str, int]]:
        result = render_cluster(parse_spec(spec, "test"), base_dir=EXAMPLES)
        texts = {name: f.content for name, f in result.files.items()}
        for h in hosts:
            (tmp_path / h / "root" / "usr" / "local" / "sbin").mkdir(parents=True, exist_ok=True)  # health script
            (tmp_path / h / "root" / "etc" / "profile.d").mkdir(parents=True, exist_ok=True)  # job environment
            _install_render(result.manifest(), texts, tmp_path / h / "render", tmp_path / h / "root", user)
        log.unlink(missing_ok=True)
        p = subprocess.run(["ansible-playbook", "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")],
                           capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env, check=False)
        assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
        outputs.append(p.stdout)
        ran: dict[str, list[str]] = {h: [] for h in hosts}
        for line in log.read_text().splitlines() if log.exists() else []:
            h, topic = line.split(" ", 1)
            ran[h].append(topic)
        changed = {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)", p.stdout, re.M)}
        return ran, changed

    spec = _base_spec()
    ran, _ = run(spec)  # first install: no copy on the hosts, each file's own rule
    assert ran == {"ctl": ["Restart slurmdbd", "Restart slurmctld"], "cpu-001": ["Restart slurmd"]}
    copy_on_ctl = tmp_path / "ctl" / "root" / "etc" / "slurm" / ".clusterforge-manifest.json"
    assert copy_on_ctl.read_text() == (tmp_path / "ctl" / "render" / "manifest.json").read_text()
    assert oct(copy_on_ctl.stat().st_mode & 0o777) == "0o644"
    dbd_conf = tmp_path / "ctl" / "root" / "etc" / "slurm" / "slurmdbd.conf"
    assert "StoragePass=unit-test-pass" in dbd_conf.read_text()
    assert (oct(dbd_conf.stat().st_mode & 0o777), pwd.getpwuid(dbd_conf.stat().st_uid).pw_name) == ("0o600", user)

    # a Weight (reconfigure) and a slurmd-only key (SlurmdUser): the controller only reconfigures
    # (the file-name rule restarted slurmctld for it), the node restarts its slurmd
    _group(spec, "gpu").update(weight=20)
    spec["slurm"].setdefault("extra_conf", {})["SlurmdUser"] = "root"
    ran, changed = run(spec)
    assert ran == {"ctl": ["Reconfigure slurm"], "cpu-001": ["Restart slurmd"]}
    # slurm.conf, its queued action, the handler, the manifest copy: nothing else (the other files,
    # and the copy's bytes when the render is unchanged, are stable: the e2e test's second run is changed=0)
    assert changed == {"ctl": 4, "cpu-001": 4}

    # a re-run of the same render: the copy is read with the host's paths and is already the
    # render's, so nothing writes it (a copy task would be one more module run per host)
    ran, changed = run(spec)
    assert ran == {"ctl": [], "cpu-001": []} and changed == {"ctl": 0, "cpu-001": 0}
    # (the default callback prints a task's banner only with a host result it shows, and skips are
    # not shown: ansible.cfg's display_skipped_hosts)
    keep = "TASK [slurm : Keep the installed manifest for the next run's restart decisions]"
    assert keep in outputs[0] and keep in outputs[1] and keep not in outputs[2]

    # the copy is read in the same round trip as the host's paths, which takes a missing copy as
    # none (the first run above); anything else there that is not a file fails the run, rather
    # than passing for a first install
    copy_on_ctl.unlink()
    copy_on_ctl.mkdir()
    with pytest.raises(AssertionError, match=r"clusterforge-manifest\.json\s+is a directory, not a file"):
        run(spec)


@pytest.mark.skipif(not __import__("shutil").which("ansible-playbook"), reason="ansible-core is not installed")
def test_the_role_refuses_an_installed_file_the_manifest_did_not_hash(tmp_path: Path) -> None:
    """tasks/config.yml checks each installed file's SHA-256 against manifest.json. One local cpu
    node (files under a temporary root, handlers replaced by no-ops), four runs: the install; a
    second run (changed=0); check mode on a changed render (the files the copy would change are not
    on the node yet, and are not checked); then a rendered file edited after the render: the run
    fails, naming the file, both hashes and the fix. The untouched runs pass."""
    import getpass
    import os
    import pwd
    import shutil
    import subprocess
    import sys

    try:
        user = pwd.getpwnam("slurm").pw_name
    except KeyError:
        user = getpass.getuser()
    roles = tmp_path / "roles"
    shutil.copytree(ROOT / "roles" / "slurm", roles / "slurm")
    (roles / "slurm" / "handlers" / "main.yml").write_text(yaml.safe_dump([
        {"name": t, "ansible.builtin.debug": {"msg": t}} for t in HANDLER_ORDER
    ], sort_keys=False))
    render, root = tmp_path / "render", tmp_path / "root"
    # the role reads the render through a symlinked folder, as it does where the filesystem has no
    # RENAME_EXCHANGE (clusterforge/render/writer.py: `out` is a link to the current version)
    link = tmp_path / "render-link"
    link.symlink_to("render")
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                 "clusterforge_cluster_name": "local", "clusterforge_service_manager": "direct",
                 "clusterforge_accounting": {"enabled": False}},
        "hosts": {"cpu-001": {"clusterforge_node_group": "cpu", "clusterforge_manifest_dir": str(link)}},
        "children": {"slurm_compute": {"hosts": {"cpu-001": {}}}},
    }}))
    (tmp_path / "play.yml").write_text(yaml.safe_dump([{
        "name": "Slurm role config tasks", "hosts": "all", "gather_facts": False,
        "tasks": [{"name": "Config", "ansible.builtin.import_role": {"name": "slurm", "tasks_from": "config.yml"}}],
    }], sort_keys=False))
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_ROLES_PATH": str(roles),
           "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"}

    def write(spec: dict[str, Any]) -> None:
        result = render_cluster(parse_spec(spec, "test"), base_dir=EXAMPLES)
        (root / "usr" / "local" / "sbin").mkdir(parents=True, exist_ok=True)  # the health script's folder
        (root / "etc" / "profile.d").mkdir(parents=True, exist_ok=True)  # the job environment's folder
        _install_render(result.manifest(), {n: f.content for n, f in result.files.items()}, render, root, user)

    def run(*extra: str) -> tuple[int, int, str]:
        p = subprocess.run(["ansible-playbook", "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml"), *extra],
                           capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env, check=False)
        m = re.search(r"^cpu-001\s+: ok=\d+\s+changed=(\d+)", p.stdout, re.M)
        return p.returncode, int(m.group(1)) if m else -1, p.stdout + p.stderr

    spec = _base_spec()
    write(spec)
    rc, _, text = run()
    assert rc == 0, text[-4000:]
    assert "Check the installed files against the manifest's SHA-256" in text
    rc, changed, text = run()
    assert (rc, changed) == (0, 0), text[-4000:]

    _group(spec, "cpu").update(weight=20)  # slurm.conf changes: check mode installs nothing, and passes
    write(spec)
    rc, _, text = run("--check")
    assert rc == 0, text[-4000:]
    assert "Weight=20" not in (root / "etc" / "slurm" / "slurm.conf").read_text()

    manifest = json.loads((render / "manifest.json").read_text())
    entry = next(f for f in manifest["files"] if f["name"] == "slurm/cgroup.conf")
    tampered = (render / "slurm" / "cgroup.conf").read_bytes() + b"ConstrainSwapSpace=no\n"
    (render / "slurm" / "cgroup.conf").write_bytes(tampered)
    rc, _, text = run()
    assert rc != 0
    flat = " ".join(text.split())
    node_path = entry["node_path"]
    assert node_path.startswith(str(root)) and node_path.endswith("/etc/slurm/cgroup.conf")
    assert f"{node_path} on cpu-001 has SHA-256 {hashlib.sha256(tampered).hexdigest()}" in flat, text[-4000:]
    assert f"gives slurm/cgroup.conf SHA-256 {entry['sha256']}" in flat
    assert f"Render again (`clusterforge render SPEC --out {link}`)" in flat

    # the copy ran before the check stopped that run: the node now holds the edited bytes, so the
    # next run copies nothing, and the check still refuses them
    assert Path(node_path).read_bytes() == tampered
    rc, _, text = run()
    assert rc != 0
    flat = " ".join(text.split())
    assert f"{node_path} on cpu-001 has SHA-256 {hashlib.sha256(tampered).hexdigest()}" in flat, text[-4000:]


def test_no_role_reads_rendered_config_text() -> None:
    """The roles take what they need from manifest.json; a rendered file's text is only ever copied
    to the nodes (the one lookup of one is the secrets fill on its way there)."""
    reads = []
    for f in sorted([*(ROOT / "roles").rglob("*.yml"), *(ROOT / "playbooks").glob("*.yml")]):
        text = f.read_text()
        for m in re.finditer(r"lookup\('ansible\.builtin\.file',([^)]*)\)([^}]*)", text):
            if "manifest.json" in m.group(1):
                continue
            reads.append((f.relative_to(ROOT).as_posix(), m.group(0)))
    assert len(reads) == 1 and reads[0][0] == "roles/slurm/tasks/config.yml", reads
    assert re.match(r"\s*\| fill_secrets\(", reads[0][1].split(")", 1)[1]), reads  # straight into the secrets fill
    assert "slurm_reconfigure_only_files" not in "".join(
        p.read_text() for p in (ROOT / "roles" / "slurm").rglob("*.yml")
    )


# ----------------------------------------------------------------------------- the rollout


def _rollout(old: Manifest | None, new: Manifest, host: str) -> dict[str, Any]:
    group, _, compute, _ = _hosts(new)[host]
    result = PLUGIN_MOD.slurm_rollout(
        json.loads(old.to_text()) if old is not None else "", json.loads(new.to_text()),
        host=host, compute=compute, host_files=[f.name for f in new.files if group in f.node_groups],
    )
    assert isinstance(result, dict)
    return result


@pytest.mark.parametrize(("version", "stop_first"), [(None, True), ("25.05", False)])
def test_the_rollout_drains_only_the_nodes_whose_layout_changes(version: str | None, stop_first: bool) -> None:
    """Less memory held back for the OS changes every compute node's RealMemory: the node drains,
    with the change in its reason. Up to 24.05 slurmctld restarts for it and the node's slurmd too, so
    the drained node is stopped first (stackhpc #199); from 24.11 a reconfigure applies it and nothing
    is stopped. The login node runs no slurmd and never drains."""
    base = _base(version)
    d = _base_spec(version)
    d["slurm"]["os_memory_reserve_mib"] = 4096
    head = _render(d)
    got = _rollout(base, head, "gpu-001")
    assert got["running"] is True
    assert got["drain"].startswith("clusterforge configure: slurm.conf RealMemory 2036531 -> 2040627"), got
    assert got["stop_first"] is stop_first
    assert _rollout(base, head, "login") == {"running": True, "changed": True, "drain": "", "stop_first": False}


def test_the_rollout_of_an_attribute_change_drains_nothing() -> None:
    base = _base(None)
    d = _base_spec()
    _group(d, "gpu").update(weight=20)
    for host in ("gpu-001", "cpu-001"):
        assert _rollout(base, _render(d), host) == {"running": True, "changed": True, "drain": "", "stop_first": False}


def test_a_first_run_is_not_a_rollout() -> None:
    """No copy of a last install: nothing runs on the host yet, so nothing is drained or stopped and
    the compute play configures every host at once."""
    assert _rollout(None, _base(None), "gpu-001") == {"running": False, "changed": True, "drain": "", "stop_first": False}


def test_an_unchanged_render_is_not_rolled_out_in_batches() -> None:
    """Every host's copy of the last install is the new render (an idempotent re-run): nothing to
    roll out, so the prepare play's batch fact is every host at once, not the canary first."""
    base = _base(None)
    for host in ("gpu-001", "cpu-001", "login"):
        assert _rollout(base, _base(None), host) == {"running": True, "changed": False, "drain": "", "stop_first": False}
    # the play's condition: batches only when some host runs and some host has a change
    prepare = (ROOT / "roles" / "slurm" / "tasks" / "prepare.yml").read_text()
    assert "['__slurm_rollout', 'changed']" in prepare and "['__slurm_rollout', 'running']" in prepare


def test_the_rollout_drain_reason_is_the_one_the_role_resumes() -> None:
    """The role lifts only drains whose reason starts with the prefix (tasks/start_compute.yml); the filter
    and the task must agree, or an operator's drain could be lifted or the role's never."""
    tasks = (ROOT / "roles" / "slurm" / "tasks" / "start_compute.yml").read_text()
    assert PLUGIN_MOD.DRAIN_PREFIX == "clusterforge configure:"
    assert f"is search('Reason={PLUGIN_MOD.DRAIN_PREFIX}')" in tasks
