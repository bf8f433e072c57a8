"""clusterforge.check: the real-daemon check of a rendered Slurm config.

The ``slurm`` tests start the real Debian slurmctld/slurmd (and a private munged when the host has
none) on tests/fixtures/check/good or on a copy edited into one known failure; each asserts the
problem kind the check must report. They need root and Slurm, which CI has. The fixture is a
22.05 render (the host's daemons); relabelled as a 24.05 or 25.05 render it is loaded by the
chrooted 24.11 / 26.05 of the cached root filesystems (built by the ``release_daemons`` fixture
when missing).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from clusterforge import check
from clusterforge.check import CheckReport, ProblemKind, check_dir, compare, copies, format_report
from clusterforge.check import slurmd as probe
from clusterforge.render.manifest import Manifest

from .check_fixture import good_manifest, release_daemons

__all__ = ["release_daemons"]  # the session fixture, imported for the tests below

GOOD = Path(__file__).parent / "fixtures" / "check" / "good"
ROOT = Path(__file__).resolve().parents[1]

slurm = pytest.mark.skipif(
    shutil.which("slurmctld") is None or os.geteuid() != 0,
    reason="needs Debian's slurmctld/slurmd/munge and root",
)

Edit = Callable[[Path], None]


def replace(rel: str, old: str, new: str) -> Edit:
    def edit(d: Path) -> None:
        p = d / rel
        text = p.read_text()
        assert old in text, f"{old!r} not in {rel}"  # a fixture change must not make a test vacuous
        p.write_text(text.replace(old, new))

    return edit


def edit_expect(change: Callable[[dict[str, Any]], None]) -> Edit:
    """Edit ``expect`` as data; the result must still be a valid typed manifest (so a test is
    about the expectation, never about a manifest the check refuses to read)."""

    def edit(d: Path) -> None:
        data = Manifest.read(d).model_dump(mode="json")
        change(data["expect"])
        (d / "manifest.json").write_text(Manifest.model_validate(data).to_text())

    return edit


def run_check(tmp_path: Path, *edits: Edit, timeout_s: float = 60) -> CheckReport:
    # 60 s, not the CLI's 30: the bound is for hangs, and a shared CI runner can be slow.
    d = tmp_path / "rendered"
    shutil.copytree(GOOD, d)
    for e in edits:
        e(d)
    report = check_dir(d, timeout_s=timeout_s)
    print(format_report(report))  # shown by pytest when the test fails
    return report


def messages(report: CheckReport, kind: ProblemKind) -> str:
    return "\n".join(p.message for p in report.problems if p.kind is kind)


@pytest.fixture
def workdirs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The private folders the checks of one test create (each child's argv names its own)."""
    made: list[str] = []
    real = tempfile.mkdtemp

    def spy(*args: Any, **kwargs: Any) -> str:
        path = str(real(*args, **kwargs))
        if os.path.basename(path).startswith("clusterforge-check-"):
            made.append(path)
        return path

    monkeypatch.setattr(tempfile, "mkdtemp", spy)
    return made


def leftovers(workdirs: list[str], settle_s: float = 10.0) -> list[str]:
    """Folders and processes of these checks that outlived them. A process SIGKILLed a moment ago
    can stay in /proc a little while on a loaded machine: look again for up to ``settle_s``."""
    end = time.monotonic() + settle_s
    while (found := _leftovers_now(workdirs)) and time.monotonic() < end:
        time.sleep(0.2)
    return found


def _leftovers_now(workdirs: list[str]) -> list[str]:
    found = [d for d in workdirs if os.path.exists(d)]
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(d in cmd for d in workdirs):
            found.append(f"{proc.name}: {cmd}")
    return found


# --- pure parsing: no daemons --------------------------------------------------------------


def test_parse_kv_keeps_values_with_spaces_and_equals() -> None:
    kv = compare.parse_kv("NodeName=gpu-001 CfgTRES=cpu=224,mem=2040000M OS=Linux 6.1.0 #1 SMP Reason=x [root@1]")
    assert kv["NodeName"] == "gpu-001"
    assert kv["CfgTRES"] == "cpu=224,mem=2040000M"
    assert kv["OS"] == "Linux 6.1.0 #1 SMP"
    assert kv["Reason"] == "x [root@1]"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("3-00:00:00", 3 * 86400),
        ("72:00:00", 3 * 86400),
        ("90", 5400),
        ("1-12", 36 * 3600),
        ("UNLIMITED", None),
    ],
)
def test_slurm_time_formats(text: str, seconds: int | None) -> None:
    assert compare.slurm_seconds(text) == seconds


