"""Where facts come from: rendered comments name the true source per fact, and every EC2 profile
has the CPU layout AWS publishes.

Expected lines and values are written by hand: the tool names are the commands the fact files
hold, the host lists are the ones the facts folders below are built with, and the EC2 values are
DescribeInstanceTypes VCpuInfo (DefaultVCpus, DefaultCores, DefaultThreadsPerCore) as moto records
them (github getmoto/moto, moto/ec2/resources/instance_types.json @0af643a5dbfc).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from clusterforge.catalog import get_profile, load_catalog
from clusterforge.clusterspec import parse_spec
from clusterforge.render import render_cluster

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "facts"
EXAMPLES = ROOT / "examples"


def _host_dir(root: Path, host: str, fixture: str, files: tuple[str, ...]) -> None:
    d = root / host
    d.mkdir(parents=True)
    for f in files:
        text = (FIXTURES / fixture / f).read_text()
        if f == "slurmd-C.txt":  # slurmd -C names the host it ran on
            text = text.replace(f"NodeName={fixture}", f"NodeName={host}")
        (d / f).write_text(text)


def _render(spec: dict[str, object], facts: Path | None = None) -> dict[str, str]:
    cluster = parse_spec(spec, "test spec")
    result = render_cluster(cluster, base_dir=EXAMPLES, facts_dir=facts)
    return {name: f.content for name, f in result.files.items()}


def _p5_spec() -> dict[str, object]:
    spec = yaml.safe_load((EXAMPLES / "p5-training.yaml").read_text())
    assert isinstance(spec, dict)
    return spec


def _comments_before(text: str, line_start: str) -> list[str]:
    """The comment lines right above the first line starting with ``line_start``."""
    lines = text.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith(line_start))
    out: list[str] = []
    for ln in reversed(lines[:at]):
        if not ln.startswith("#") or ln.startswith("# ---"):  # "# --- Nodes" heads the section
            break
        out.insert(0, ln)
    return out


def test_facts_render_names_each_tool_where_its_facts_are_used(tmp_path: Path) -> None:
    facts = tmp_path / "facts"
    # gpu group: slurmd -C and nvidia-smi topo -m, no lscpu; cpu group: lscpu only
    for i in range(1, 17):
        _host_dir(facts, f"gpu-{i:03d}", "p5-001", ("slurmd-C.txt", "nvidia-smi-topo.txt"))
    for i in range(1, 5):
        _host_dir(facts, f"cpu-{i:03d}", "p5-001", ("lscpu.txt",))
    files = _render(_p5_spec(), facts)
    conf, gres = files["slurm/slurm.conf"], files["slurm/gres.conf"]

    assert _comments_before(conf, "NodeName=gpu-[001-016]") == [
        "# gpu: 16 x p5.48xlarge, 2x48x2, RealMemory = OS-visible memory less slurm.os_memory_reserve_mib",
        "#   CPU layout from slurmd -C on gpu-[001-016]",
        "#   memory from slurmd -C on gpu-[001-016] (least of the group)",
    ]
    # lscpu gives the layout only: memory is still the catalog's, and says so
    assert _comments_before(conf, "NodeName=cpu-[001-004]") == [
        "# cpu: 4 x c7i.48xlarge, 2x48x2, RealMemory = OS-visible memory less slurm.os_memory_reserve_mib",
        "#   CPU layout from lscpu on cpu-[001-004]",
        "#   memory from catalog: DescribeInstanceTypes VCpuInfo/MemoryInfo "
        "(moto ec2/resources/instance_types.json @0af643a); sockets (U): not in the EC2 API",
    ]
    assert _comments_before(gres, "NodeName=gpu-[001-016]") == [
        "# gpu: 8 x h100 on p5.48xlarge",
        "#   Cores= and Links= from nvidia-smi topo -m on gpu-[001-016]",  # one source, one line
    ]


def test_catalog_render_names_no_tool() -> None:
    files = _render(_p5_spec())
    text = files["slurm/slurm.conf"] + files["slurm/gres.conf"]
    source_lines = [ln for ln in text.splitlines() if ln.startswith("#   ") and " from " in ln]
    assert len(source_lines) == 4  # slurm.conf: gpu, cpu; gres.conf: Cores=, Links=
    for ln in source_lines:
        assert " from catalog: " in ln, ln
    assert _comments_before(files["slurm/gres.conf"], "NodeName=gpu-[001-016]") == [
        "# gpu: 8 x h100 on p5.48xlarge",
        "#   Cores= from catalog: GPUs 0-3 on NUMA 0, 4-7 on NUMA 1 (weak evidence, facts.md 1.1); "
        "override with --facts",
        "#   Links= from catalog: H100 SXM5 has 18 NVLink 4 links, all through NVSwitch (NVIDIA H100 datasheet)",
    ]


def test_rocm_render_names_rocm_smi_and_lscpu(tmp_path: Path) -> None:
    # the amd-mi300x example: Cores= come from rocm-smi's NUMA node per GPU plus lscpu's CPU lists
    shutil.copytree(EXAMPLES / "facts" / "mi300x", tmp_path / "mi300x")
    spec = yaml.safe_load((EXAMPLES / "amd-mi300x.yaml").read_text())
    files = _render(spec, tmp_path / "mi300x")
    assert _comments_before(files["slurm/gres.conf"], "NodeName=mi-[01-04]") == [
        "# mi300x: 8 x mi300x on mi300x-8gpu",
        "#   Cores= from rocm-smi --showtopo + lscpu on mi-[01-04]",
        "#   Links= from rocm-smi --showtopo on mi-[01-04]",
    ]
    assert _comments_before(files["slurm/slurm.conf"], "NodeName=mi-[01-04]")[1:] == [
        "#   CPU layout from slurmd -C on mi-[01-04]",
        "#   memory from slurmd -C on mi-[01-04] (least of the group)",
    ]
    assert "nvidia-smi" not in files["slurm/gres.conf"]


# ------------------------------------------------------------------ EC2 CPU layouts in the catalog

# type -> (vCPUs, cores, threads per core, sockets or None where no source gives them)
EXPECTED_EC2 = {
    "p5.48xlarge": (192, 96, 2, 2),  # sockets: slurmd -C on a live p5 (facts.md 1.1)
    "p4d.24xlarge": (96, 48, 2, 2),  # EC2 cpu-options table; Sockets=2 from tips-and-tricks.md
    "p6-b200.48xlarge": (192, 96, 2, None),
    "g6e.48xlarge": (192, 96, 2, None),
    "hpc7a.96xlarge": (192, 192, 1, 2),
    "g5.12xlarge": (48, 24, 2, 1),
    "m7i.4xlarge": (16, 8, 2, 1),
}


@pytest.mark.parametrize("name", sorted(n for n, p in load_catalog().items() if p.kind == "aws"))
def test_every_ec2_profile_has_its_published_cpu_layout(name: str) -> None:
    p = get_profile(name)
    assert p is not None
    assert p.cpus and p.cores and p.threads_per_core, f"{name}: vCPUs/cores/threads missing"
    assert p.cores * p.threads_per_core == p.cpus
    assert "DescribeInstanceTypes" in p.sources["cpu_memory"], f"{name}: cite the EC2 API"
    if p.sockets is not None:
        assert p.cpu_layout_known and p.sockets * p.cores_per_socket * p.threads_per_core == p.cpus  # type: ignore[operator]


@pytest.mark.parametrize("name", sorted(EXPECTED_EC2))
def test_ec2_cpu_layout_values(name: str) -> None:
    p = get_profile(name)
    assert p is not None
    assert (p.cpus, p.cores, p.threads_per_core, p.sockets) == EXPECTED_EC2[name]


def test_unknown_sockets_render_cpus_and_threads_only() -> None:
    # p6-b200: 192 vCPU = 96 cores x 2 threads, no published socket count: no socket is invented
    spec = _p5_spec()
    groups = spec["node_groups"]
    assert isinstance(groups, list)
    gpu = next(g for g in groups if g["name"] == "gpu")
    gpu["cloud"]["instance_type"] = "p6-b200.48xlarge"
    files = _render(spec)
    line = next(ln for ln in files["slurm/slurm.conf"].splitlines() if ln.startswith("NodeName=gpu-"))
    assert " CPUs=192 ThreadsPerCore=2 RealMemory=" in line
    assert "Sockets" not in line and "CoresPerSocket" not in line and "Boards" not in line
    assert _comments_before(files["slurm/slurm.conf"], "NodeName=gpu-")[0] == (
        "# gpu: 16 x p6-b200.48xlarge, 96 cores x 2 threads, sockets unknown, "
        "RealMemory = OS-visible memory less slurm.os_memory_reserve_mib"
    )
