"""The Slurm prolog and epilog that give dcgm-exporter its HPC job mapping, run for real by /bin/sh.

The scripts are the render's (templates/dcgm-job-map.sh.j2), with the mapping folder and
/proc/driver/nvidia pointed under a temporary folder, a stand-in nvidia-smi on PATH that prints
what the real one prints for ``--query-gpu=index,pci.bus_id --format=csv,noheader``, and the
environment slurmd gives a prolog (SLURM_JOB_ID, CUDA_VISIBLE_DEVICES as device minors). The file
names and contents are what dcgm-exporter's hpc.go reads: ``<GPU index>`` files, one job id a line.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from clusterforge.clusterspec import load_spec
from clusterforge.render import _env, render_cluster
from clusterforge.render.dcgm_exporter import JOB_MAPPING_DIR

from .conftest import EXAMPLES, ROOT

GOLDEN = ROOT / "tests" / "golden"

# two GPUs whose minors are swapped against their NVML index (the case the lookup exists for)
GPUS = [("0", "00000000:18:00.0", 1), ("1", "00000000:2A:00.0", 0)]


@pytest.fixture
def node(tmp_path: Path) -> Path:
    proc = tmp_path / "proc-nvidia"
    for _, bus, minor in GPUS:
        d = proc / "gpus" / bus[4:].lower()
        d.mkdir(parents=True)
        (d / "information").write_text(f"Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 123\nDevice Minor: \t {minor}\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\n" + "".join(f"echo '{i}, {bus}'\n" for i, bus, _ in GPUS))
    smi.chmod(0o755)
    for phase in ("prolog", "epilog"):
        text = _env().get_template("dcgm-job-map.sh.j2").render(
            cluster="t", version="23.11", phase=phase, mapping_dir=str(tmp_path / "map"), nvidia_proc=str(proc))
        (tmp_path / phase).write_text(text)
    return tmp_path


def _run(node: Path, phase: str, **env: str) -> None:
    path = f"{node / 'bin'}{os.pathsep}{os.environ['PATH']}"
    p = subprocess.run(["/bin/sh", str(node / phase)], env={"PATH": path, **env}, capture_output=True, text=True,
                       timeout=30, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stderr == "", p.stderr


def _mapping(node: Path) -> dict[str, list[str]]:
    d = node / "map"
    return {f.name: f.read_text().splitlines() for f in sorted(d.iterdir()) if not f.name.startswith(".")}


def test_prolog_maps_the_jobs_gpus_by_nvml_index_and_epilog_clears_them(node: Path) -> None:
    _run(node, "prolog", SLURM_JOB_ID="4242", CUDA_VISIBLE_DEVICES="1")  # /dev/nvidia1 = NVML index 0
    assert _mapping(node) == {"0": ["4242"]}
    _run(node, "prolog", SLURM_JOB_ID="4243", CUDA_VISIBLE_DEVICES="0,1")  # a second job sharing GPU 0
    assert _mapping(node) == {"0": ["4242", "4243"], "1": ["4243"]}
    _run(node, "prolog", SLURM_JOB_ID="4243", CUDA_VISIBLE_DEVICES="0,1")  # a prolog run twice: no duplicate
    assert _mapping(node) == {"0": ["4242", "4243"], "1": ["4243"]}
    _run(node, "epilog", SLURM_JOB_ID="4242")
    assert _mapping(node) == {"0": ["4243"], "1": ["4243"]}
    _run(node, "epilog", SLURM_JOB_ID="4243")
    assert _mapping(node) == {}
    _run(node, "epilog", SLURM_JOB_ID="4243")  # an epilog for a job already gone: nothing to do


def test_a_job_without_gpus_maps_nothing(node: Path) -> None:
    _run(node, "prolog", SLURM_JOB_ID="7")
    assert not (node / "map").exists()
    _run(node, "prolog", SLURM_JOB_ID="8", SLURM_JOB_GPUS="")
    assert not (node / "map").exists()


def test_the_prolog_never_fails_the_job(node: Path) -> None:
    """A failing prolog drains the node: without nvidia-smi or with a read-only folder it exits 0."""
    (node / "bin" / "nvidia-smi").unlink()
    _run(node, "prolog", SLURM_JOB_ID="9", CUDA_VISIBLE_DEVICES="0")
    assert not (node / "map").exists()
    if os.geteuid() != 0:  # root writes through a read-only mode
        (node / "map").mkdir(mode=stat.S_IRUSR | stat.S_IXUSR)
        _run(node, "prolog", SLURM_JOB_ID="9", CUDA_VISIBLE_DEVICES="0")


def test_rendered_for_every_compute_group_with_the_exporters_folder() -> None:
    r = render_cluster(load_spec(EXAMPLES / "local.yaml"), base_dir=EXAMPLES)
    pro, epi = r.files["slurm/prolog.d/dcgm-job-map.sh"], r.files["slurm/epilog.d/dcgm-job-map.sh"]
    assert pro.node_path == "/etc/slurm/prolog.d/50-clusterforge-dcgm-job-map" and pro.mode == "0755"
    assert epi.node_path == "/etc/slurm/epilog.d/50-clusterforge-dcgm-job-map"
    assert set(pro.groups) == {"gpu", "cpu"}  # slurm.conf's Prolog glob runs on every compute node
    assert f"dir={JOB_MAPPING_DIR}\n" in pro.content and f"dir={JOB_MAPPING_DIR}\n" in epi.content
    conf = r.files["slurm/slurm.conf"].content
    assert "\nProlog=/etc/slurm/prolog.d/*\n" in conf and "\nEpilog=/etc/slurm/epilog.d/*\n" in conf
    # the dcgm role passes the same folder to dcgm-exporter
    defaults = (ROOT / "roles" / "dcgm" / "defaults" / "main.yml").read_text()
    assert f"\ndcgm_exporter_job_mapping_dir: {JOB_MAPPING_DIR}\n" in defaults
    # no mapping (and no prolog) where no NVIDIA GPU runs dcgm-exporter
    amd = render_cluster(load_spec(EXAMPLES / "amd-mi300x.yaml"), base_dir=EXAMPLES)
    assert not any(n.startswith(("slurm/prolog.d/", "dcgm/")) for n in amd.files)
    # its Prolog folder holds the health check's prolog only (tests/test_healthcheck.py)
    assert [f.node_path for f in amd.files.values() if "/prolog.d/" in f.node_path] == [
        "/etc/slurm/prolog.d/10-clusterforge-healthcheck"]


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_shellcheck_accepts_the_golden_scripts() -> None:
    scripts = sorted(GOLDEN.glob("*/slurm/*.d/dcgm-job-map.sh"))
    assert scripts
    p = subprocess.run(["shellcheck", "-s", "sh", *map(str, scripts)], capture_output=True, text=True, timeout=60,
                       check=False)
    assert p.returncode == 0, p.stdout + p.stderr