def test_gres_normalisation_drops_socket_affinity() -> None:
    assert compare.norm_gres("gpu:h100:8(S:0-1)") == compare.norm_gres("gpu:h100:8")
    assert compare.norm_gres("(null)") == []


def test_parse_slurmd_gres_line() -> None:
    dev = probe.parse_gres_line(
        "slurmd-gpu-001: Gres Name=gpu Type=h100 Count=1 Index=0 ID=7696487 File=/dev/nvidia0 "
        "Cores=0-55 CoreCnt=224 Links=-1,18,18,18,18,18,18,18"
    )
    assert dev is not None
    assert (dev.name, dev.type, dev.count, dev.files) == ("gpu", "h100", 1, ("/dev/nvidia0",))
    assert dev.fields["Links"] == "-1,18,18,18,18,18,18,18"


def test_set_key_replaces_case_insensitively_and_appends() -> None:
    text, old = copies.set_key("statesavelocation=/var/spool/x\nNodeName=a CPUs=1\n", "StateSaveLocation", "/t")
    assert old == "/var/spool/x"
    assert text == "NodeName=a CPUs=1\nStateSaveLocation=/t\n"
    text, old = copies.set_key(text, "AuthInfo", None)
    assert old is None and "AuthInfo" not in text


def test_node_addresses_hold_every_node_a_slurm_cluster_can_have() -> None:
    # the first scheme (127.1.<i // 250>.<i % 250 + 1>) wrote 127.1.256.1 for node 64,000
    import ipaddress

    from clusterforge.check.environment import node_address

    addrs = [node_address(i) for i in range(65_536 + 10)]
    assert len(set(addrs)) == len(addrs)
    parsed = [ipaddress.IPv4Address(a) for a in addrs]
    assert all(a in ipaddress.IPv4Network("127.0.0.0/8") for a in parsed)
    assert parsed == sorted(parsed) and all(a.packed[3] not in (0, 255) for a in parsed)
    with pytest.raises(ValueError):
        node_address(-1)


def _rewriter(tmp_path: Path) -> tuple[copies._Rewriter, CheckReport]:
    report = CheckReport(path=tmp_path)
    return copies._Rewriter(tmp_path, tmp_path, report), report


def test_unaddressed_node_lines_get_the_checks_ip_literals(tmp_path: Path) -> None:
    from clusterforge import hostlist

    text = (
        "NodeName=DEFAULT RealMemory=100\n"
        "NodeName=gpu-[0001-0600] CPUs=192 Gres=gpu:h100:8 State=CLOUD\n"
        "NodeName=cpu-[01-02] NodeAddr=10.0.0.[1-2] CPUs=8\n"
        "NodeName=n1 NodeHostname=h1 CPUs=8\n"
        "PartitionName=all Nodes=ALL\n"
    )
    index = {f"cpu-0{i}": i - 1 for i in (1, 2)} | {f"gpu-{i:04d}": i + 1 for i in range(1, 601)} | {"n1": 602}
    rw, report = _rewriter(tmp_path)
    out = rw.node_addresses(text, index, copies.CTLD_FILE).splitlines()
    assert out[0] == "NodeName=DEFAULT RealMemory=100"
    name, addr, *rest = out[1].split()
    assert name == "NodeName=gpu-[0001-0600]" and rest == ["CPUs=192", "Gres=gpu:h100:8", "State=CLOUD"]
    got = hostlist.expand(addr.removeprefix("NodeAddr="))
    # paired by position with the names, each the address of the node's own number
    from clusterforge.check.environment import node_address

    assert got == [node_address(index[f"gpu-{i:04d}"]) for i in range(1, 601)]
    assert out[2:] == text.splitlines()[2:]  # an address or a host name of its own: untouched
    assert [(o.key, o.original) for o in report.overrides] == [("NodeAddr", None)]


def test_address_hostlists_are_the_node_addresses_in_order() -> None:
    # built per /24 from the numbers (a 65,536-node copy in ms), across the 127.1.255 -> 127.2.0 step
    from clusterforge import hostlist
    from clusterforge.check.environment import MAX_CHECK_NODES, address_hostlist, node_address

    cases = [(0, 1), (0, 254), (0, 255), (253, 2), (254 * 255 - 3, 10), (1000, 65_536), (MAX_CHECK_NODES - 5, 5)]
    for first, count in cases:
        want = [node_address(i) for i in range(first, first + count)]
        assert hostlist.expand(address_hostlist(first, count)) == want, (first, count)
    assert address_hostlist(254 * 255 - 3, 10) == "127.1.254.[252-254],127.1.255.[1-7]"
    for first, count in ((0, 0), (-1, 2), (MAX_CHECK_NODES - 1, 2)):
        with pytest.raises(ValueError):
            address_hostlist(first, count)


