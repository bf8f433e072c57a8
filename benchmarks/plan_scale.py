"""Offline plan of a synthetic 2,048-node cluster: wall time and resource count.

    python3 benchmarks/plan_scale.py [--repeat N] [--json]

The spec is built in code: 16 GPU groups of 120 p5.48xlarge (1,920 nodes, 15,360 H100) on EFA,
half in cluster placement groups and half in capacity blocks, 4 CPU groups of 32 c7i.48xlarge
(128 nodes), a controller and a login node, FSx for Lustre and EFS, in two availability zones.
That is 2,048 compute nodes plus 2 head nodes; because a group is one Auto Scaling group, the
plan registers a few hundred resources, not thousands.

Reports the wall time of each phase (spec validation, program under mocks, rendering) and the
resource counts. CPU time is printed too: on a shared, loaded machine it is the steadier figure.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GPU_GROUPS, GPU_PER_GROUP = 16, 120
CPU_GROUPS, CPU_PER_GROUP = 4, 32


def synthetic_spec(
    gpu_groups: int = GPU_GROUPS, gpu_per_group: int = GPU_PER_GROUP, cpu_groups: int = CPU_GROUPS
) -> dict[str, Any]:
    """The cluster above; ``benchmarks/plan_speed.py`` varies the number of groups."""
    groups: list[dict[str, Any]] = [
        {
            "name": "head",
            "role": "controller",
            "cloud": {"instance_type": "m7i.8xlarge", "count": 1, "subnet": "private-a"},
        },
        {
            "name": "login",
            "role": "login",
            "cloud": {"instance_type": "m7i.4xlarge", "count": 1, "subnet": "public-a"},
        },
    ]
    for i in range(gpu_groups):
        az = "a" if i % 2 == 0 else "b"
        capacity: dict[str, Any] = {"type": "on_demand"}
        if i >= gpu_groups // 2:
            # a fixed two-week window (as p5-training's): the plan then has its two scheduled actions
            capacity = {"type": "capacity_block", "reservation_id": f"cr-0{i:016x}",
                        "start": "2027-01-04T11:30:00Z", "end": "2027-01-18T11:30:00Z"}
        groups.append(
            {
                "name": f"gpu{i:02d}",
                "cloud": {
                    "instance_type": "p5.48xlarge",
                    "count": gpu_per_group,
                    "subnet": f"private-{az}",
                    "efa": True,
                    "placement_group": capacity["type"] == "on_demand",
                    "capacity": capacity,
                    "root_volume_gib": 500,
                },
                "features": ["h100", "efa"],
            }
        )
    for i in range(cpu_groups):
        groups.append(
            {
                "name": f"cpu{i}",
                "cloud": {"instance_type": "c7i.48xlarge", "count": CPU_PER_GROUP, "subnet": "private-a"},
                "features": ["cpu"],
            }
        )
    return {
        "name": "scale",
        "aws": {
            "region": "us-east-1",
            "vpc_cidr": "10.50.0.0/16",
            "subnets": [
                {
                    "name": "public-a",
                    "cidr": "10.50.0.0/24",
                    "availability_zone": "us-east-1a",
                    "public": True,
                },
                {
                    "name": "public-b",
                    "cidr": "10.50.1.0/24",
                    "availability_zone": "us-east-1b",
                    "public": True,
                },
                {"name": "private-a", "cidr": "10.50.32.0/19", "availability_zone": "us-east-1a"},
                {"name": "private-b", "cidr": "10.50.64.0/19", "availability_zone": "us-east-1b"},
            ],
            "login_allowed_cidrs": ["203.0.113.0/24"],
            "s3_bucket": "scale-datasets",
        },
        "node_groups": groups,
        "partitions": [
            {"name": "gpu", "node_groups": [f"gpu{i:02d}" for i in range(gpu_groups)], "default": True},
            {"name": "cpu", "node_groups": [f"cpu{i}" for i in range(cpu_groups)]},
        ],
        "storage": [
            {
                "name": "fsx",
                "type": "fsx_lustre",
                "mount": "/fsx",
                "capacity_gib": 120000,
                "throughput_per_tib": 500,
            },
            {"name": "home", "type": "efs", "mount": "/home", "purpose": ["home"]},
        ],
        "accounting": {"enabled": True},
    }


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="plan the cluster N times in one process")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    warnings.simplefilter("ignore", DeprecationWarning)  # pulumi_aws import noise

    t0, c0 = time.perf_counter(), _cpu()
    from clusterforge.clusterspec.models import Cluster
    from clusterforge.plan import build_plan
    from clusterforge.resolve import resolve

    import_s, import_cpu = time.perf_counter() - t0, _cpu() - c0
    t = time.perf_counter()
    cluster = Cluster.model_validate(synthetic_spec())
    spec_s = time.perf_counter() - t
    nodes = sum(g.cloud.count for g in cluster.node_groups if g.cloud is not None)

    runs = []
    for _ in range(args.repeat):
        t, c = time.perf_counter(), _cpu()
        rc = resolve(cluster, base_dir=ROOT / "benchmarks")
        plan = build_plan(rc, spec_path=ROOT / "benchmarks" / "scale.yaml", render=False)
        runs.append((time.perf_counter() - t, _cpu() - c))
    t, c = time.perf_counter(), _cpu()
    from clusterforge.render import render_cluster

    rendered = render_cluster(cluster, base_dir=ROOT / "benchmarks")
    render_s, render_cpu = time.perf_counter() - t, _cpu() - c

    figures = {
        "nodes": nodes,
        "node_groups": len(cluster.node_groups),
        "registrations": len(plan.resources),
        "aws_resources": plan.cloud_resource_count,
        "counts": plan.counts,
        "plan_wall_s": [round(w, 2) for w, _ in runs],
        "plan_cpu_s": [round(c, 2) for _, c in runs],
        "import_wall_s": round(import_s, 2),
        "import_cpu_s": round(import_cpu, 2),
        "spec_wall_s": round(spec_s, 3),
        "render_wall_s": round(render_s, 2),
        "render_cpu_s": round(render_cpu, 2),
        "rendered_files": len(rendered.files),
        "estimated_usd_per_hour": round(plan.cost.total_hourly, 2),
        "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    if args.json:
        print(json.dumps(figures, indent=2, sort_keys=True))
        return 0
    print(f"synthetic cluster: {nodes} nodes in {len(cluster.node_groups)} node groups")
    print(f"plan: {plan.cloud_resource_count} AWS resources, {len(plan.resources)} registrations")
    for i, (w, c) in enumerate(runs, 1):
        print(f"  run {i}: {w:.2f} s wall, {c:.2f} s CPU (program under mocks + cost)")
    print(f"imports (pulumi, pulumi_aws, clusterforge): {import_s:.2f} s wall, {import_cpu:.2f} s CPU")
    print(f"render: {len(rendered.files)} files in {render_s:.2f} s wall, {render_cpu:.2f} s CPU")
    print(f"estimated cost: ${plan.cost.total_hourly:,.0f}/h")
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
