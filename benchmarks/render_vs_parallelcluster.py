"""`clusterforge render` against AWS ParallelCluster's own Slurm config generator, side by side.

    python3 benchmarks/render_vs_parallelcluster.py [--pairs N] [--peer-repo DIR] [--scaling] [--instructions | --import-steps]

The cluster: 2,048 p5.48xlarge (EFA, 8 H100 each) and 512 c7i.48xlarge, a controller and a login
node; `examples/p5-training.yaml` with those two counts. The peer gets the same cluster as a
ParallelCluster config (two queues, one compute resource each, static nodes) and the
describe-instance-types records of the two types.

The peer is `pcluster_slurm_config_generator.py` with its `config_renderer.py`, `config_utils.py`
and templates from aws/aws-parallelcluster-cookbook (Apache-2.0) at the pinned commit PEER_COMMIT.
They are not in this repository: the benchmark takes them at run time from a clone of that
repository (``--peer-repo``, any clone or bare git folder that holds the commit; otherwise it
clones it from GitHub), checks each file's sha256 against the pins below and keeps them, with the
project's LICENSE.txt and NOTICE.txt, in a cache folder. It runs them unmodified; the one stub
replaces ``_get_metadata`` (the head node's EC2 instance-metadata lookup of its own IP), which
has no answer off EC2.

Both run end to end as subprocesses of the same interpreter, from bytecode compiled first (what
`pip install` leaves), into a fresh output folder each run, in pairs whose order alternates.
After each pair a third child only imports typer, pydantic, jinja2 and yaml, what a render
whose output is a pipe imports of its libraries (rich decorates a terminal only): the floor
under our render's time and memory, printed on its own line. The figures: median wall time of
each, the median of the per-pair ratios, and peak RSS (the child's ``ru_maxrss`` from ``wait4``);
also each child's CPU time (user + system from the same ``wait4``), which a busy machine disturbs
less than the wall time. ``--scaling`` adds a table of in-process validate + resolve + render time
for 2k-65k nodes in 4-256 node groups, each repeat from the spec's data: it grows with groups,
not nodes (``--onprem``: the same for on-prem groups; ``--addresses``: on-prem groups with their
nodes' addresses, one range per /24). ``--instructions`` and ``--import-steps`` count instructions
under valgrind instead: the second adds a render's imports one module at a time on top of its
libraries, then the whole render, so each step's share is a figure a busy machine does not move.
"""

from __future__ import annotations

import argparse
import compileall
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]

PEER_URL = "https://github.com/aws/aws-parallelcluster-cookbook"
PEER_COMMIT = "f75d84c38ecfac1891e5f3e8fe2d424cc3e7448d"  # develop, 2024-10-21
_SLURM = "cookbooks/aws-parallelcluster-slurm/files/default/head_node_slurm/slurm"
#: repository path -> sha256 of the file at PEER_COMMIT
PEER_FILES = {
    "LICENSE.txt": "58d1e17ffe5109a7ae296caafcadfdbe6a7d176f0bc4ab01e12a689b0499d8bd",
    "NOTICE.txt": "5109eed81b658231012d8164429bf560ecb2323e984782fb4507faab1379c35f",
    f"{_SLURM}/pcluster_slurm_config_generator.py": "1cde8bb15c60b7f5f01f0f0ec9aee1d76749334c3c7381b92f166354e7616a3d",
    f"{_SLURM}/config_renderer.py": "e9728a83cb74f0d8bbf63a49ebb9e94c29a99789b154001a641f535c2f1ee399",
    f"{_SLURM}/config_utils.py": "72f07e8da6af416457277bc9001f77af5e711e3b9c0d32d537a26666fe9d1e1e",
    f"{_SLURM}/templates/slurm_parallelcluster.conf": "2cef47256103157d2a01ba115ee65899c75e843fd5864de0724d994d2387dc17",
    f"{_SLURM}/templates/slurm_parallelcluster_gres.conf": "37fb827d99897926fc75bb57bbd516c9b2cd06709153bf392f27d76c0b9ccf30",
    f"{_SLURM}/templates/slurm_parallelcluster_cgroup.conf": "c6676b33084d409f0956701206e0385ec31f769be6494666940aa54e7106ddd7",
    f"{_SLURM}/templates/slurm_parallelcluster_slurmdbd.conf": "bebe52288b5e6d43bc2e1a6bcc02a332c6d91aa4643d14ed1ea235064975150d",
}