def test_nodes_numbered_out_of_order_keep_their_own_addresses(tmp_path: Path) -> None:
    from clusterforge import hostlist
    from clusterforge.check.environment import node_address

    index = {"n1": 5, "n2": 3, "n3": 4}
    rw, _ = _rewriter(tmp_path)
    out = rw.node_addresses("NodeName=n[1-3] CPUs=8\n", index, copies.CTLD_FILE)
    addr = out.split()[1].removeprefix("NodeAddr=")
    assert hostlist.expand(addr) == [node_address(i) for i in (5, 3, 4)]


def test_hosts_file_names_the_controllers_and_the_probed_nodes(tmp_path: Path) -> None:
    from clusterforge.check import environment

    manifest = Manifest.read(GOOD)
    path = tmp_path / "hosts"
    environment.write_hosts(path, manifest, ["gpu-001"])
    lines = path.read_text().splitlines()
    index = environment.node_index(manifest)
    assert f"{environment.node_address(index['gpu-001'])} gpu-001" in lines
    assert any(line.endswith(" head-01") for line in lines)
    # no other node: every lookup scans the file from the top, so N nodes made a start O(N²)
    assert not any(line.split()[-1].startswith(("gpu-002", "cpu-")) for line in lines)
    assert sorted(index) == sorted(
        [f"gpu-00{i}" for i in range(1, 5)] + ["cpu-01", "cpu-02"]
    ) and sorted(index.values()) == list(range(6))


# What Debian's scontrol 22.05.8 prints for `show config` (excerpt, spacing as printed).
SHOW_CONFIG = """Configuration data as of 2024-01-01T00:00:00
SlurmctldHost[0]        = head-01(10.10.0.10)
SlurmctldHost[1]        = head-02
TopologyParam           = (null)
TopologyPlugin          = topology/tree
"""


def test_controllers_and_topology_plugin_from_show_config() -> None:
    config = compare.parse_config(SHOW_CONFIG)
    assert config["SlurmctldHost[0]"] == "head-01(10.10.0.10)"
    report = CheckReport(path=Path("x"))
    compare.compare_config(report, config, good_manifest().expect)
    # expect names one controller and the same plugin: only head-02 is news
    assert [p.kind for p in report.problems] == [ProblemKind.CONTROLLER_MISMATCH]
    assert "head-02" in report.problems[0].message
    report = CheckReport(path=Path("x"))
    compare.compare_config(report, {"SlurmctldHost[0]": "head-01", "TopologyPlugin": "topology/none"}, good_manifest().expect)
    assert [p.message for p in report.problems] == [
        "SlurmctldHost[0] address is not set (expected 10.10.0.10)",
        "TopologyPlugin=None (expected topology/tree)",
    ]


@pytest.mark.parametrize(
    ("version", "suite"),
    [
        ("22.05", "bookworm"), ("23.02", "trixie"), ("23.11", "trixie"), ("24.05", "trixie"), ("24.11", "trixie"),
        ("25.05", "sid"), ("25.11", "sid"), ("26.05", "sid"), ("slurm-wlm 24.11.5", "trixie"),
        ("21.08", None), ("22.11", None), ("26.11", None), ("", None), ("latest", None),
    ],
)
def test_release_families_by_range(version: str, suite: str | None) -> None:
    family = check.family_for(version)
    assert (family.suite if family else None) == suite


def test_release_families_name_their_stand_in() -> None:
    assert [(f.suite, f.stands_in, f.targets) for f in check.FAMILIES] == [
        ("bookworm", "22.05.8", "22.05"), ("trixie", "24.11.5", "23.02..24.11"), ("sid", "26.05.5", "25.05..26.05"),
    ]


# `scontrol show topoconf` of slurm-wlm 26.05.5 on a 25.05 render with a block topology.yaml
TOPOCONF_BLOCK = """%YAML 1.1
---
- topology: default
  cluster_default: true
  block:
    block_sizes:
    - 16
    - 32
    blocks:
    - block: nvl-a
      nodes: dgx-[001-016]
    - block: nvl-b
      nodes: dgx-[017-032]
  flat: {}
  ring: {}
  torus3d: {}
  tree: {}
...
"""


TOPOCONF_FROM_CONF = """%YAML 1.1
---
- topology: default
  cluster_default: false
  block: {}
  flat: {}
  ring: {}
  torus3d: {}
  tree: {}
...
"""


