"""slurmctld's thread use in the check: every node is unreachable, and running out of threads is
the host's limit, not a config problem.

After its start slurmctld asks every node to register. In the check no slurmd answers, and Slurm
starts one thread per unanswered node (src/common/forward.c, "Abandon tree"). With the node
addresses local, each of those threads retried its refused connect once a second for up to
MessageTimeout; at 65,536 nodes slurmctld died of ``pthread_create`` (benchmarks/check_scale.py,
docs/performance.md "check at 2,048 to 65,536 nodes").
"""

from __future__ import annotations

import errno
import ipaddress
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clusterforge.check import CheckReport, ProblemKind
from clusterforge.check.environment import MAX_CHECK_NODES, node_address, node_networks, thread_ceiling
from clusterforge.check.slurmctld import NS_READY, STAND_IN_ADDR, Slurmctld, node_routes

from .check_fixture import good_manifest

needs_root_ns = pytest.mark.skipif(
    shutil.which("unshare") is None or shutil.which("ip") is None, reason="needs unshare and ip (iproute2)"
)

# What a connect does in a namespace set up as slurmctld's: the errno name, or "connected".
_PROBE = """
import errno, socket, sys
for addr in sys.argv[1:]:
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect((addr, 6818))
        print(addr, "connected")
    except OSError as exc:
        print(addr, errno.errorcode.get(exc.errno, exc.errno))
    finally:
        s.close()
"""


def _connect_in_namespace(tmp_path: Path, batch: list[str], addresses: list[str]) -> dict[str, str]:
    """Set up a private network namespace with slurmctld's base lines plus ``batch`` and try a TCP
    connect to port 6818 (slurmd's) of each address from inside it."""
    base = ["link set lo up", f"addr add {STAND_IN_ADDR}/32 dev lo", "route add local 0.0.0.0/0 dev lo"]
    ipb = tmp_path / "ip.batch"
    ipb.write_text("\n".join(base + batch) + "\n")
    script = tmp_path / "probe.py"
    script.write_text(_PROBE)
    cp = subprocess.run(
        [
            "unshare",
            "--net",
            "--",
            "sh",
            "-c",
            f'ip -batch "$1" && shift && exec "{sys.executable}" "$@"',
            "sh",
            str(ipb),
            str(script),
            *addresses,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert cp.returncode == 0, cp.stderr
    return dict(line.split() for line in cp.stdout.splitlines())


@needs_root_ns
def test_node_addresses_are_unreachable_so_slurm_does_not_retry(tmp_path: Path) -> None:
    """The first, a middle and the last node address fail with EHOSTUNREACH (which
    slurm_send_addr_recv_msgs does not retry), not ECONNREFUSED (retried once a second)."""
    manifest = good_manifest()
    nodes = [node_address(0), node_address(65_535), node_address(MAX_CHECK_NODES - 1)]
    before = _connect_in_namespace(tmp_path, [], nodes)
    assert set(before.values()) == {"ECONNREFUSED"}, before  # what the check had before
    after = _connect_in_namespace(tmp_path, node_routes(manifest.expect), nodes)
    assert after == {a: errno.errorcode[errno.EHOSTUNREACH] for a in nodes}, after


@needs_root_ns
def test_a_primary_inside_the_node_range_stays_reachable(tmp_path: Path) -> None:
    manifest = good_manifest()
    ctl = manifest.expect.controller
    inside = node_address(300)
    controllers = (ctl.model_copy(update={"address": inside}), *manifest.expect.controllers[1:])
    expect = manifest.expect.model_copy(update={"controllers": controllers})
    routes = node_routes(expect)
    assert routes[-1] == f"route add local {inside}/32 dev lo table local"
    got = _connect_in_namespace(tmp_path, routes, [inside, node_address(301)])
    assert got == {inside: "ECONNREFUSED", node_address(301): "EHOSTUNREACH"}, got


def test_node_networks_cover_exactly_the_node_addresses() -> None:
    nets = node_networks()
    for addr in (node_address(0), node_address(MAX_CHECK_NODES - 1), node_address(12_345)):
        assert any(ipaddress.IPv4Address(addr) in n for n in nets), addr
    # the controllers' loopback addresses (127.0.0.x) and the stand-in address stay outside
    for addr in ("127.0.0.1", "127.0.0.2", STAND_IN_ADDR):
        assert not any(ipaddress.IPv4Address(addr) in n for n in nets), addr


# A real slurmctld 22.05 log of a 65,536-node on-prem check on this machine (vm.max_map_count
# 65,530): primary, then the registration fan-out, then the fatal.
_REAL_LOG = [
    NS_READY,
    "slurmctld: slurmctld version 22.05.8 started on cluster onprem-dgx",
    "slurmctld: Running as primary controller",
    "slurmctld: fatal: _start_msg_tree_internal: pthread_create error Resource temporarily unavailable",
]


def _judge(lines: list[str]) -> CheckReport:
    manifest = good_manifest()
    report = CheckReport(path=Path("."))
    ctld = Slurmctld(report, None, Path("."), Path("."), {}, time.monotonic() + 10, False)  # type: ignore[arg-type]
    ctld.judge(lines, manifest.expect, exited=True, returncode=1)
    return report


def test_running_out_of_threads_is_the_hosts_limit_not_a_config_error() -> None:
    report = _judge(_REAL_LOG)
    kinds = [p.kind for p in report.problems]
    assert kinds == [ProblemKind.ENVIRONMENT], report.problems
    msg = report.problems[0].message
    ceiling, _ = thread_ceiling()
    assert f"about {ceiling:,} threads" in msg and "vm.max_map_count" in msg and "sysctl -w" in msg, msg
    assert report.inconclusive


def test_other_fatal_lines_are_still_config_problems() -> None:
    lines = [*_REAL_LOG[:3], "slurmctld: fatal: Invalid node name specified"]
    report = _judge(lines)
    assert [p.kind for p in report.problems] == [ProblemKind.LOG_ERROR], report.problems