GPU_NODES, CPU_NODES = 2048, 512

# The one stub: the head node's own private IP comes from EC2 instance metadata, which has no
# answer here. Everything else (argument parsing, YAML, Jinja, the renderers, the writes) is the
# generator's own code.
PEER_MAIN = """
import sys
sys.path.insert(0, {dir!r})
import pcluster_slurm_config_generator as g
g._get_metadata = lambda path: "10.20.0.10"
g.main()
"""
OURS_MAIN = "import sys; from clusterforge.cli import main; sys.exit(main())"


def cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "clusterforge" / "bench" / f"parallelcluster-cookbook-{PEER_COMMIT[:12]}"


def _peer_complete(d: Path) -> bool:
    return all(
        (d / p).is_file() and hashlib.sha256((d / p).read_bytes()).hexdigest() == h for p, h in PEER_FILES.items()
    )


def materialise_peer(repo: Path | None) -> Path:
    """The pinned peer files in the cache folder (taken from ``repo``, or cloned), checked by sha256."""
    d = cache_dir()
    if _peer_complete(d):
        return d
    with tempfile.TemporaryDirectory() as tmp:
        if repo is None:
            repo = Path(tmp) / "clone"
            print(f"peer: cloning {PEER_URL} (once; --peer-repo DIR takes a local clone)", file=sys.stderr)
            subprocess.run(["git", "clone", "-q", "--filter=blob:none", "--no-checkout", PEER_URL, str(repo)],
                           check=True)
        staged = Path(tmp) / "peer"
        for p, want in PEER_FILES.items():
            shown = subprocess.run(["git", "-C", str(repo), "show", f"{PEER_COMMIT}:{p}"], capture_output=True)
            if shown.returncode != 0:
                raise SystemExit(f"--peer-repo {repo}: no {p} at {PEER_COMMIT[:12]} there "
                                 f"({shown.stderr.decode(errors='replace').strip()}); give a clone or bare git "
                                 f"folder of {PEER_URL} that holds that commit, or leave --peer-repo out to clone it")
            blob = shown.stdout
            got = hashlib.sha256(blob).hexdigest()
            if got != want:
                raise SystemExit(f"peer file {p} at {PEER_COMMIT[:12]} has sha256 {got}, the pin says {want}")
            (staged / p).parent.mkdir(parents=True, exist_ok=True)
            (staged / p).write_bytes(blob)
        if d.exists():
            shutil.rmtree(d)
        d.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(staged), d)
    return d


def our_spec() -> str:
    spec = yaml.safe_load((ROOT / "examples" / "p5-training.yaml").read_text())
    counts = {"gpu": GPU_NODES, "cpu": CPU_NODES}
    for g in spec["node_groups"]:
        if g["name"] in counts:
            g["cloud"]["count"] = counts[g["name"]]
    return yaml.safe_dump(spec, sort_keys=False)