def test_topoconf_plugin_is_the_key_with_content() -> None:
    assert compare.topoconf_plugin(TOPOCONF_BLOCK) == "topology/block"
    tree = "- topology: a\n  tree:\n    switches:\n    - switch: s1\n      nodes: n1\n  block: {}\n  flat: {}\n"
    assert compare.topoconf_plugin(tree.replace("  tree:", "  cluster_default: true\n  tree:")) == "topology/tree"
    # the cluster default wins over the first entry
    assert compare.topoconf_plugin(tree + TOPOCONF_BLOCK.split("---\n")[1]) == "topology/block"
    assert compare.topoconf_plugin("- topology: x\n  cluster_default: true\n  flat: {}\n  tree: {}\n") == "topology/flat"
    # what 26.05.5 prints for slurm.conf's TopologyPlugin + topology.conf: show config holds
    assert compare.topoconf_plugin(TOPOCONF_FROM_CONF) is None
    assert compare.topoconf_plugin("not: [yaml") is None
    assert compare.topoconf_plugin("") is None


# `scontrol show topology` of slurm-wlm 24.11.5 (26.05.5 prints the same) for two blocks of 16
# and BlockSizes=16,32
SHOW_BLOCKS = """BlockName=nvl-a BlockIndex=0 Nodes=dgx-[001-016] BlockSize=16
BlockName=nvl-b BlockIndex=1 Nodes=dgx-[017-032] BlockSize=16
AggregatedBlock=nvl-a,nvl-b BlockIndex=2 Nodes=dgx-[001-032] BlockSize=32
"""


def _block_report(text: str) -> CheckReport:
    report = CheckReport(path=Path("x"))
    report.blocks = compare.records(text, "BlockName")
    report.aggregated_blocks = compare.records(text, "AggregatedBlock")
    return report


def _block_expect(*blocks: tuple[str, str]) -> Any:
    from clusterforge.render.manifest import BlockRecord, ExpectTopology

    topology = ExpectTopology(plugin="topology/block", blocks=tuple(BlockRecord(name=n, nodes=h) for n, h in blocks))
    return good_manifest().expect.model_copy(update={"topology": topology})


def test_blocks_and_block_sizes_compared() -> None:
    expect = _block_expect(("nvl-a", "dgx-[001-016]"), ("nvl-b", "dgx-[017-032]"))
    report = _block_report(SHOW_BLOCKS)
    assert (set(report.blocks), set(report.aggregated_blocks)) == ({"nvl-a", "nvl-b"}, {"nvl-a,nvl-b"})
    compare.compare_topology(report, expect, (16, 32))
    assert report.problems == []
    report = _block_report(SHOW_BLOCKS)
    compare.compare_topology(report, expect, (16, 64))
    assert [p.message for p in report.problems] == [
        "aggregated block nvl-a,nvl-b: BlockSize=32 (expected one of BlockSizes (64,))"
    ]
    report = _block_report(SHOW_BLOCKS.replace("BlockName=nvl-b", "BlockName=nvl-x"))
    compare.compare_topology(report, expect)
    assert [p.message for p in report.problems] == [
        "slurmctld has no block nvl-b",
        "slurmctld has block nvl-x, which expect does not list",
    ]


def test_flat_is_no_topology() -> None:
    """25.05+ print TopologyPlugin=topology/flat for a slurm.conf without one (26.05 RELEASE_NOTES:
    "topology/flat (no topology)")."""
    expect = good_manifest().expect
    expect = expect.model_copy(update={"topology": expect.topology.model_copy(update={"plugin": None})})
    report = CheckReport(path=Path("x"))
    compare.compare_config(report, {"SlurmctldHost[0]": "head-01(10.10.0.10)", "TopologyPlugin": "topology/flat"}, expect)
    assert report.problems == []


def test_fixture_manifest_is_the_typed_one() -> None:
    """The checked-in manifest.json is what tests/check_fixture.py builds (hashes of the files
    as they are), so the fixture cannot drift from its typed description."""
    assert (GOOD / "manifest.json").read_text() == good_manifest().to_text()


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{not json", "not JSON"),
        ('{"format": 1, "cluster": "c"}', "format 1, this clusterforge reads format 2"),
        ('{"format": 2, "cluster": "c"}', "slurm_version: Field required (5 problem(s))"),
    ],
)
def test_malformed_or_old_manifest_is_a_manifest_problem(tmp_path: Path, text: str, why: str) -> None:
    shutil.copytree(GOOD, tmp_path / "r")
    (tmp_path / "r" / "manifest.json").write_text(text)
    report = check_dir(tmp_path / "r")
    assert report.kinds() == {ProblemKind.MANIFEST}
    assert why in messages(report, ProblemKind.MANIFEST)
    assert report.inconclusive


