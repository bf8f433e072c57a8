"""Render a synthetic 2,048-node heterogeneous GPU cluster (16,384 GPUs) and print the figures.

    python3 benchmarks/render_scale.py [--repeat N]

The cluster: 1,024 on-prem DGX H100 in 32 racks of 32 (one leaf per rack, 4 spines under one
core switch) on InfiniBand, and 1,024 AWS GPU nodes in 8 groups (p5, p5e, p4de) on EFA.
Figures: validate and render wall time (best of N), peak traced Python memory, file sizes and
the slurm.conf line count, which grows with node groups, not nodes.
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from clusterforge.clusterspec import parse_spec, validate  # noqa: E402
from clusterforge.render import render_cluster  # noqa: E402


def synthetic_spec() -> dict[str, Any]:
    groups: list[dict[str, Any]] = [
        {"name": "head", "role": "controller", "onprem": {"hosts": "head-01", "addresses": "10.0.0.10", "profile": "m7i.8xlarge"}},
    ]
    switches = [{"name": "core"}] + [{"name": f"spine-{s}", "parent": "core"} for s in range(1, 5)]
    hcas = ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]
    for pod in range(8):  # 8 pods x 4 racks x 32 DGX
        first = pod * 128 + 1
        placement = []
        for r in range(4):
            rack = pod * 4 + r + 1
            lo = first + r * 32
            placement.append({"rack": f"rack-{rack:02d}", "switch": f"leaf-{rack:02d}",
                              "hosts": f"dgx-[{lo:04d}-{lo + 31:04d}]"})
            switches.append({"name": f"leaf-{rack:02d}", "parent": f"spine-{rack % 4 + 1}"})
        groups.append({
            "name": f"dgx-pod{pod + 1}", "role": "compute",
            "onprem": {"hosts": f"dgx-[{first:04d}-{first + 127:04d}]",
                       "addresses": f"10.{10 + pod}.0.[1-128]", "profile": "dgx-h100", "placement": placement},
            "fabric": {"type": "infiniband", "hcas": hcas}, "features": ["h100", "onprem"], "weight": 10,
        })
    aws_types = ["p5.48xlarge"] * 4 + ["p5e.48xlarge"] * 2 + ["p4de.24xlarge"] * 2
    for i, itype in enumerate(aws_types):
        groups.append({
            "name": f"aws-{i + 1}", "role": "compute",
            "cloud": {"instance_type": itype, "count": 128, "subnet": "private-a", "efa": True, "placement_group": True},
            "features": [itype.split(".")[0], "aws"], "weight": 50,
        })
    parts = [{"name": "onprem", "node_groups": [f"dgx-pod{p + 1}" for p in range(8)], "default": True}]
    parts += [{"name": t.split(".")[0], "node_groups": [f"aws-{i + 1}" for i, x in enumerate(aws_types) if x == t]}
              for t in dict.fromkeys(aws_types)]
    return {
        "name": "scale-2048",
        # 23.11: the Slurm the default OS (Ubuntu 24.04) ships, so the spec validates without a
        # package_repo of its own builds
        "slurm": {"version": "23.11"},
        "aws": {"region": "us-east-1", "vpc_cidr": "10.100.0.0/16",
                "subnets": [{"name": "public-a", "cidr": "10.100.0.0/24", "availability_zone": "us-east-1a", "public": True},
                            {"name": "private-a", "cidr": "10.100.64.0/18", "availability_zone": "us-east-1a"}]},
        "node_groups": groups,
        "partitions": parts,
        "topology": {"switches": switches},
        "storage": [{"name": "fsx", "type": "fsx_lustre", "mount": "/fsx", "purpose": ["checkpoints"], "capacity_gib": 48000}],
        "accounting": {"enabled": True},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    data = synthetic_spec()
    errors = [f for f in validate(parse_spec(data), ROOT) if f.level.value == "error"]
    if errors:  # a benchmark of a spec that `render` would refuse measures nothing a user runs
        for f in errors:
            print(f"error {f.path} = {f.value!r}: {f.why} (fix: {f.fix})", file=sys.stderr)
        raise SystemExit(f"the synthetic spec has {len(errors)} validation error(s): fix synthetic_spec()")
    best_validate = best_render = float("inf")
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        cluster = parse_spec(data)
        findings = validate(cluster, ROOT)
        t1 = time.perf_counter()
        result = render_cluster(cluster, base_dir=ROOT)
        t2 = time.perf_counter()
        best_validate, best_render = min(best_validate, t1 - t0), min(best_render, t2 - t1)
    tracemalloc.start()
    render_cluster(parse_spec(data), base_dir=ROOT)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    nodes = sum(len(g.hostnames) for g in cluster.node_groups if g.role == "compute")
    gpus = nodes * 8
    slurm_conf = result.files["slurm/slurm.conf"].content
    print(f"cluster: {nodes} compute nodes, {gpus} GPUs, {len(cluster.node_groups)} node groups, "
          f"{len(cluster.topology.switches)} spec switches; validation findings: {len(findings)}, no errors")
    print(f"parse+validate: {best_validate * 1000:.0f} ms (best of {args.repeat})")
    print(f"render:         {best_render * 1000:.0f} ms (best of {args.repeat}), peak traced memory {peak / 2**20:.1f} MiB")
    print(f"slurm.conf: {len(slurm_conf.splitlines())} lines, {len(slurm_conf)} bytes; "
          f"NodeName lines: {sum(1 for ln in slurm_conf.splitlines() if ln.startswith('NodeName='))}")
    for name in ("slurm/gres.conf", "slurm/topology.conf"):
        print(f"{name}: {len(result.files[name].content.splitlines())} lines")
    print(f"files rendered: {len(result.files)}")


if __name__ == "__main__":
    main()
