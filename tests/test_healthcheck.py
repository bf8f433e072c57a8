"""The rendered health check (templates/healthcheck.sh.j2), run for real by bash on a fake node.

Each test takes the program ``clusterforge render`` writes for a node group of an example spec and
runs it with /dev, /sys, /proc and the Slurm spool under a temporary root (CLUSTERFORGE_HC_ROOT),
its state folder there too (CLUSTERFORGE_HC_STATE), and stand-ins on PATH for what it asks: a
``scontrol`` that keeps the node's state and drain reason and records every call, ``nvidia-smi``,
``dmesg``, ``fi_info``, ``dcgmi`` and ``df`` answering what each test writes. The rules under test:
a failure drains only after ``consecutive_failures`` runs in a row, with a reason naming the check
and the value; a pass resumes a node this program drained and never one drained for any other
reason. The values asserted are written here by hand from the specs (8 H100 with 18 NVLinks on
dgx-h100 and p5.48xlarge, 8 HCAs at 400 Gb/s on onprem-dgx, 32 EFA devices on p5.48xlarge).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from clusterforge.clusterspec import load_spec
from clusterforge.render import render_cluster

from .conftest import EXAMPLES, ROOT

PREFIX = "clusterforge-healthcheck: "

SCONTROL = r"""#!/bin/bash
# stand-in scontrol: one node, its state and reason in $CTL/state and $CTL/reason
echo "$*" >>"$CTL/scontrol.calls"
[ -e "$CTL/scontrol-down" ] && { echo "slurm_load_node error: Unable to contact slurm controller" >&2; exit 1; }
case "$1 $2" in
  "show node")
    echo "NodeName=$3 Arch=x86_64 CoresPerSocket=56"
    echo "   State=$(cat "$CTL/state") ThreadsPerCore=2 TmpDisk=0 Weight=10 Owner=N/A"
    r=$(cat "$CTL/reason" 2>/dev/null)
    [ -n "$r" ] && echo "   Reason=$r [root@2025-06-01T10:00:00]"
    echo "   Comment=(null)"
    ;;
  "update NodeName="*)
    case "$3" in
      State=DRAIN) s=$(cat "$CTL/state"); echo "${s%+DRAIN}+DRAIN" >"$CTL/state"; echo "${4#Reason=}" >"$CTL/reason" ;;
      State=RESUME) echo IDLE >"$CTL/state"; : >"$CTL/reason" ;;
    esac
    ;;
esac
"""

# answers from files the test writes; "$CTL/<name>.rc" makes it fail with that code
NVIDIA_SMI = r"""#!/bin/bash
rcfile="$CTL/nvidia-smi.rc"
if [ -e "$CTL/nvidia-smi.fail-once" ]; then rm -f "$CTL/nvidia-smi.fail-once"; echo "Unable to determine the device handle for GPU0000:18:00.0: Unknown Error"; exit 15; fi
[ -e "$rcfile" ] && { echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."; exit "$(cat "$rcfile")"; }
case "$1" in
  --query-gpu=*) cat "$CTL/query-gpu" ;;
  --query-remapped-rows=*) cat "$CTL/remapped-rows" ;;
  nvlink) cat "$CTL/nvlink" ;;
  *) exit 2 ;;