def test_cli_check_of_an_old_manifest_is_exit_2_with_the_reason(tmp_path: Path) -> None:
    shutil.copytree(GOOD, tmp_path / "r")
    (tmp_path / "r" / "manifest.json").write_text('{"format": 1}')
    cli = [sys.executable, "-c", "from clusterforge.cli import main; main()"]  # the `clusterforge` command
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cp = subprocess.run([*cli, "check", str(tmp_path / "r")], capture_output=True, text=True, env=env, timeout=60)
    assert cp.returncode == 2, cp.stdout + cp.stderr
    assert "format 1, this clusterforge reads format 2" in cp.stderr
    assert "Traceback" not in cp.stdout + cp.stderr


def test_missing_manifest_is_a_manifest_problem(tmp_path: Path) -> None:
    report = check_dir(tmp_path)
    assert report.kinds() == {ProblemKind.MANIFEST}
    assert not report.ok and report.inconclusive


def test_expect_with_a_bad_hostlist_is_a_manifest_problem(tmp_path: Path) -> None:
    # Slurm has no letter ranges: "leaf-[a-c]" is not a hostlist (slurmctld: "Invalid switches").
    report = run_check(tmp_path, edit_expect(lambda e: e["topology"]["switches"][0].update(switches="leaf-[a-c]")))
    assert report.kinds() == {ProblemKind.MANIFEST}
    assert "leaf-[a-c]" in messages(report, ProblemKind.MANIFEST)


def test_format_report_lists_problems_and_overrides() -> None:
    report = CheckReport(path=Path("out"), cluster="c")
    report.add(ProblemKind.GRES_DROPPED, "node gpu-001: Gres=(null)\nsecond line", "gpu-001")
    report.overrides.append(
        check.Override("slurm.conf (slurmctld)", "StateSaveLocation", "/var/x", "<tmp>/state", "why")
    )
    text = format_report(report)
    assert "FAILED (1 problem)" in text
    assert "[gres_dropped] node gpu-001: Gres=(null) | second line" in text
    assert "StateSaveLocation: /var/x -> <tmp>/state" in text
    data = json.loads(json.dumps(report.to_dict()))
    assert data["ok"] is False and data["inconclusive"] is False
    assert data["problems"][0]["kind"] == "gres_dropped"


def test_noise_allow_lists_are_documented() -> None:
    for rx, why in (*check.CTLD_NOISE, *check.CTLD_NO_DBD_NOISE, *check.SLURMD_NOISE):
        assert rx and len(why) > 10


# --- real daemons ----------------------------------------------------------------------------


@pytest.mark.slurm
@slurm
def test_good_fixture_passes_and_cleans_up(tmp_path: Path, workdirs: list[str]) -> None:
    report = run_check(tmp_path)
    assert report.ok, format_report(report)
    json.dumps(report.to_dict())
    assert set(report.nodes) == {"gpu-001", "gpu-002", "gpu-003", "gpu-004", "cpu-01", "cpu-02"}
    assert report.nodes["gpu-001"]["Gres"].startswith("gpu:h100:8")
    assert report.partitions["gpu"]["Default"] == "YES"
    assert report.topology["spine"]["Switches"] == "leaf-a,leaf-b,leaf-c"
    devices = report.gres["gpu-001"]
    assert [d.files for d in devices] == [(f"/dev/nvidia{i}",) for i in range(8)]
    assert devices[4].fields["Cores"] == "56-111"  # kept, and valid for the rendered node
    keys = {o.key for o in report.overrides}
    assert {"StateSaveLocation", "SlurmctldPidFile", "SlurmdSpoolDir", "SlurmdParameters"} <= keys
    assert not {"NodeName", "PartitionName", "GresTypes"} & keys
    # the render sizes the node table itself (MaxNodeCount): the daemons start from its line
    assert "MaxNodeCount" not in keys
    assert {"parse", "slurmctld_start", "slurmctld_start_cpu", "scontrol", "total"} <= set(report.timings)
    assert "slurmd_G_cpu:gpu-001" in report.timings  # CPU seconds: the figure a loaded box keeps
    assert leftovers(workdirs) == []


@pytest.mark.slurm
@slurm
def test_missing_grestypes_drops_gres_silently(tmp_path: Path) -> None:
    report = run_check(tmp_path, replace("slurm/slurm.conf", "GresTypes=gpu\n", ""))
    assert ProblemKind.GRES_DROPPED in report.kinds()
    # slurmctld itself logs nothing about it: only the comparison with expect catches it
    assert ProblemKind.LOG_ERROR not in report.kinds()