def peer_config() -> str:
    """The same cluster as ParallelCluster 3 writes it for the head node (defaults filled in)."""

    def resource(name: str, itype: str, count: int, efa: bool) -> dict[str, Any]:
        return {
            "Name": name, "InstanceType": itype, "MinCount": count, "MaxCount": count,
            "DisableSimultaneousMultithreading": False, "SchedulableMemory": None, "SpotPrice": None,
            "Efa": {"Enabled": efa, "GdrSupport": efa}, "StaticNodePriority": 1, "DynamicNodePriority": 1000,
            "CapacityReservationTarget": None, "Networking": {"PlacementGroup": {"Enabled": False}},
        }

    def queue(name: str, res: dict[str, Any], exclusive: bool) -> dict[str, Any]:
        return {
            "Name": name, "CapacityType": "ONDEMAND", "AllocationStrategy": "lowest-price",
            "JobExclusiveAllocation": exclusive, "ComputeSettings": {"LocalStorage": {"RootVolume": {"Size": 500}}},
            "Networking": {"SubnetIds": ["subnet-0123456789abcdef1"], "AssignPublicIp": False},
            "Iam": {"AdditionalIamPolicies": [], "InstanceRole": None, "S3Access": None},
            "CustomActions": None, "CustomSlurmSettings": {}, "ComputeResources": [res],
        }

    cfg = {
        "Region": "us-east-1",
        "Image": {"Os": "ubuntu2404"},
        "HeadNode": {
            "InstanceType": "m7i.4xlarge",
            "Networking": {"SubnetId": "subnet-0123456789abcdef0"},
            "LocalStorage": {"RootVolume": {"Size": 200}},
        },
        "LoginNodes": {"Pools": [{"Name": "login", "InstanceType": "m7i.2xlarge", "Count": 1,
                                  "Networking": {"SubnetIds": ["subnet-0123456789abcdef2"]}}]},
        "Scheduling": {
            "Scheduler": "slurm",
            "SlurmSettings": {
                "ScaledownIdletime": 10, "QueueUpdateStrategy": "COMPUTE_FLEET_STOP",
                "EnableMemoryBasedScheduling": True, "CustomSlurmSettings": [],
                "Database": {"Uri": "localhost:3306", "UserName": "slurm", "DatabaseName": None},
            },
            "SlurmQueues": [
                queue("gpu", resource("p5", "p5.48xlarge", GPU_NODES, True), True),
                queue("cpu", resource("c7i", "c7i.48xlarge", CPU_NODES, False), False),
            ],
        },
        "SharedStorage": [
            {"Name": "fsx", "StorageType": "FsxLustre", "MountDir": "/fsx",
             "FsxLustreSettings": {"StorageCapacity": 24000, "PerUnitStorageThroughput": 250,
                                   "ImportPath": "s3://p5-training-datasets/corpus"}},
            {"Name": "home", "StorageType": "Efs", "MountDir": "/home"},
        ],
    }
    return yaml.safe_dump(cfg, sort_keys=False)


def instance_types() -> str:
    """describe-instance-types records of the two types (the fields the generator reads)."""

    def rec(itype: str, vcpus: int, mib: int, gpus: list[dict[str, Any]] | None, efa: bool) -> dict[str, Any]:
        r: dict[str, Any] = {
            "InstanceType": itype, "ProcessorInfo": {"SupportedArchitectures": ["x86_64"]},
            "VCpuInfo": {"DefaultVCpus": vcpus, "DefaultCores": vcpus // 2, "DefaultThreadsPerCore": 2},
            "MemoryInfo": {"SizeInMiB": mib}, "NetworkInfo": {"EfaSupported": efa},
        }
        if gpus:
            r["GpuInfo"] = {"Gpus": gpus, "TotalGpuMemoryInMiB": sum(g["Count"] * g["MemoryInfo"]["SizeInMiB"]
                                                                      for g in gpus)}
        return r

    h100 = [{"Name": "H100", "Manufacturer": "NVIDIA", "Count": 8, "MemoryInfo": {"SizeInMiB": 81920}}]
    return json.dumps({
        "p5.48xlarge": rec("p5.48xlarge", 192, 2097152, h100, True),
        "c7i.48xlarge": rec("c7i.48xlarge", 192, 393216, None, False),
        "m7i.4xlarge": rec("m7i.4xlarge", 16, 65536, None, False),
    })


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, int, float]:
    """Wall seconds, peak RSS (KiB) and CPU seconds (user + system) of one child, which must succeed."""
    t = time.perf_counter()
    p = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert p.stderr is not None
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise SystemExit(f"{argv[3:] or argv} failed ({p.returncode}):\n{err.decode(errors='replace')[-2000:]}")
    return wall, ru.ru_maxrss, ru.ru_utime + ru.ru_stime