esac
"""

SIMPLE = r"""#!/bin/bash
# stand-in {name}: prints $CTL/{name}.out, exits with $CTL/{name}.rc (default 0)
echo "$*" >>"$CTL/{name}.calls"
cat "$CTL/{name}.out" 2>/dev/null
exit "$(cat "$CTL/{name}.rc" 2>/dev/null || echo 0)"
"""

DF = r"""#!/bin/bash
# stand-in df -Pk PATH: $CTL/df.avail-kib free (KiB) when PATH exists
[ -e "${@: -1}" ] || { echo "df: ${@: -1}: No such file or directory" >&2; exit 1; }
echo "Filesystem 1024-blocks Used Available Capacity Mounted on"
echo "/dev/vda 100000000 1000 $(cat "$CTL/df.avail-kib") 1% /"
"""

BUSES = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]  # an 8-GPU HGX board's bus ids


def _gpu_rows(n: int = 8, ecc: str = "0") -> str:
    return "".join(f"{i}, 00000000:{BUSES[i].upper()}:00.0, {ecc if i == 2 else '0'}\n" for i in range(n))


def _nvlink(inactive: tuple[int, int] | None = None) -> str:
    out = ""
    for g in range(8):
        out += f"GPU {g}: NVIDIA H100 80GB HBM3 (UUID: GPU-{g:08x}-0000-0000-0000-000000000000)\n"
        for link in range(18):
            state = "<inactive>" if (g, link) == inactive else "26.562 GB/s"
            out += f"\t Link {link}: {state}\n"
    return out


@dataclass
class Node:
    """A fake node: the rendered program, its root, stand-ins and the Slurm state they keep."""

    tmp: Path
    script: Path
    name: str

    @property
    def root(self) -> Path:
        return self.tmp / "root"

    @property
    def ctl(self) -> Path:
        return self.tmp / "ctl"

    @property
    def state_dir(self) -> Path:
        return self.tmp / "state"

    def run(self, *args: str, job: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {
            "PATH": f"{self.tmp / 'bin'}:/usr/bin:/bin",
            "CTL": str(self.ctl),
            "CLUSTERFORGE_HC_ROOT": str(self.root),
            "CLUSTERFORGE_HC_STATE": str(self.state_dir),
            "CLUSTERFORGE_HC_RETRY_PAUSE": "0",
            "SLURMD_NODENAME": self.name,
        }
        if job:
            env["SLURM_JOB_ID"] = job
        return subprocess.run(["bash", str(self.script), *args], env=env, capture_output=True, text=True,
                              timeout=60, check=False)

    def write(self, name: str, text: str) -> None:
        (self.ctl / name).write_text(text)

    def updates(self) -> list[str]:
        """The scontrol calls that changed the node (drain, resume), in order."""
        calls = self.ctl / "scontrol.calls"
        return [c for c in calls.read_text().splitlines() if c.startswith("update")] if calls.exists() else []

    def slurm(self) -> tuple[str, str]:
        """(state, reason) as the stand-in slurmctld has them."""
        return (self.ctl / "state").read_text().strip(), (self.ctl / "reason").read_text().strip()

    def set_slurm(self, state: str, reason: str = "") -> None:
        self.write("state", state + "\n")
        self.write("reason", reason + "\n" if reason else "")

    def log(self) -> list[str]:
        return (self.state_dir / "log").read_text().splitlines()

    def remove(self, rel: str) -> None:
        (self.root / rel).unlink()

    def mknod(self, rel: str, minor: int) -> None:
        p = self.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        os.mknod(p, stat.S_IFCHR | 0o666, os.makedev(195, minor))

    def ib_port(self, dev: str, state: str = "4: ACTIVE", rate: str = "400 Gb/sec (4X NDR)",
                driver: str = "mlx5_core") -> None:
        d = self.root / "sys" / "class" / "infiniband" / dev
        (d / "ports" / "1").mkdir(parents=True, exist_ok=True)
        (d / "ports" / "1" / "state").write_text(state + "\n")
        (d / "ports" / "1" / "rate").write_text(rate + "\n")
        drv = self.root / "sys" / "bus" / "pci" / "drivers" / driver
        drv.mkdir(parents=True, exist_ok=True)
        (d / "device").mkdir(exist_ok=True)
        link = d / "device" / "driver"
        if link.is_symlink():
            link.unlink()
        link.symlink_to(drv)


@cache
def _program(spec: str, group: str) -> str:
    return render_cluster(load_spec(EXAMPLES / spec), base_dir=EXAMPLES).files[f"health/{group}.sh"].content


def _node(tmp_path: Path, spec: str, group: str, name: str, mounts: tuple[str, ...] = ()) -> Node:
    if os.geteuid() != 0:
        pytest.skip("the fake /dev needs mknod (root)")
    script = tmp_path / "clusterforge-healthcheck"
    script.write_text(_program(spec, group))
    n = Node(tmp_path, script, name)
    for d in ("bin", "ctl", "root/var/spool/slurmd", "root/proc/self"):
        (tmp_path / d).mkdir(parents=True)
    stand_ins = {"scontrol": SCONTROL, "nvidia-smi": NVIDIA_SMI, "df": DF}
    stand_ins |= {c: SIMPLE.replace("{name}", c) for c in ("dmesg", "journalctl", "fi_info", "dcgmi")}
    for cmd, text in stand_ins.items():
        (tmp_path / "bin" / cmd).write_text(text)
        (tmp_path / "bin" / cmd).chmod(0o755)
    n.set_slurm("IDLE")
    n.write("df.avail-kib", str(50 * 1024 * 1024) + "\n")  # 50 GiB
    n.write("query-gpu", _gpu_rows())
    n.write("remapped-rows", "".join(f"00000000:{b.upper()}:00.0, No, No\n" for b in BUSES))
    n.write("nvlink", _nvlink())
    n.write("dmesg.out", "[    0.000000] Linux version 6.8.0-1015-aws\n[   12.3] nvidia-nvswitch: Probing device\n")
    for i in range(8):
        n.mknod(f"dev/nvidia{i}", i)
    mi = "".join(f"{30 + i} 1 0:{50 + i} / {m} rw,relatime shared:{i} - nfs4 srv:/x rw\n" for i, m in enumerate(mounts))
    (n.root / "proc" / "self" / "mountinfo").write_text("22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda rw\n" + mi)
    return n


@pytest.fixture
def gpu(tmp_path: Path) -> Node:
    """gpu-002 of examples/local.yaml: 8 H100 (dgx-h100), ethernet, its /shared file system."""
    return _node(tmp_path, "local.yaml", "gpu", "gpu-002", mounts=("/shared",))


@pytest.fixture
def dgx(tmp_path: Path) -> Node:
    """dgx-007 of examples/onprem-dgx.yaml: 8 H100, InfiniBand NDR on 8 HCAs, /home and /lustre."""
    n = _node(tmp_path, "onprem-dgx.yaml", "dgx", "dgx-007", mounts=("/home", "/lustre"))
    for h in ("mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"):
        n.ib_port(h)
    n.ib_port("mlx5_1", state="1: DOWN", rate="10 Gb/sec (4X SDR)")  # an unused port NCCL is not given
    return n


@pytest.fixture
def p5(tmp_path: Path) -> Node:
    """gpu-003 of examples/p5-training.yaml: a p5.48xlarge with 32 EFA devices, /fsx and /home."""
    n = _node(tmp_path, "p5-training.yaml", "gpu", "gpu-003", mounts=("/fsx", "/home"))
    for i in range(32):
        n.ib_port(f"rdmap{i}s27", rate="100 Gb/sec (4X EDR)", driver="efa")
    n.write("fi_info.out", "".join(
        f"provider: efa\n    fabric: efa\n    domain: rdmap{i}s27-rdm\n    version: 122.0\n    type: FI_EP_RDM\n"
        for i in range(32)))
    return n


# ----------------------------------------------------------------------------- the rules


def test_a_healthy_node_passes_and_nothing_is_changed(gpu: Node) -> None:
    for _ in range(3):
        p = gpu.run()
        assert p.returncode == 0, p.stderr
    assert gpu.updates() == []
    assert gpu.slurm() == ("IDLE", "")
    assert [ln.split(" ", 3)[1:2] + ln.split(" ", 3)[3:] for ln in gpu.log()] == [["periodic", "pass"]] * 3
    assert (gpu.state_dir / "failures").read_text() == ""


def test_one_failing_run_does_not_drain(gpu: Node) -> None:
    gpu.remove("dev/nvidia3")
    p = gpu.run()
    assert p.returncode == 1
    assert gpu.updates() == []
    assert "failing, not draining yet: gpu_count 1 of 2: gpu count 7 of 8 (/dev/nvidia3 missing);" in gpu.log()[-1]
    gpu.mknod("dev/nvidia3", 3)  # back before the next run: the count starts again
    assert gpu.run().returncode == 0
    gpu.remove("dev/nvidia3")
    assert gpu.run().returncode == 1
    assert gpu.updates() == []
    assert gpu.slurm() == ("IDLE", "")


def test_consecutive_failures_drain_with_the_check_and_value(gpu: Node) -> None:
    gpu.remove("dev/nvidia3")
    gpu.run()
    p = gpu.run()
    assert p.returncode == 1
    reason = "clusterforge-healthcheck: gpu count 7 of 8 (/dev/nvidia3 missing)"
    assert gpu.updates() == [f"update NodeName=gpu-002 State=DRAIN Reason={reason}"]
    assert gpu.slurm() == ("IDLE+DRAIN", reason)
    # still failing: drained once, its first reason kept
    gpu.remove("dev/nvidia5")
    gpu.run()
    assert len(gpu.updates()) == 1 and gpu.slurm() == ("IDLE+DRAIN", reason)


def test_a_pass_after_its_drain_resumes_the_node(gpu: Node) -> None:
    gpu.set_slurm("IDLE+DRAIN", PREFIX + "gpu count 7 of 8 (/dev/nvidia3 missing)")
    p = gpu.run()
    assert p.returncode == 0, p.stderr
    assert gpu.updates() == ["update NodeName=gpu-002 State=RESUME"]
    assert gpu.slurm() == ("IDLE", "")
    assert gpu.log()[-1].endswith("pass; resume (was drained for: gpu count 7 of 8 (/dev/nvidia3 missing))")


@pytest.mark.parametrize("reason", ["operator-maintenance", "Not responding", "Prolog error",
                                    "replacing dimm; clusterforge-healthcheck: later"])
def test_a_drain_someone_else_set_is_never_touched(gpu: Node, reason: str) -> None:
    gpu.set_slurm("IDLE+DRAIN", reason)
    for _ in range(3):
        assert gpu.run().returncode == 0
    gpu.remove("dev/nvidia3")
    for _ in range(3):
        assert gpu.run().returncode == 1
    for _ in range(2):
        assert gpu.run("prolog", job="17").returncode == 1
        assert gpu.run("epilog", job="17").returncode == 0
    assert gpu.updates() == []
    assert gpu.slurm() == ("IDLE+DRAIN", reason)
    assert f"pass; left alone, drained by someone else: {reason}" in gpu.log()[0]


def test_no_controller_no_drain_and_the_count_goes_on(gpu: Node) -> None:
    gpu.remove("dev/nvidia3")
    gpu.write("scontrol-down", "")
    gpu.run()
    gpu.run()
    assert gpu.updates() == []
    assert "slurmctld did not answer, not drained" in gpu.log()[-1]
    (gpu.ctl / "scontrol-down").unlink()
    gpu.run()  # the third failing run finds the controller and drains
    assert gpu.slurm()[1] == PREFIX + "gpu count 7 of 8 (/dev/nvidia3 missing)"


def test_the_prolog_tries_again_before_it_drains(gpu: Node) -> None:
    gpu.write("nvidia-smi.fail-once", "")  # a transient failure: the second attempt passes
    p = gpu.run("prolog", job="41")
    assert p.returncode == 0, p.stderr
    assert gpu.updates() == []
    assert gpu.log()[-1].split(" ", 3)[1::2] == [
        "prolog", "attempt 1 of 2 failed: nvidia-smi failed (rc 15: Unable to determine the device handle for "
        "GPU0000:18:00.0: Unknown Error)"]
    gpu.remove("dev/nvidia3")
    p = gpu.run("prolog", job="42")
    assert p.returncode == 1  # the job must not start here: slurmd requeues it
    reason = PREFIX + "gpu count 7 of 8 (/dev/nvidia3 missing) (prolog of job 42)"
    assert gpu.updates() == [f"update NodeName=gpu-002 State=DRAIN Reason={reason}"]
    # the periodic check returns it once the GPU is back
    gpu.mknod("dev/nvidia3", 3)
    assert gpu.run().returncode == 0
    assert gpu.updates()[-1] == "update NodeName=gpu-002 State=RESUME"


def test_the_epilog_runs_dcgm_level_1_and_only_a_passing_diagnostic_returns_the_node(gpu: Node) -> None:
    assert gpu.run("epilog", job="7").returncode == 0
    assert (gpu.ctl / "dcgmi.calls").read_text() == "diag -r 1\n"
    gpu.write("dcgmi.rc", "226")
    gpu.write("dcgmi.out", "| Deployment | Fail |\n| Memory | Fail - GPU 3: DBE |\n")
    p = gpu.run("epilog", job="8")
    assert p.returncode == 0  # drained with its own reason; a failing epilog would add "Epilog error"
    reason = PREFIX + "dcgm diag level 1 failed (Deployment Fail) (epilog of job 8)"
    assert gpu.slurm() == ("IDLE+DRAIN", reason)
    assert (gpu.ctl / "dcgmi.calls").read_text() == "diag -r 1\n" * 3  # tried twice before draining
    gpu.run()  # the periodic check runs the diagnostic while drained for it: still failing
    assert gpu.slurm() == ("IDLE+DRAIN", reason)
    (gpu.ctl / "dcgmi.rc").unlink()
    assert gpu.run().returncode == 0
    assert gpu.slurm() == ("IDLE", "")
    calls = (gpu.ctl / "dcgmi.calls").read_text().splitlines()
    gpu.run()  # not drained for it: the periodic check does not run the diagnostic
    assert (gpu.ctl / "dcgmi.calls").read_text().splitlines() == calls


def test_dry_run_prints_every_check_and_changes_nothing(gpu: Node) -> None:
    gpu.remove("dev/nvidia3")
    p = gpu.run("--dry-run")
    assert p.returncode == 1
    assert p.stdout.splitlines() == [
        "FAIL gpu_count: gpu count 7 of 8 (/dev/nvidia3 missing)", "pass xid", "pass gpu_memory", "pass nvlink",
        "pass mounts", "pass spool", "pass dcgm_diag",
    ]
    assert gpu.updates() == [] and not (gpu.state_dir / "failures").exists()
    assert gpu.run("--drain-everything").returncode == 2


# ------------------------------------------------------------------------------ the checks


def _drains(n: Node) -> str:
    """The reason the second failing run drains with ('' when it does not drain)."""
    n.run()
    n.run()
    return n.slurm()[1].removeprefix(PREFIX) if n.slurm()[0].endswith("DRAIN") else ""


def test_nvidia_smi_listing_fewer_gpus_than_device_files(gpu: Node) -> None:
    gpu.write("query-gpu", _gpu_rows(7))
    assert _drains(gpu) == "gpu count 7 of 8 (nvidia-smi lists 7)"


def test_a_hung_driver(gpu: Node) -> None:
    gpu.write("nvidia-smi.rc", "9")
    assert _drains(gpu) == ("nvidia-smi failed (rc 9: NVIDIA-SMI has failed because it couldn't communicate with "
                            "the NVIDIA driver.)")


@pytest.mark.parametrize(("line", "want"), [
    ("[ 8012.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.",
     "xid 79 on gpu 0000:3b:00 since boot"),
    ("[ 8012.5] NVRM: Xid (PCI:0000:9a:00): 48, pid=' ', name=, An uncorrectable double bit error",
     "xid 48 on gpu 0000:9a:00 since boot"),
    ("[ 8012.5] NVRM: Xid (PCI:0000:3b:00): 13, pid=1234, name=python, Graphics Exception", ""),  # the job's bug
    ("[ 8012.5] NVRM: Xid (PCI:0000:3b:00): 31, pid=1234, name=python, MMU Fault", ""),
])
def test_xid_events_since_boot(gpu: Node, line: str, want: str) -> None:
    gpu.write("dmesg.out", f"[    0.0] Linux version 6.8.0\n{line}\n")
    assert _drains(gpu) == want


def test_xid_from_the_journal_when_dmesg_is_refused(gpu: Node) -> None:
    gpu.write("dmesg.rc", "1")  # dmesg: read kernel buffer failed: Operation not permitted
    gpu.write("journalctl.out", "NVRM: Xid (PCI:0000:5d:00): 95, pid=77, name=torchrun, Uncontained ECC error\n")
    assert _drains(gpu) == "xid 95 on gpu 0000:5d:00 since boot"
    assert (gpu.ctl / "journalctl.calls").read_text().splitlines()[0] == "-k -b -q -o cat --no-pager"


def test_an_unreadable_kernel_log_drains_nothing(gpu: Node) -> None:
    gpu.write("dmesg.rc", "1")
    gpu.write("journalctl.rc", "1")
    assert _drains(gpu) == ""


def test_uncorrectable_ecc_errors(gpu: Node) -> None:
    gpu.write("query-gpu", _gpu_rows(ecc="3"))
    assert _drains(gpu) == "gpu 2 (00000000:3A:00.0) 3 uncorrectable ECC error(s) since the driver loaded"


def test_ecc_not_reported_is_not_an_error(gpu: Node) -> None:
    gpu.write("query-gpu", _gpu_rows(ecc="[N/A]"))
    assert _drains(gpu) == ""


@pytest.mark.parametrize(("row", "want"), [
    ("00000000:9A:00.0, Yes, No", "gpu 00000000:9A:00.0 row remap pending (reset the GPU)"),
    ("00000000:9A:00.0, No, Yes", "gpu 00000000:9A:00.0 row remap failed (replace the GPU)"),
])
def test_row_remaps(gpu: Node, row: str, want: str) -> None:
    gpu.write("remapped-rows", "00000000:18:00.0, No, No\n" + row + "\n")
    assert _drains(gpu) == want


def test_an_nvlink_down(gpu: Node) -> None:
    gpu.write("nvlink", _nvlink(inactive=(3, 11)))
    assert _drains(gpu) == "nvlink gpu 3 17 of 18 links active"


def test_infiniband_ports_at_their_rate_pass(dgx: Node) -> None:
    p = dgx.run()
    assert p.returncode == 0, p.stderr + p.stdout


def test_an_infiniband_port_down(dgx: Node) -> None:
    dgx.ib_port("mlx5_4", state="1: DOWN")
    assert _drains(dgx) == "ib mlx5_4 port 1 DOWN, not ACTIVE"


def test_an_infiniband_port_below_its_rate(dgx: Node) -> None:
    dgx.ib_port("mlx5_9", rate="200 Gb/sec (4X HDR)")  # a cable or switch port trained down
    assert _drains(dgx) == "ib mlx5_9 port 1 rate 200 Gb/s, expected 400"


def test_a_missing_mount(dgx: Node) -> None:
    mi = dgx.root / "proc" / "self" / "mountinfo"
    mi.write_text("\n".join(ln for ln in mi.read_text().splitlines() if " /lustre " not in ln) + "\n")
    assert _drains(dgx) == "mount /lustre missing"


def test_a_full_slurm_spool(dgx: Node) -> None:
    dgx.write("df.avail-kib", "524288\n")  # 512 MiB
    assert _drains(dgx) == "slurm spool /var/spool/slurmd 512 MiB free, below 1024 MiB"


def test_efa_devices_ports_and_libfabric_pass(p5: Node) -> None:
    p = p5.run()
    assert p.returncode == 0, p.stderr + p.stdout
    assert (p5.ctl / "fi_info.calls").read_text() == "-p efa -t FI_EP_RDM\n"


def test_an_efa_port_down(p5: Node) -> None:
    p5.ib_port("rdmap17s27", state="1: DOWN", driver="efa")
    assert _drains(p5) == "efa rdmap17s27 port 1 DOWN, not ACTIVE"


def test_an_efa_device_missing(p5: Node) -> None:
    shutil.rmtree(p5.root / "sys" / "class" / "infiniband" / "rdmap31s27")
    assert _drains(p5) == "efa devices 31 of 32 in /sys/class/infiniband"


def test_libfabric_listing_fewer_efa_devices(p5: Node) -> None:
    p5.write("fi_info.out", "provider: efa\n    domain: rdmap0s27-rdm\n    type: FI_EP_RDM\n")
    assert _drains(p5) == "efa devices 1 of 32 listed by fi_info -p efa"


# ------------------------------------------------------------------------------ the render


def _rendered_scripts(tmp_path: Path) -> list[Path]:
    out = []
    for spec in sorted(EXAMPLES.glob("*.yaml")):
        for name, f in render_cluster(load_spec(spec), base_dir=EXAMPLES).files.items():
            if name.startswith("health/"):
                p = tmp_path / spec.stem / name
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_text(f.content)
                out.append(p)
    return out


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_shellcheck_accepts_every_rendered_health_script(tmp_path: Path) -> None:
    scripts = _rendered_scripts(tmp_path)
    assert len(scripts) >= 20  # every example: a program per compute group, a prolog and an epilog
    p = subprocess.run(["shellcheck", "--severity=style", *map(str, scripts)], capture_output=True, text=True,
                       timeout=120, check=False)
    assert p.returncode == 0, p.stdout + p.stderr


def test_slurm_conf_runs_the_program_and_its_prolog_and_epilog() -> None:
    r = render_cluster(load_spec(EXAMPLES / "onprem-dgx.yaml"), base_dir=EXAMPLES)
    conf = r.files["slurm/slurm.conf"].content
    for line in ("HealthCheckProgram=/usr/local/sbin/clusterforge-healthcheck", "HealthCheckInterval=300",
                 "HealthCheckNodeState=ANY", "Prolog=/etc/slurm/prolog.d/*", "Epilog=/etc/slurm/epilog.d/*",
                 "SchedulerParameters=nohold_on_prolog_fail"):
        assert f"\n{line}\n" in conf, line
    pro, epi = r.files["health/prolog.d/healthcheck.sh"], r.files["health/epilog.d/healthcheck.sh"]
    # before the dcgm job map's prolog (50-), after its epilog: glob(3) order
    assert pro.node_path == "/etc/slurm/prolog.d/10-clusterforge-healthcheck"
    assert epi.node_path == "/etc/slurm/epilog.d/90-clusterforge-healthcheck"
    assert set(pro.groups) == set(epi.groups) == {"dgx", "cpu"} and pro.mode == epi.mode == "0755"
    assert pro.content.rstrip().endswith("exec /usr/local/sbin/clusterforge-healthcheck prolog")
    assert epi.content.rstrip().endswith("exec /usr/local/sbin/clusterforge-healthcheck epilog")
    # the CPU group's program checks what a CPU node has: its mounts and its spool
    cpu = r.files["health/cpu.sh"].content
    assert 'checks_periodic="mounts spool"' in cpu and "nvidia-smi" not in cpu and "dcgmi" not in cpu


def test_a_spec_without_prolog_and_epilog_checks_and_without_the_job_map() -> None:
    spec = load_spec(EXAMPLES / "amd-mi300x.yaml")
    hc = spec.health_checks.model_copy(update={"prolog": False, "epilog": False})
    r = render_cluster(spec.model_copy(update={"health_checks": hc}), base_dir=EXAMPLES)
    conf = r.files["slurm/slurm.conf"].content
    assert "Prolog=" not in conf and "Epilog=" not in conf and "nohold_on_prolog_fail" not in conf
    assert not any(n.startswith(("health/prolog.d/", "health/epilog.d/")) for n in r.files)
    # only the epilog: Epilog= alone (a glob matching no file would fail every job)
    hc = spec.health_checks.model_copy(update={"prolog": False})
    r = render_cluster(spec.model_copy(update={"health_checks": hc}), base_dir=EXAMPLES)
    conf = r.files["slurm/slurm.conf"].content
    assert "Prolog=" not in conf and "\nEpilog=/etc/slurm/epilog.d/*\n" in conf


def test_the_efa_fi_info_is_on_the_programs_path() -> None:
    text = render_cluster(load_spec(EXAMPLES / "p5-training.yaml"), base_dir=EXAMPLES).files["health/gpu.sh"].content
    defaults = (ROOT / "roles" / "efa" / "meta" / "argument_specs.yml").read_text()
    assert "default: /opt/amazon/efa/bin/fi_info" in defaults  # where the efa role finds the installer's
    assert ":/opt/amazon/efa/bin\n" in text
