#!/usr/bin/env python3
"""``clusterforge-cloud-agent``: the controller's loop that keeps topology.conf on the instances' EC2 placement.

Shipped verbatim to ``/usr/local/lib/clusterforge-agents/`` with ``hostlist``, ``tree``,
``yamlfile`` and ``ec2topology`` (``render/agents.py``); runtime deps are the stdlib, boto3,
jinja2 and PyYAML. Each tick:

1. DescribeInstances (tag ``clusterforge:cluster``, state pending/running) -> instance -> name;
2. DescribeInstanceTopology for those ids -> node -> network nodes;
3. ``tree.build_tree`` on the config's basis -> the switch lines, printed with the renderer's own
   ``templates/topology.conf.j2`` (same Jinja options) or, for Slurm 25.05+, topology.yaml the way
   ``render/topology.py`` dumps it: the file ``clusterforge render`` writes for the same answers;
4. only if the bytes differ: atomic write (temp file in the same folder, fsync, ``os.replace``,
   mode 0644), then ``scontrol reconfigure``;
5. ``capacity.tick(config, now)`` when the config has capacity blocks.

An AWS or Slurm error is logged and retried next tick; the loop never dies of one. Every AWS call
is bounded (connect/read timeouts, standard retries) and so is every subprocess. One log line per
change goes to stdout (the service's journal).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

try:
    from clusterforge.aws import ec2topology
    from clusterforge.render import tree, yamlfile
except ImportError:  # on the controller: top-level modules next to this file
    import ec2topology  # type: ignore[no-redef, import-not-found]
    import tree  # type: ignore[no-redef, import-not-found]
    import yamlfile  # type: ignore[no-redef, import-not-found]

CONFIG = "/etc/clusterforge/cloud-agent.json"
ENDPOINTS = "/etc/clusterforge/aws-endpoints.json"  # emulation only (the local AWS flavour)
TEMPLATE_DIR = str(Path(__file__).resolve().parent / "templates")
SCONTROL_TIMEOUT_S = 60

Runner = Callable[[Sequence[str]], None]


def log(msg: str) -> None:
    print(f"clusterforge-cloud-agent: {msg}", flush=True)


def run_command(argv: Sequence[str]) -> None:
    """Run a Slurm command, bounded; a failure is an exception with its stderr."""
    p = subprocess.run(list(argv), capture_output=True, text=True, timeout=SCONTROL_TIMEOUT_S, check=False)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {p.returncode}: {p.stderr.strip() or p.stdout.strip()}")


def _jinja_env(template_dir: str) -> Any:
    import jinja2

    # the options of clusterforge/render/__init__.py::_env (the equivalence test holds them equal)
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(template_dir),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


def topology_text(cfg: dict[str, Any], paths: dict[str, list[str]], template_dir: str) -> str:
    """topology.conf (or topology.yaml when ``topology_path`` ends in .yaml) for ``paths``."""
    switches = tree.build_tree(cfg["topology"], paths)
    if str(cfg["topology_path"]).endswith(".yaml"):
        return yamlfile.dump_yaml(tree.yaml_header(cfg["cluster"], cfg["slurm_version"]), [tree.yaml_entry(switches)])
    tpl = _jinja_env(template_dir).get_template("topology.conf.j2")
    text: str = tpl.render(cluster=cfg["cluster"], version=cfg["slurm_version"], plugin="topology/tree",
                           switches=switches, blocks=[], block_sizes=[])
    return text


def write_if_changed(path: str, text: str) -> bool:
    """Atomically replace ``path`` with ``text`` (mode 0644) unless it already holds those bytes."""
    data = text.encode()
    try:
        if Path(path).read_bytes() == data:
            return False
    except FileNotFoundError:
        pass
    folder = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".cf-topology.", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dfd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dfd)  # the rename itself survives a crash
    finally:
        os.close(dfd)
    return True


def sync_topology(cfg: dict[str, Any], ec2: Any, template_dir: str, runner: Runner) -> bool:
    """One topology sync; True when the file changed (and slurmctld was told)."""
    paths, names, topo = ec2topology.collect(ec2, cfg["cluster"])
    text = topology_text(cfg, paths, template_dir)
    if not write_if_changed(cfg["topology_path"], text):
        return False
    log(
        f"{cfg['topology_path']} updated: {len(paths)} nodes placed by EC2, "
        f"{len(topo.pending)} of {len(names)} instances not reported yet"
    )
    runner(["scontrol", "reconfigure"])
    log("scontrol reconfigure done")
    return True


def _capacity() -> Any:
    try:
        from clusterforge.aws import capacity
    except ImportError:
        import capacity  # type: ignore[no-redef, import-not-found]
    return capacity


def tick(cfg: dict[str, Any], ec2: Any, template_dir: str, runner: Runner, now: dt.datetime,
         clock: Any = None) -> None:
    """Topology, then capacity blocks; each error is logged and left for the next tick. ``now`` is
    the capacity windows' time (``clock``'s virtual time when a test moves it)."""
    if cfg.get("topology"):
        try:
            sync_topology(cfg, ec2, template_dir, runner)
        except Exception as exc:  # AWS, Slurm, disk: retried next tick, never the end of the loop
            log(f"topology sync failed, retrying next tick: {type(exc).__name__}: {exc}")
    if cfg.get("capacity_blocks"):
        try:
            for line in _capacity().tick(cfg, now, clock=clock):
                log(line)
        except Exception as exc:
            log(f"capacity-block tick failed, retrying next tick: {type(exc).__name__}: {exc}")


def ec2_client(region: str, endpoints: str = ENDPOINTS) -> Any:
    import boto3
    from botocore.config import Config

    kw: dict[str, Any] = {
        "region_name": region,
        "config": Config(retries={"mode": "standard", "max_attempts": 4}, connect_timeout=5, read_timeout=20),
    }
    if os.path.exists(endpoints):  # emulation only
        with open(endpoints, encoding="utf-8") as f:
            kw["endpoint_url"] = json.load(f)["endpoint_url"]
    return boto3.client("ec2", **kw)


def load_config(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, json.JSONDecodeError) as exc:
        raise SystemExit(f"clusterforge-cloud-agent: cannot read config {path}: {exc}") from None
    missing = [k for k in ("cluster", "region", "slurm_version", "topology", "topology_path") if k not in cfg]
    if not isinstance(cfg, dict) or missing:
        raise SystemExit(f"clusterforge-cloud-agent: config {path} lacks {missing}; re-render and reinstall it")
    return cfg


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="clusterforge-cloud-agent", description=__doc__.split("\n")[0])
    ap.add_argument("--config", default=CONFIG)
    ap.add_argument("--interval", type=float, default=60.0, help="seconds between ticks (default 60)")
    ap.add_argument("--once", action="store_true", help="one tick, then exit")
    ap.add_argument("--template-dir", default=TEMPLATE_DIR)
    ap.add_argument("--run-for", type=float, default=None,
                    help="exit after this many seconds (a bounded run, e.g. with a moved clock in a test)")
    capacity = _capacity()
    capacity.Clock.add_arguments(ap)
    a = ap.parse_args(argv)
    try:
        clock = capacity.Clock.from_args(a.clock_scale, a.clock_start)
    except ValueError as exc:
        ap.error(str(exc))
    cfg = load_config(a.config)
    ec2 = ec2_client(cfg["region"])
    end = None if a.run_for is None else time.monotonic() + a.run_for
    while True:
        started = time.monotonic()
        tick(cfg, ec2, a.template_dir, run_command, clock.now(), clock)
        if a.once or (end is not None and time.monotonic() >= end):
            return 0
        time.sleep(max(0.0, a.interval - (time.monotonic() - started)))


if __name__ == "__main__":
    sys.exit(main())