def _prepare(peer: Path, t: Path) -> tuple[list[str], list[str], dict[str, str]]:
    """Both sides' inputs in ``t``, bytecode compiled; returns (ours, theirs, env): the command lines."""
    gen = peer / _SLURM
    compileall.compile_dir(ROOT / "clusterforge", quiet=1)
    compileall.compile_dir(gen, quiet=1, maxlevels=0)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(ROOT)  # this checkout's clusterforge, whatever is installed
    (t / "spec.yaml").write_text(our_spec())
    (t / "cluster-config.yaml").write_text(peer_config())
    (t / "instance-types.json").write_text(instance_types())
    ours = [sys.executable, "-c", OURS_MAIN, "render", str(t / "spec.yaml"), "--out", str(t / "ours")]
    theirs = [sys.executable, "-c", PEER_MAIN.format(dir=str(gen)),
              "--output-directory", str(t / "peer"), "--template-directory", str(gen / "templates"),
              "--input-file", str(t / "cluster-config.yaml"), "--instance-types-data",
              str(t / "instance-types.json"), "--realmemory-to-ec2memory-ratio", "0.95",
              "--slurmdbd-user", "slurm", "--cluster-name", "p5-training"]
    # one render first, not measured: it fills the compiled-template cache (render/build.py keys it
    # by each template's path), so a checkout's first measurement is not its one cold render
    _run(ours, ROOT, env)
    shutil.rmtree(t / "ours", ignore_errors=True)
    return ours, theirs, env


#: what `render` imports of the libraries the issue keeps (typer, pydantic) plus jinja2 and yaml, when
#: its output is a pipe or a file as here: it prints its file list through rich on a terminal only
LIBRARY_IMPORTS = "import typer, pydantic, pydantic.main, pydantic.types, jinja2, yaml"


def instructions(peer: Path) -> dict[str, int]:
    """Instructions executed (valgrind's callgrind, one run each): a figure a busy machine does not
    move. Python start alone, the peer end to end, our render end to end, importing the libraries
    render uses, asyncio alone (Python's start included: subtract the first row) and the spec's
    pydantic models with what they import."""
    out: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="cf-bench-") as tmp:
        t = Path(tmp)
        ours, theirs, env = _prepare(peer, t)
        for name, argv in (("python3 -c pass", [sys.executable, "-c", "pass"]),
                           ("parallelcluster generator, end to end", theirs),
                           ("clusterforge render, end to end", ours),
                           ("importing typer, pydantic, jinja2, yaml", [sys.executable, "-c", LIBRARY_IMPORTS]),
                           # pydantic_core's import decorates with typing_extensions' @deprecated,
                           # which before typing_extensions 4.16 imported asyncio on Python 3.11 to
                           # check for coroutines; pyproject.toml asks for 4.16, and this row is what
                           # an older one adds to every command
                           ("importing asyncio alone (typing_extensions < 4.16 on 3.11)", [sys.executable, "-c", "import asyncio"]),
                           ("importing the spec's models (and pydantic, yaml)",
                            [sys.executable, "-c", "import clusterforge.clusterspec.models"])):
            out[name] = _callgrind(argv, t, env)
    return out


def _callgrind(argv: list[str], t: Path, env: dict[str, str]) -> int:
    """Instructions of one run of ``argv`` under callgrind (each run into fresh output folders)."""
    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions and --import-steps need valgrind (apt-get install valgrind)")
    shutil.rmtree(t / "ours", ignore_errors=True)
    shutil.rmtree(t / "peer", ignore_errors=True)
    cg = t / "callgrind.out"
    _run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={cg}", *argv], ROOT, env)
    totals = [ln for ln in cg.read_text().splitlines() if ln.startswith(("summary:", "totals:"))]
    return int(totals[-1].split()[1])


