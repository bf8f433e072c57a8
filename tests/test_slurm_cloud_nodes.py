"""CLOUD nodes of a fixed-size ASG group with the real Slurm daemons (Debian's 22.05).

slurmctld and two slurmds run in network namespaces ``cfcloud-*`` with a private munged. The
config is the renderer's cloud settings (from a rendered example) plus a small node line with the
renderer's ``State=``. Expected values are what the daemons printed by hand in the experiments
(sinfo ``idle~`` before any slurmd, NodeAddr from the registration, requeue with Restarts=1).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator

import pytest

from .slurm_netns import cloud_slurm, sh, wait

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(
        shutil.which("slurmctld") is None or os.geteuid() != 0,
        reason="needs Debian's slurmctld/slurmd and root (CI installs them and runs as root)",
    ),
]
NET = "10.85.0"  # not the crash test's 10.83 (tests/test_local_cluster.py): the suites run side by side
NS = ("cfcloud-ctl", "cfcloud-n1", "cfcloud-n2")


@pytest.fixture
def cloud_cluster() -> Iterator[dict[str, object]]:
    with cloud_slurm(NET, NS, cluster="cfc") as c:
        yield c


def node(ctl: Callable[..., str], name: str) -> dict[str, str]:
    out = ctl("scontrol", "show", "node", "-o", name)
    return dict(f.split("=", 1) for f in out.split() if "=" in f)


def test_cloud_nodes_register_requeue_and_return(cloud_cluster: dict[str, object]) -> None:
    ctl: Callable[..., str] = cloud_cluster["ctl"]  # type: ignore[assignment]
    slurmd: Callable[[str, str], subprocess.Popen[bytes]] = cloud_cluster["slurmd"]  # type: ignore[assignment]
    sinfo = lambda: ctl("sinfo", "-h", "-N", "-o", "%N %T").split()  # noqa: E731
    assert sinfo() == ["c-001", "idle~", "c-002", "idle~"]  # no instance yet: powered down, shown
    first = slurmd(NS[1], "c-001")
    slurmd(NS[2], "c-002")
    wait("both nodes idle", lambda: sinfo() == ["c-001", "idle", "c-002", "idle"])
    assert node(ctl, "c-001")["NodeAddr"] == f"{NET}.11"
    assert node(ctl, "c-002")["NodeAddr"] == f"{NET}.12"
    assert sorted(ctl("srun", "-N2", "hostname", timeout=20).split()) == ["c-001", "c-002"]

    jid = ctl("sbatch", "--parsable", "--requeue", "-w", "c-001", "-o", "/dev/null", "--wrap", "sleep 300").strip()
    job = lambda: dict(f.split("=", 1) for f in ctl("scontrol", "show", "job", "-o", jid).split() if "=" in f)  # noqa: E731
    wait("job running", lambda: job()["JobState"] == "RUNNING")
    first.terminate()  # the instance is gone
    first.wait(5)
    # what the product does for a departed instance (clusterforge-cloud-agent, `local rejoin`): drain,
    # then DOWN, which keeps the DRAIN flag. A plain DOWN is undone by one late answer of the departing
    # slurmd under ReturnToService=2 (slurmctld handles it after the update on a loaded machine: a CI
    # run found the node IDLE+CLOUD here), and the requeued job could start on the lost node
    ctl("scontrol", "update", "nodename=c-001", "state=drain", "reason=instance i-0abc terminated")
    ctl("scontrol", "update", "nodename=c-001", "state=down", "reason=instance i-0abc terminated")
    wait("job requeued", lambda: job()["JobState"] == "PENDING" and job()["Restarts"] == "1")
    # DOWN+DRAIN, or IDLE+DRAIN after such a late answer: never schedulable, the reason kept
    assert "DRAIN" in node(ctl, "c-001")["State"].split("+")
    assert "instance i-0abc terminated" in ctl("scontrol", "show", "node", "c-001")

    # the replacement instance: same name, new address
    sh("ip", "-n", NS[1], "addr", "flush", "dev", "eth0")
    sh("ip", "-n", NS[1], "addr", "add", f"{NET}.21/24", "dev", "eth0")
    slurmd(NS[1], "c-001")
    wait("c-001 back", lambda: node(ctl, "c-001")["NodeAddr"] == f"{NET}.21")
    # the drain stays through the re-registration until the new instance's node agent lifts it
    # (clusterforge/aws/node_agent.py resume_stale_drain: the reason is its name's previous instance's)
    assert "DRAIN" in node(ctl, "c-001")["State"].split("+")
    ctl("scontrol", "update", "nodename=c-001", "state=resume")
    wait("c-001 usable", lambda: node(ctl, "c-001")["State"] in ("IDLE+CLOUD", "ALLOCATED+CLOUD", "MIXED+CLOUD"))