@pytest.mark.slurm
@slurm
def test_unknown_key_is_rejected_by_the_parse(tmp_path: Path) -> None:
    report = run_check(tmp_path, replace("slurm/slurm.conf", "ReturnToService=2\n", "ReturnToService=2\nFooBar=1\n"))
    assert report.kinds() == {ProblemKind.PARSE}
    assert "FooBar" in messages(report, ProblemKind.PARSE)


@pytest.mark.slurm
@slurm
def test_topology_child_switch_missing_is_rejected(tmp_path: Path, workdirs: list[str]) -> None:
    report = run_check(tmp_path, replace("slurm/topology.conf", "leaf-a,leaf-b,leaf-c", "leaf-a,leaf-b,leaf-c,leaf-d"))
    assert "invalid child (leaf-d)" in messages(report, ProblemKind.REJECTED)
    assert leftovers(workdirs) == []


@pytest.mark.slurm
@slurm
def test_cpus_not_matching_the_layout_is_an_error_line(tmp_path: Path) -> None:
    report = run_check(tmp_path, replace("slurm/slurm.conf", "CPUs=192", "CPUs=100"))
    assert "CPUs=100 match no Sockets" in messages(report, ProblemKind.LOG_ERROR)
    # slurmd -G and the client parse print the same line; it is reported once, by slurmctld
    assert ProblemKind.GRES_ERROR not in report.kinds()


@pytest.mark.slurm
@slurm
def test_gres_conf_type_mismatch_is_caught_by_slurmd(tmp_path: Path) -> None:
    report = run_check(tmp_path, replace("slurm/gres.conf", "Type=h100", "Type=a100"))
    # slurmd drops the a100 lines ("GRES gpu:a100 has 1 more configured than expected")
    assert "0 GPUs (expected 8)" in messages(report, ProblemKind.GRES_MISMATCH)
    assert "gpu:a100" in messages(report, ProblemKind.GRES_ERROR)
    assert report.nodes["gpu-001"]["Gres"].startswith("gpu:h100:8")  # slurmctld alone sees nothing


@pytest.mark.slurm
@slurm
def test_too_few_gres_files_is_caught_by_slurmd(tmp_path: Path) -> None:
    def drop_last_four(d: Path) -> None:
        p = d / "slurm" / "gres.conf"
        keep = [ln for ln in p.read_text().splitlines() if not any(f"nvidia{i} " in ln for i in range(4, 8))]
        p.write_text("\n".join(keep) + "\n")

    report = run_check(tmp_path, drop_last_four)
    assert "4 GPUs (expected 8)" in messages(report, ProblemKind.GRES_MISMATCH)


@pytest.mark.slurm
@slurm
def test_gres_cores_beyond_the_rendered_node_are_an_error(tmp_path: Path) -> None:
    # The nodes have 112 cores. (Cores=0-55 on this 2-core host is fine: config_overrides makes
    # slurmd -G check Cores= against the rendered node, not against the machine it runs on.)
    report = run_check(tmp_path, replace("slurm/gres.conf", "Cores=56-111", "Cores=56-300"))
    assert "Invalid GRES data for gpu, Cores=56-300" in messages(report, ProblemKind.GRES_ERROR)


def set_version(version: str) -> Edit:
    return replace("manifest.json", '"slurm_version": "22.05"', f'"slurm_version": "{version}"')


@pytest.mark.slurm
@slurm
@pytest.mark.parametrize("version", ["21.08", "26.11"])
def test_config_for_a_release_no_family_covers_is_not_judged(tmp_path: Path, version: str) -> None:
    report = run_check(tmp_path, set_version(version))
    assert report.kinds() == {ProblemKind.ENVIRONMENT}
    assert messages(report, ProblemKind.ENVIRONMENT) == (
        f"rendered for Slurm {version}, which no release family the check can run covers "
        "(22.05, 23.02..24.11, 25.05..26.05); render for one of those to check it"
    )
    assert report.daemons is None