#: a render's imports on top of its libraries, one step each (cumulative): what each adds
IMPORT_STEPS = (
    ("the libraries alone (typer, pydantic, jinja2, yaml)", ""),
    ("+ importlib.metadata (pydantic 2.13's plugin loader imports it at the first model build)",
     "importlib.metadata"),
    ("+ clusterforge.cli", "clusterforge.cli"),
    ("+ the spec's models (clusterforge.clusterspec.models)", "clusterforge.clusterspec.models"),
    ("+ the catalog (clusterforge.catalog)", "clusterforge.catalog"),
    ("+ the manifest's models (clusterforge.render.manifest)", "clusterforge.render.manifest"),
    ("+ the resolver and the rules (clusterforge.resolve)", "clusterforge.resolve"),
    ("+ the renderer (clusterforge.render.build, .writer)", "clusterforge.render.build, clusterforge.render.writer"),
)


def import_steps(peer: Path) -> list[tuple[str, int]]:
    """Instructions of a render's imports, one more module per step on top of the libraries (with
    ``PYDANTIC_DISABLE_PLUGINS=__all__``, as the CLI sets it), then the whole render and the peer's
    whole run: where our part of a render goes, in a figure a busy machine does not move."""
    rows: list[tuple[str, int]] = []
    with tempfile.TemporaryDirectory(prefix="cf-bench-") as tmp:
        t = Path(tmp)
        ours, theirs, env = _prepare(peer, t)
        env = {**env, "PYDANTIC_DISABLE_PLUGINS": "__all__"}
        code = LIBRARY_IMPORTS
        for name, modules in IMPORT_STEPS:
            code += f", {modules}" if modules else ""
            rows.append((name, _callgrind([sys.executable, "-c", code], t, env)))
        rows.append(("clusterforge render, end to end (the rest: read, resolve, render, write)",
                     _callgrind(ours, t, env)))
        rows.append(("parallelcluster generator, end to end", _callgrind(theirs, t, env)))
    return rows


def side_by_side(pairs: int, peer: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="cf-bench-") as tmp:
        t = Path(tmp)
        ours, theirs, env = _prepare(peer, t)

        # the third child only imports the libraries a render in a pipe uses (typer, pydantic, jinja2,
        # yaml): the floor under our render's time and memory, run in the same rotation
        imports = [sys.executable, "-c", LIBRARY_IMPORTS]

        def once(which: str) -> tuple[float, int, float]:
            if which == "imports":
                return _run(imports, ROOT, env)
            out = t / which
            shutil.rmtree(out, ignore_errors=True)
            return _run(ours if which == "ours" else theirs, ROOT, env)

        once("peer"), once("imports")  # warm the page cache (_prepare rendered ours once); not counted
        load_before = os.getloadavg()[0]
        runs: dict[str, list[tuple[float, int, float]]] = {"ours": [], "peer": [], "imports": []}
        for i in range(pairs):
            for which in (("ours", "peer", "imports") if i % 2 == 0 else ("peer", "ours", "imports")):
                runs[which].append(once(which))
        load_after = os.getloadavg()[0]
        peer_nodes = (t / "peer" / "pcluster" / "slurm_parallelcluster_gpu_partition.conf").read_text()
        ours_conf = (t / "ours" / "slurm" / "slurm.conf").read_text()
    wall = {k: statistics.median(w for w, _, _ in v) for k, v in runs.items()}
    cpu = {k: statistics.median(c for _, _, c in v) for k, v in runs.items()}
    rss = {k: max(r for _, r, _ in v) for k, v in runs.items()}
    ratios = [o[0] / p[0] for o, p in zip(runs["ours"], runs["peer"], strict=True)]
    cpu_ratios = [o[2] / p[2] for o, p in zip(runs["ours"], runs["peer"], strict=True)]
    return {
        "pairs": pairs,
        "wall_s": wall,
        "wall_ratio_median": statistics.median(ratios),
        "cpu_s": cpu,
        "cpu_ratio_median": statistics.median(cpu_ratios),
        "peak_rss_mib": {k: v / 1024 for k, v in rss.items()},
        "rss_ratio": rss["ours"] / rss["peer"],
        "imports_rss_ratio": rss["imports"] / rss["peer"],
        "load_1m": [load_before, load_after],
        "ours_nodename_lines": sum(1 for ln in ours_conf.splitlines() if ln.startswith("NodeName=")),
        "peer_nodename_lines": sum(1 for ln in peer_nodes.splitlines() if ln.startswith("NodeName=")),
    }