@pytest.mark.slurm
@slurm
def test_a_newer_target_is_loaded_by_its_family_from_the_cached_rootfs(
    tmp_path: Path, workdirs: list[str], release_daemons: Callable[[str], None]
) -> None:
    """The good fixture (keys every release from 22.05 to 26.05 takes) as a 24.05 render: loaded
    by trixie's 24.11.5, chrooted; the report says so; nothing is left in the shared rootfs."""
    release_daemons("24.05")
    root = Path(os.environ.get("CLUSTERFORGE_CACHE") or "/var/cache/clusterforge") / "rootfs-trixie-slurm"
    before = sorted(p.name for p in (root / "tmp").iterdir())
    report = run_check(tmp_path, set_version("24.05"))
    assert report.ok, format_report(report)
    assert report.daemons == f"slurm-wlm 24.11.5 (Debian 13 trixie root filesystem {root})"
    assert f"rendered for Slurm 24.05; loaded by slurm-wlm 24.11.5 (Debian 13 trixie root filesystem {root})" in (
        format_report(report).splitlines()
    )
    assert set(report.nodes) == {"gpu-001", "gpu-002", "gpu-003", "gpu-004", "cpu-01", "cpu-02"}
    assert [d.files for d in report.gres["gpu-001"]] == [(f"/dev/nvidia{i}",) for i in range(8)]
    # 24.11's slurmd -G creates a munge credential: both copies point at the private munged
    assert {o.file for o in report.overrides if o.key == "AuthInfo"} == {"slurm.conf (slurmctld)", "slurm.conf (slurmd -G)"}
    assert leftovers(workdirs) == []
    assert sorted(p.name for p in (root / "tmp").iterdir()) == before
    assert str(root) not in Path("/proc/self/mounts").read_text()


@pytest.mark.slurm
@slurm
def test_two_rootfs_checks_at_once(tmp_path: Path, release_daemons: Callable[[str], None]) -> None:
    """Each check has its own view of the shared rootfs: two at once both pass."""
    release_daemons("25.05")
    reports: dict[str, CheckReport] = {}

    def one(i: int) -> None:
        (tmp_path / str(i)).mkdir()
        reports[str(i)] = run_check(tmp_path / str(i), set_version("25.05"))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.ok for r in reports.values()] == [True, True], "\n".join(format_report(r) for r in reports.values())
    assert all((r.daemons or "").startswith("slurm-wlm 26.05.5 (Debian sid root filesystem") for r in reports.values())


@pytest.mark.slurm
@slurm
def test_missing_rootfs_is_an_environment_problem_naming_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "empty-cache"
    monkeypatch.setenv("CLUSTERFORGE_CACHE", str(cache))
    t0 = time.monotonic()
    report = run_check(tmp_path, set_version("24.05"))
    assert time.monotonic() - t0 < 10  # no build, no wait
    assert report.kinds() == {ProblemKind.ENVIRONMENT}
    assert messages(report, ProblemKind.ENVIRONMENT) == (
        "rendered for Slurm 24.05: the check loads it with Debian 13 trixie's slurm-wlm 24.11.5, but "
        f"{cache}/rootfs-trixie-slurm is not built; build it once (~50 s) with "
        f"`{ROOT}/clusterforge/local/rootfs.sh {cache} trixie slurm` or run `clusterforge check --build-rootfs`"
    )
    assert not cache.exists()


@pytest.mark.slurm
@slurm
@pytest.mark.parametrize(
    ("body", "want"),
    [
        # "builds" a folder without daemons: built, then refused by what preflight looks for
        ('mkdir -p "$1/rootfs-$2-$3" && touch "$1/rootfs-$2-$3/.complete"',
         "{cache}/rootfs-trixie-slurm has no slurmctld, slurmd, scontrol, munge, munged: remove it and build "
         "it again with `{sh} {cache} trixie slurm`"),
        ("echo 'E: no mirror' >&2; exit 1", "`{sh} {cache} trixie slurm` failed (rc=1): E: no mirror"),
        ("exec sleep 30", "building the Debian 13 trixie root filesystem failed: "),
    ],
    ids=["built-but-empty", "fails", "hangs"],
)
def test_build_rootfs_is_bounded_and_its_failures_are_environment_problems(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, want: str
) -> None:
    """``check_dir(build_rootfs=True)`` runs rootfs.sh (a stand-in here) under its own time limit."""
    from clusterforge.check import environment

    cache = tmp_path / "cache"
    sh = tmp_path / "rootfs.sh"
    sh.write_text(f"#!/bin/sh\n{body}\n")
    sh.chmod(0o755)
    monkeypatch.setenv("CLUSTERFORGE_CACHE", str(cache))
    monkeypatch.setattr(environment, "ROOTFS_SH", sh)
    monkeypatch.setattr(environment, "ROOTFS_BUILD_TIMEOUT_S", 2.0)
    d = tmp_path / "rendered"
    shutil.copytree(GOOD, d)
    set_version("24.05")(d)
    t0 = time.monotonic()
    report = check_dir(d, timeout_s=30, build_rootfs=True)
    assert time.monotonic() - t0 < 10
    assert report.kinds() == {ProblemKind.ENVIRONMENT}, format_report(report)
    assert messages(report, ProblemKind.ENVIRONMENT).startswith(want.format(cache=cache, sh=sh))
    assert "rootfs_build" in report.timings