def scaling_spec(nodes: int, groups: int, onprem: bool = False, addresses: bool = False) -> dict[str, Any]:
    """``nodes`` compute nodes in ``groups`` groups, alternately p5.48xlarge (EFA) and c7i.48xlarge;
    ``onprem``: the same hardware as on-prem groups whose hosts are one range each
    (``<group>-[00001-NNNNN]``); ``addresses``: and their addresses, 250 per /24 of group i's
    10.i.0.0/16, one range per /24 (``10.i.0.[1-250],10.i.1.[1-250],...``)."""
    per = nodes // groups
    node_groups: list[dict[str, Any]] = [
        {"name": "head", "role": "controller", "cloud": {"instance_type": "m7i.4xlarge", "count": 1,
                                                         "subnet": "private-a"}},
    ]
    for i in range(groups):
        gpu = i % 2 == 0
        node_groups.append({
            "name": f"{'gpu' if gpu else 'cpu'}{i:03d}",
            "cloud": {"instance_type": "p5.48xlarge" if gpu else "c7i.48xlarge", "count": per,
                      "subnet": "private-a", "efa": gpu, "placement_group": gpu},
            "features": ["h100"] if gpu else ["cpu"],
        })
        if onprem:
            g = node_groups[-1]
            g["onprem"] = {"hosts": f"{g['name']}-[00001-{per:05d}]", "profile": g.pop("cloud")["instance_type"]}
            if addresses:
                g["onprem"]["addresses"] = ",".join(
                    f"10.{i}.{k}.[1-{min(250, per - 250 * k)}]" for k in range((per + 249) // 250))
    return {
        "name": f"scale-{nodes}-{groups}",
        # 23.11: the Slurm the default OS (Ubuntu 24.04) ships, so the spec validates as it is
        "slurm": {"version": "23.11"},
        "aws": {"region": "us-east-1", "vpc_cidr": "10.0.0.0/16",
                "subnets": [{"name": "public-a", "cidr": "10.0.0.0/24", "availability_zone": "us-east-1a",
                             "public": True},
                            {"name": "private-a", "cidr": "10.0.128.0/17", "availability_zone": "us-east-1a"}]},
        "node_groups": node_groups,
        "partitions": [
            {"name": "gpu", "node_groups": [g["name"] for g in node_groups[1::2]], "default": True},
            {"name": "cpu", "node_groups": [g["name"] for g in node_groups[2::2]] or [node_groups[1]["name"]]},
        ],
    }


def scaling(repeat: int, onprem: bool = False, addresses: bool = False) -> list[dict[str, Any]]:
    sys.path.insert(0, str(ROOT))
    from clusterforge.clusterspec.models import Cluster
    from clusterforge.render import render
    from clusterforge.resolve import resolve

    rows = []
    for nodes in (2048, 8192, 32768, 65536):
        for groups in (4, 16, 64, 256):
            data = scaling_spec(nodes, groups, onprem or addresses, addresses)
            best = float("inf")
            for _ in range(repeat):
                # each repeat from the spec's data: the models cache what they list (hostnames),
                # and a second pass over one model would not pay for it
                t = time.perf_counter()
                result = render(resolve(Cluster.model_validate(data), base_dir=ROOT))
                best = min(best, time.perf_counter() - t)
            conf = result.files["slurm/slurm.conf"].content
            rows.append({"nodes": nodes, "groups": groups, "render_ms": best * 1000,
                         "slurm_conf_lines": len(conf.splitlines()), "files": len(result.files)})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=11, help="paired runs (default 11)")
    ap.add_argument("--peer-repo", type=Path, help="a clone (or bare git folder) of aws-parallelcluster-cookbook")
    ap.add_argument("--scaling", action="store_true", help="also the 2k-65k nodes x 4-256 groups table")
    ap.add_argument("--scaling-only", action="store_true", help="only the scaling table")
    ap.add_argument("--repeat", type=int, default=3, help="scaling: best of N renders per cell")
    ap.add_argument("--onprem", action="store_true",
                    help="scaling: on-prem groups (hosts given as one range each) instead of cloud groups")
    ap.add_argument("--addresses", action="store_true",
                    help="scaling: on-prem groups with addresses (one range per /24; implies --onprem)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument("--instructions", action="store_true",
                    help="only the instruction counts under valgrind's callgrind (one run each; minutes)")
    ap.add_argument("--import-steps", action="store_true",
                    help="only the instructions of a render's imports, one module more per step (minutes)")
    args = ap.parse_args()
    figures: dict[str, Any] = {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
    if args.import_steps:
        rows = import_steps(materialise_peer(args.peer_repo))
        if args.json:
            print(json.dumps(dict(rows), indent=2))
            return 0
        print(f"instructions (valgrind --tool=callgrind, one run each, Python {figures['python']}), cumulative / added")
        steps = len(IMPORT_STEPS)
        for i, (name, n) in enumerate(rows):
            added = f"{(n - rows[i - 1][1]) / 1e6:+8,.0f} M" if 0 < i <= steps else ""
            print(f"  {name:88s} {n / 1e6:8,.0f} M {added}")
        return 0
    if args.instructions:
        counts = instructions(materialise_peer(args.peer_repo))
        if args.json:
            print(json.dumps(counts, indent=2))
            return 0
        print(f"instructions (valgrind --tool=callgrind, one run each, Python {figures['python']})")
        for name, n in counts.items():
            print(f"  {name:58s} {n / 1e6:8,.0f} M")
        return 0
    if not args.scaling_only:
        figures["side_by_side"] = side_by_side(args.pairs, materialise_peer(args.peer_repo))
    if args.scaling or args.scaling_only:
        figures["scaling"] = scaling(args.repeat, args.onprem, args.addresses)
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    s = figures.get("side_by_side")
    if s:
        print(f"cluster: {GPU_NODES} x p5.48xlarge + {CPU_NODES} x c7i.48xlarge (+ controller, login); "
              f"{s['pairs']} paired runs, end to end, median")
        print(f"  clusterforge render              {s['wall_s']['ours']:.3f} s   CPU {s['cpu_s']['ours']:.3f} s   peak RSS "
              f"{s['peak_rss_mib']['ours']:.1f} MiB   ({s['ours_nodename_lines']} NodeName lines)")
        print(f"  pcluster_slurm_config_generator  {s['wall_s']['peer']:.3f} s   CPU {s['cpu_s']['peer']:.3f} s   peak RSS "
              f"{s['peak_rss_mib']['peer']:.1f} MiB   ({s['peer_nodename_lines']} NodeName lines, "
              f"{PEER_COMMIT[:12]})")
        print(f"  importing the libraries alone    {s['wall_s']['imports']:.3f} s   CPU {s['cpu_s']['imports']:.3f} s   peak RSS "
              f"{s['peak_rss_mib']['imports']:.1f} MiB   (typer, pydantic, jinja2, yaml: our floor)")
        print(f"  ratio (ours / peer): wall {s['wall_ratio_median']:.2f}, CPU {s['cpu_ratio_median']:.2f} (medians of "
              f"pairs), peak RSS {s['rss_ratio']:.2f}")
        print(f"  machine: {figures['cpus']} CPUs, Python {figures['python']}, load average "
              f"{s['load_1m'][0]:.2f} before, {s['load_1m'][1]:.2f} after")
    if "scaling" in figures:
        print(f"validate + resolve + render in process (best of {args.repeat}): ms, slurm.conf lines"
              + ("; on-prem groups with addresses" if args.addresses else "; on-prem groups" if args.onprem else ""))
        groups = sorted({r["groups"] for r in figures["scaling"]})
        print("  nodes  " + "".join(f"{g:>8d} groups" for g in groups))
        for nodes in sorted({r["nodes"] for r in figures["scaling"]}):
            cells = {r["groups"]: r for r in figures["scaling"] if r["nodes"] == nodes}
            print(f"  {nodes:5d}  " + "".join(f"{cells[g]['render_ms']:7.0f} ms {cells[g]['slurm_conf_lines']:4d}"
                                              for g in groups))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