@pytest.mark.slurm
@slurm
def test_expect_8_gpus_but_conf_says_4(tmp_path: Path) -> None:
    report = run_check(tmp_path, replace("slurm/slurm.conf", "Gres=gpu:h100:8", "Gres=gpu:h100:4"))
    assert {ProblemKind.NODE_MISMATCH, ProblemKind.GRES_MISMATCH} <= report.kinds()


@pytest.mark.slurm
@slurm
def test_gres_conf_device_beyond_expect_does_not_hang(tmp_path: Path, workdirs: list[str]) -> None:
    # expect (and so the fake /dev) has 4 GPUs, gres.conf names 8: slurmd -G would wait forever.
    def four(e: dict[str, Any]) -> None:
        e["nodes"][0].update(gpu_count=4, gpu_files="/dev/nvidia[0-3]")

    report = run_check(tmp_path, edit_expect(four), timeout_s=60)
    assert ProblemKind.GRES_DEVICE_MISSING in report.kinds()
    assert ProblemKind.TIMEOUT not in report.kinds()  # stopped at its "Waiting for" line, not the deadline
    assert leftovers(workdirs) == []


@pytest.mark.slurm
@slurm
def test_expect_mismatches_in_nodes_partitions_topology_controller(tmp_path: Path) -> None:
    def change(e: dict[str, Any]) -> None:
        e["controllers"][0]["address"] = "10.10.0.11"
        e["nodes"][1]["weight"] = 50
        e["partitions"][0]["max_time"] = "2-00:00:00"
        e["topology"]["switches"][1]["nodes"] = "gpu-[001-003]"

    report = run_check(tmp_path, edit_expect(change))
    assert report.kinds() == {
        ProblemKind.CONTROLLER_MISMATCH,
        ProblemKind.NODE_MISMATCH,
        ProblemKind.PARTITION_MISMATCH,
        ProblemKind.TOPOLOGY_MISMATCH,
    }
    assert "Weight=100 (expected 50)" in messages(report, ProblemKind.NODE_MISMATCH)
    assert "MaxTime=3-00:00:00 (expected 2-00:00:00)" in messages(report, ProblemKind.PARTITION_MISMATCH)
    assert "switch leaf-a: Nodes=gpu-[001-002]" in messages(report, ProblemKind.TOPOLOGY_MISMATCH)


@pytest.mark.slurm
@slurm
def test_accounting_and_controller_without_address(tmp_path: Path) -> None:
    # What the renderer emits with accounting on; slurmctld would exit without a slurmdbd. And a
    # SlurmctldHost without address must still resolve inside the private network namespace.
    extra = (
        "AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=head-01\n"
        "AccountingStorageEnforce=associations\nAccountingStorageTRES=gres/gpu\n"
        "JobAcctGatherType=jobacct_gather/cgroup\nSlurmctldDebug=error\n"
    )
    report = run_check(
        tmp_path,
        replace("slurm/slurm.conf", "ReturnToService=2\n", "ReturnToService=2\n" + extra),
        replace("slurm/slurm.conf", "SlurmctldHost=head-01(10.10.0.10)", "SlurmctldHost=head-01"),
        edit_expect(lambda e: e["controllers"][0].update(address=None)),
    )
    assert report.ok, format_report(report)
    removed = {o.key for o in report.overrides if o.value is None}
    assert {"AccountingStorageType", "AccountingStorageEnforce", "AccountingStorageTRES"} <= removed
    assert any(o.key == "SlurmctldDebug" and o.value == "info" for o in report.overrides)


@pytest.mark.slurm
@slurm
def test_timeout_is_reported_and_everything_stopped(
    tmp_path: Path, workdirs: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slurmctld that never becomes ready (a stand-in that answers -V, then loops in a shell whose
    argv keeps the check's paths, so a survivor would show in leftovers()) must end in a
    TIMEOUT problem with every process and folder gone. (A tiny timeout alone is not enough: on a
    loaded machine the real daemon can be ready before the check first looks.)"""
    fake = tmp_path / "bin"
    fake.mkdir()
    real = shutil.which("slurmctld", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    assert real, "slurmctld is installed for the daemon tests"
    stub = fake / "slurmctld"
    stub.write_text(f'#!/bin/sh\n[ "$1" = "-V" ] && exec {real} -V\nwhile :; do sleep 1; done\n')
    stub.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ.get('PATH', '')}")
    report = run_check(tmp_path, timeout_s=3)
    assert ProblemKind.TIMEOUT in report.kinds()
    assert workdirs
    assert leftovers(workdirs) == []
