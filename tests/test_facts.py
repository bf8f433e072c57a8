"""Discovered-facts parsers and their override of the catalog (clusterforge.catalog.facts).

Expected values are read off the fixture files under tests/fixtures/facts by eye, not computed
with the code under test.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterforge import hostlist
from clusterforge.catalog import HardwareProfile, get_profile
from clusterforge.catalog.facts import (
    FactsError,
    HostFacts,
    apply_facts,
    format_ranges,
    load_facts_dir,
    parse_cpu_list,
    parse_ibstat,
    parse_lscpu,
    parse_nvidia_smi_topo,
    parse_rocm_smi_topo,
    parse_slurmd_c,
    threads_to_cores,
)

FIXTURES = Path(__file__).parent / "fixtures" / "facts"
REPO = Path(__file__).parent.parent
EXAMPLE_SPEC = REPO / "examples" / "amd-mi300x.yaml"


def fixture(host: str, name: str) -> str:
    return (FIXTURES / host / name).read_text()


def profile(name: str) -> HardwareProfile:
    p = get_profile(name)
    assert p is not None, name
    return p


# ------------------------------------------------------------------------------- slurmd -C


def test_slurmd_c_p5() -> None:
    s = parse_slurmd_c(fixture("p5-001", "slurmd-C.txt"))
    assert (s.node_name, s.cpus, s.boards, s.sockets_per_board) == ("p5-001", 192, 1, 2)
    assert (s.sockets, s.cores_per_socket, s.threads_per_core) == (2, 48, 2)
    assert s.real_memory_mib == 2047961
    assert s.uptime == "0-03:14:07"


def test_slurmd_c_mi300x() -> None:
    s = parse_slurmd_c(fixture("mi-01", "slurmd-C.txt"))
    assert (s.node_name, s.cpus) == ("mi-01", 384)
    assert (s.sockets, s.cores_per_socket, s.threads_per_core) == (2, 96, 2)
    assert s.real_memory_mib == 2321768


def test_slurmd_c_tolerates_log_lines_and_unknown_keys() -> None:
    text = (
        "slurmd: Considering each NUMA node as a socket\n"
        "NodeName=n1 CPUs=8 Boards=1 SocketsPerBoard=1 CoresPerSocket=4 ThreadsPerCore=2 "
        "RealMemory=31000 Gres=gpu:1\n"
    )
    s = parse_slurmd_c(text)
    assert (s.node_name, s.cpus, s.real_memory_mib, s.uptime) == ("n1", 8, 31000, None)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "no 'NodeName=' lines.*slurmd -C"),
        (
            "NodeName=a CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=1 ThreadsPerCore=2\n",
            "lacks RealMemory",
        ),
        (
            "NodeName=a CPUs=4 Boards=1 SocketsPerBoard=1 CoresPerSocket=1 ThreadsPerCore=2 RealMemory=9\n",
            r"CPUs=4 but .* = 2",
        ),
        (
            "NodeName=a CPUs=x Boards=1 SocketsPerBoard=1 CoresPerSocket=1 ThreadsPerCore=1 RealMemory=9\n",
            "CPUs should be a whole number, got 'x'",
        ),
        ("NodeName=a CPUs=1\nNodeName=b CPUs=1\n", "2 'NodeName=' lines"),
        ("NodeName=a CPUs=1 junk\n", "'junk' in the NodeName line is not key=value"),
    ],
)
def test_slurmd_c_malformed(text: str, match: str) -> None:
    with pytest.raises(FactsError, match=match) as err:
        parse_slurmd_c(text, source="h1/slurmd-C.txt")
    assert str(err.value).startswith("h1/slurmd-C.txt: ")


# ------------------------------------------------------------------------------- lscpu


def test_lscpu_p5() -> None:
    c = parse_lscpu(fixture("p5-001", "lscpu.txt"))
    assert (c.cpus, c.sockets, c.cores_per_socket, c.threads_per_core) == (192, 2, 48, 2)
    assert c.model_name == "AMD EPYC 7R13 Processor"
    assert c.numa_nodes == {0: "0-47,96-143", 1: "48-95,144-191"}
    node0 = c.numa_cpus(0)
    assert node0 is not None and len(node0) == 96 and 47 in node0 and 96 in node0 and 48 not in node0
    assert c.numa_cpus(5) is None


def test_lscpu_mi300x() -> None:
    c = parse_lscpu(fixture("mi-01", "lscpu.txt"))
    assert (c.cpus, c.sockets, c.cores_per_socket, c.threads_per_core) == (384, 2, 96, 2)
    assert c.model_name == "AMD EPYC 9654 96-Core Processor"
    assert c.numa_nodes == {0: "0-95,192-287", 1: "96-191,288-383"}


def test_lscpu_flat_layout_and_memory_only_node() -> None:
    # util-linux < 2.37 prints no indentation; a CXL/HBM node has memory but no CPUs.
    text = (
        "Architecture:        x86_64\nCPU(s):              16\nOn-line CPU(s) list: 0-15\n"
        "Thread(s) per core:  2\nCore(s) per socket:  8\nSocket(s):           1\n"
        "NUMA node(s):        2\nModel name:          Intel(R) Xeon(R) Gold 6338\n"
        "NUMA node0 CPU(s):   0-15\nNUMA node1 CPU(s):   \n"
    )
    c = parse_lscpu(text)
    assert (c.cpus, c.sockets, c.cores_per_socket, c.threads_per_core) == (16, 1, 8, 2)
    assert c.numa_nodes == {0: "0-15", 1: ""}
    assert c.numa_cpus(1) == frozenset()


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", r"no 'CPU\(s\)', 'Socket\(s\)'.*plain `lscpu`"),
        (
            "CPU(s): 4\nThread(s) per core: 1\nCore(s) per socket: 4\nSocket(s): -\n",
            r"Socket\(s\) should be a whole",
        ),
        (
            "CPU(s): 4\nThread(s) per core: 1\nCore(s) per socket: 4\nSocket(s): 1\nNUMA node(s): 2\n"
            "NUMA node0 CPU(s): 0-3\n",
            r"'NUMA node\(s\): 2' but 1",
        ),
        (
            "CPU(s): 4\nThread(s) per core: 1\nCore(s) per socket: 4\nSocket(s): 1\nNUMA node0 CPU(s): 0-9\n",
            "NUMA node0 lists CPUs 0-9 beyond CPU",
        ),
        (
            "CPU(s): 4\nThread(s) per core: 1\nCore(s) per socket: 4\nSocket(s): 1\nNUMA node0 CPU(s): 3-1\n",
            "bad CPU range '3-1'",
        ),
    ],
)
def test_lscpu_malformed(text: str, match: str) -> None:
    with pytest.raises(FactsError, match=match) as err:
        parse_lscpu(text, source="h1/lscpu.txt")
    assert "h1/lscpu.txt" in str(err.value)


# ------------------------------------------------------------------------------- nvidia-smi topo -m


def test_nvidia_topo_p5() -> None:
    t = parse_nvidia_smi_topo(fixture("p5-001", "nvidia-smi-topo.txt"))
    assert (t.vendor, t.gpu_count) == ("nvidia", 8)
    assert all(t.links[i][j] == (0 if i == j else 18) for i in range(8) for j in range(8))
    assert t.uniform_links() == 18
    assert t.cpu_affinity == ("0-47,96-143",) * 4 + ("48-95,144-191",) * 4
    assert t.numa_node == (0, 0, 0, 0, 1, 1, 1, 1)
    # the fixture keeps 8 of the 32 EFA devices (NIC0..NIC7 in its legend)
    assert t.nics == (
        "rdmap79s0", "rdmap80s0", "rdmap81s0", "rdmap82s0",
        "rdmap96s0", "rdmap97s0", "rdmap98s0", "rdmap99s0",
    )  # fmt: skip


def test_nvidia_topo_dgx_h100() -> None:
    t = parse_nvidia_smi_topo(fixture("dgx-001", "nvidia-smi-topo.txt"))
    assert t.gpu_count == 8 and t.uniform_links() == 18
    assert t.cpu_affinity == ("0-55,112-167",) * 4 + ("56-111,168-223",) * 4
    assert t.numa_node == (0, 0, 0, 0, 1, 1, 1, 1)
    assert t.nics == tuple(f"mlx5_{i}" for i in range(12))


def test_nvidia_topo_space_aligned_copy_parses_the_same() -> None:
    # Output pasted into tickets has its tabs expanded to spaces.
    text = fixture("dgx-001", "nvidia-smi-topo.txt")
    assert parse_nvidia_smi_topo(text.expandtabs(8)) == parse_nvidia_smi_topo(text)


def test_nvidia_topo_old_driver_named_nic_column_ansi_header_pcie_only() -> None:
    text = (
        "\x1b[4m\tGPU0\tGPU1\tmlx4_0\tCPU Affinity\x1b[0m\n"
        "GPU0\t X \tPIX\tPHB\t0-9,20-29\n"
        "GPU1\tPIX\t X \tPHB\t0-9,20-29\n"
        "mlx4_0\tPHB\tPHB\t X \n"
        "\nLegend:\n\n  X    = Self\n"
    )
    t = parse_nvidia_smi_topo(text)
    assert t.gpu_count == 2 and t.links == ((0, 0), (0, 0)) and t.uniform_links() == 0
    assert t.nics == ("mlx4_0",)
    assert t.cpu_affinity == ("0-9,20-29", "0-9,20-29") and t.numa_node == (None, None)


NV_PAIRS = (
    "\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tNV4\tSYS\tSYS\t0-15,32-47\t0\t\tN/A\n"
    "GPU1\tNV4\t X \tSYS\tSYS\t0-15,32-47\t0\t\tN/A\n"
    "GPU2\tSYS\tSYS\t X \tNV4\t16-31,48-63\t1\t\tN/A\n"
    "GPU3\tSYS\tSYS\tNV4\t X \t16-31,48-63\t1\t\tN/A\n"
)


def test_nvidia_topo_nvlink_bridge_pairs_are_not_uniform() -> None:
    t = parse_nvidia_smi_topo(NV_PAIRS)
    assert t.links[0][1] == 4 and t.links[0][2] == 0 and t.links[2][3] == 4
    assert t.uniform_links() is None


def test_nvidia_topo_gpu_near_several_numa_nodes() -> None:
    t = parse_nvidia_smi_topo(NV_PAIRS.replace("16-31,48-63\t1", "0-63\t0-1"))
    assert t.numa_node == (0, 0, None, None)
    assert t.cpu_affinity[2] == "0-63"


def test_apply_refuses_duplicate_hosts() -> None:
    h = mi_hosts()[0]
    with pytest.raises(FactsError, match="hosts listed twice in one node group's facts: mi-01"):
        apply_facts(profile("mi300x-8gpu"), [h, h])


def _drop_line(text: str, prefix: str) -> str:
    return "\n".join(ln for ln in text.splitlines() if not ln.startswith(prefix))


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda t: "no GPUs found\n", r"no header line with 'GPU0 \.\.\. CPU Affinity'.*nvidia-smi topo -m"),
        (lambda t: _drop_line(t, "GPU7"), "no row for GPU7; the matrix is truncated"),
        (lambda t: t.replace("GPU3\tNV18", "GPU3\tQQQ", 1), "GPU3/GPU0 is 'QQQ'; expected X, NV#, SYS"),
        (lambda t: _drop_line(t, "  NIC11:"), "column NIC11 has no 'NIC Legend' entry"),
        (lambda t: t.replace("GPU1\tNV18", "GPU1\tNV12", 1), "GPU1/GPU0 and GPU0/GPU1 differ"),
        (lambda t: t.replace("0-55,112-167\t0", "0-55,112-167", 1), "row GPU0 has 22 cells, expected 23"),
        (lambda t: t.replace("GPU2\tNV18\tNV18\t X ", "GPU2\tNV18\tNV18\tNV18", 1), "GPU2/GPU2 is 'NV18'"),
    ],
)
def test_nvidia_topo_malformed(mutate: Callable[[str], str], match: str) -> None:
    text = mutate(fixture("dgx-001", "nvidia-smi-topo.txt"))
    with pytest.raises(FactsError, match=match) as err:
        parse_nvidia_smi_topo(text, source="dgx-001/nvidia-smi-topo.txt")
    assert str(err.value).startswith("dgx-001/nvidia-smi-topo.txt: ")


# ------------------------------------------------------------------------------- rocm-smi --showtopo


def test_rocm_topo_mi300x() -> None:
    t = parse_rocm_smi_topo(fixture("mi-01", "rocm-smi-topo.txt"))
    assert (t.vendor, t.gpu_count) == ("amd", 8)
    assert all(t.links[i][j] == (0 if i == j else 1) for i in range(8) for j in range(8))
    assert t.uniform_links() == 1
    assert t.numa_node == (0, 0, 0, 0, 1, 1, 1, 1)
    assert t.cpu_affinity == (None,) * 8
    assert t.nics == ()


ROCM_PCIE = """\
======================= ROCm System Management Interface =======================
=========================== Weight between two GPUs ============================
       GPU0         GPU1
GPU0   0            52
GPU1   52           0

============================ Hops between two GPUs =============================
       GPU0         GPU1
GPU0   0            3
GPU1   3            0

========================== Link Type between two GPUs ==========================
       GPU0         GPU1
GPU0   0            PCIE
GPU1   PCIE         0

================================== Numa Nodes ==================================
GPU[0]\t\t: (Topology) Numa Node: 0
GPU[0]\t\t: (Topology) Numa Affinity: -1
GPU[1]\t\t: (Topology) Numa Node: 1
GPU[1]\t\t: (Topology) Numa Affinity: 1
============================= End of ROCm SMI Log ==============================
"""


def test_rocm_topo_pcie_and_no_numa() -> None:
    t = parse_rocm_smi_topo(ROCM_PCIE)
    assert t.gpu_count == 2 and t.links == ((0, 0), (0, 0))
    # Affinity -1 means "no NUMA" and wins over the Numa Node line.
    assert t.numa_node == (None, 1)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("rocm-smi: command not found\n", "no 'Link Type between two GPUs' section.*rocm-smi --showtopo"),
        (ROCM_PCIE.replace("GPU0   0            PCIE", "GPU0   0            FOO"), "GPU0/GPU1 is 'FOO'"),
        (ROCM_PCIE.replace("GPU1   PCIE         0", "GPU1   PCIE"), "rows GPU0..GPU1 with 2 values"),
        (ROCM_PCIE.replace("Numa Affinity: 1", "Numa Affinity: N/A"), "in 'Numa Nodes'; expected 'GPU"),
        (
            ROCM_PCIE.replace("GPU[1]\t\t: (Topology) Numa Node: 1", "GPU[7]\t\t: (Topology) Numa Node: 1"),
            r"GPU\[7\]",
        ),
        (ROCM_PCIE.replace("GPU1   52", "GPU1   x"), "a value in 'Weight between two GPUs'"),
    ],
)
def test_rocm_topo_malformed(text: str, match: str) -> None:
    with pytest.raises(FactsError, match=match) as err:
        parse_rocm_smi_topo(text, source="mi-01/rocm-smi-topo.txt")
    assert str(err.value).startswith("mi-01/rocm-smi-topo.txt: ")


# ------------------------------------------------------------------------------- ibstat


def test_ibstat_dgx_h100() -> None:
    ports = parse_ibstat(fixture("dgx-001", "ibstat.txt"))
    assert len(ports) == 12
    # ibstat lists CAs alphabetically: mlx5_10 comes right after mlx5_1
    assert [p.ca for p in ports][:4] == ["mlx5_0", "mlx5_1", "mlx5_10", "mlx5_11"]
    active = [p.ca for p in ports if p.active]
    assert active == ["mlx5_0", "mlx5_10", "mlx5_11", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9"]
    assert {(p.rate_gbps, p.link_layer, p.physical_state) for p in ports if p.active} == {
        (400, "InfiniBand", "LinkUp")
    }
    storage = next(p for p in ports if p.ca == "mlx5_1")
    assert (storage.state, storage.physical_state, storage.link_layer, storage.rate_gbps, storage.port) == (
        "Down",
        "Disabled",
        "Ethernet",
        40,
        1,
    )


def test_ibstat_mi300x_broadcom_roce() -> None:
    ports = parse_ibstat(fixture("mi-01", "ibstat.txt"))
    assert [p.ca for p in ports] == [f"bnxt_re{i}" for i in range(8)]
    assert all(p.active and p.rate_gbps == 400 and p.link_layer == "Ethernet" for p in ports)


IB_TWO_PORTS = (
    "CA 'mlx4_0'\n\tCA type: MT4099\n\tNumber of ports: 2\n"
    "\tPort 1:\n\t\tState: Active\n\t\tPhysical state: LinkUp\n\t\tRate: 56\n\t\tLink layer: InfiniBand\n"
    "\tPort 2:\n\t\tState: Active\n\t\tPhysical state: LinkUp\n\t\tRate: 56\n\t\tLink layer: InfiniBand\n"
)


def test_ibstat_two_port_ca() -> None:
    ports = parse_ibstat(IB_TWO_PORTS)
    assert [(p.ca, p.port, p.rate_gbps) for p in ports] == [("mlx4_0", 1, 56), ("mlx4_0", 2, 56)]


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", r"no \"CA '<name>'\" block"),
        ("ibpanic: [1234] main: stat of IB device 'mlx5_0' failed\n", "before the first"),
        (IB_TWO_PORTS.replace("\t\tRate: 56\n", "", 1), "CA 'mlx4_0' port 1 has no Rate line"),
        (
            IB_TWO_PORTS.replace("Number of ports: 2", "Number of ports: 3"),
            "says 'Number of ports: 3' but lists 2",
        ),
        (IB_TWO_PORTS.replace("Rate: 56", "Rate: fast", 1), "Rate 'fast' is not a number"),
        (IB_TWO_PORTS.replace("\tCA type: MT4099\n", "\tgarbage here\n"), "'garbage here' in CA 'mlx4_0'"),
    ],
)
def test_ibstat_malformed(text: str, match: str) -> None:
    with pytest.raises(FactsError, match=match) as err:
        parse_ibstat(text, source="h1/ibstat.txt")
    assert str(err.value).startswith("h1/ibstat.txt: ")


# ------------------------------------------------------------------------------- helpers


def test_cpu_list_and_ranges() -> None:
    assert parse_cpu_list("0-2,5,7-8") == [0, 1, 2, 5, 7, 8]
    assert format_ranges([8, 0, 1, 2, 3, 2]) == "0-3,8"
    assert format_ranges([]) == ""
    with pytest.raises(FactsError, match="expected ranges like 0-47,96-143"):
        parse_cpu_list("0-a")


def test_threads_to_cores_smt_on() -> None:
    # 2 sockets x 48 cores x 2 threads: CPU i and i+96 are the two threads of core i.
    socket1 = list(range(48, 96)) + list(range(144, 192))
    assert threads_to_cores(socket1, 2, 48, 2) == list(range(48, 96))
    assert threads_to_cores([0, 96, 1, 97], 2, 48, 2) == [0, 1]


def test_threads_to_cores_smt_off_is_identity() -> None:
    assert threads_to_cores(range(96, 192), 2, 96, 1) == list(range(96, 192))


def test_threads_to_cores_refuses_other_numberings() -> None:
    # Siblings numbered next to each other (0,1 = core 0): socket 0 would be CPUs 0-95.
    with pytest.raises(FactsError, match="do not hold whole cores"):
        threads_to_cores(range(96), 2, 48, 2, source="gpu0")
    with pytest.raises(FactsError, match="CPU 200 is beyond the 192 CPUs"):
        threads_to_cores([200], 2, 48, 2)


# ------------------------------------------------------------------------------- load_facts_dir


def test_load_fixture_dir() -> None:
    hosts = load_facts_dir(FIXTURES)
    assert list(hosts) == ["dgx-001", "mi-01", "p5-001"]
    dgx = hosts["dgx-001"]
    assert dgx.slurmd is None and dgx.lscpu is None
    assert dgx.files == ("nvidia-smi-topo.txt", "ibstat.txt")
    assert dgx.hcas is not None and len(dgx.hcas) == 12
    mi = hosts["mi-01"]
    assert mi.files == ("slurmd-C.txt", "lscpu.txt", "rocm-smi-topo.txt", "ibstat.txt")
    assert mi.gpu_topo is not None and mi.gpu_topo.vendor == "amd"
    assert hosts["p5-001"].hcas is None


def test_example_facts_match_the_example_spec() -> None:
    spec = yaml.safe_load(EXAMPLE_SPEC.read_text())
    assert spec["facts_dir"] == "facts/mi300x"
    group = next(g for g in spec["node_groups"] if g["name"] == "mi300x")
    hosts = load_facts_dir(EXAMPLE_SPEC.parent / spec["facts_dir"])
    assert list(hosts) == hostlist.expand(group["onprem"]["hosts"]) == ["mi-01", "mi-02", "mi-03", "mi-04"]
    for name, h in hosts.items():
        assert h.slurmd is not None and h.slurmd.node_name == name
    # the RoCE HCAs the spec names are exactly the active ports found
    assert [p.ca for p in hosts["mi-01"].hcas or () if p.active] == group["fabric"]["hcas"]


def _host_dir(tmp_path: Path, host: str, files: dict[str, str]) -> Path:
    (tmp_path / host).mkdir(parents=True)
    for name, text in files.items():
        (tmp_path / host / name).write_text(text)
    return tmp_path


def test_load_rejects_slurmd_from_another_host(tmp_path: Path) -> None:
    _host_dir(tmp_path, "mi-02", {"slurmd-C.txt": fixture("mi-01", "slurmd-C.txt")})
    with pytest.raises(FactsError, match=r"mi-02/slurmd-C.txt: NodeName=mi-01 but the folder is 'mi-02'"):
        load_facts_dir(tmp_path)


def test_load_rejects_unknown_files_only_and_both_vendors(tmp_path: Path) -> None:
    _host_dir(tmp_path / "a", "h1", {"slurmd-c.txt": "typo"})
    with pytest.raises(FactsError, match=r"none of slurmd-C\.txt, lscpu\.txt"):
        load_facts_dir(tmp_path / "a")
    _host_dir(
        tmp_path / "b",
        "h1",
        {
            "nvidia-smi-topo.txt": fixture("dgx-001", "nvidia-smi-topo.txt"),
            "rocm-smi-topo.txt": fixture("mi-01", "rocm-smi-topo.txt"),
        },
    )
    with pytest.raises(FactsError, match="a host has one GPU vendor"):
        load_facts_dir(tmp_path / "b")


def test_load_missing_or_empty_dir(tmp_path: Path) -> None:
    with pytest.raises(FactsError, match="facts folder not found"):
        load_facts_dir(tmp_path / "nope")
    with pytest.raises(FactsError, match="no host folders"):
        load_facts_dir(tmp_path)


def test_load_names_the_file_of_a_parse_error(tmp_path: Path) -> None:
    _host_dir(tmp_path, "h1", {"ibstat.txt": "hello\n"})
    with pytest.raises(FactsError, match=r"h1/ibstat.txt: 'hello' before the first"):
        load_facts_dir(tmp_path)


# ------------------------------------------------------------------------------- apply_facts


def mi_hosts() -> list[HostFacts]:
    return list(load_facts_dir(REPO / "examples" / "facts" / "mi300x").values())


def test_apply_p5_overrides_catalog() -> None:
    catalog = profile("p5.48xlarge")
    out = apply_facts(catalog, [load_facts_dir(FIXTURES)["p5-001"]])
    assert (out.sockets, out.cores_per_socket, out.threads_per_core, out.cpus) == (2, 48, 2, 192)
    assert out.memory_mib == 2047961 and out.discovered is True
    assert out.gpu is not None
    assert out.gpu.affinity == {"0-3": "0-47", "4-7": "48-95"}
    assert out.gpu.nvlinks_per_pair == 18 and out.gpu.count == 8
    assert out.network.hcas is None  # EFA on AWS follows from the instance type, not ibstat
    assert out.sources["facts"] == "discovered on p5-001: slurmd-C.txt, lscpu.txt, nvidia-smi-topo.txt"
    # every replaced fact names the tool that gave it, on which hosts
    assert out.source_of("cpu_layout") == "slurmd -C on p5-001"
    assert out.source_of("memory") == "slurmd -C on p5-001 (least of the group)"
    assert out.source_of("affinity") == "nvidia-smi topo -m on p5-001"
    assert out.source_of("links") == "nvidia-smi topo -m on p5-001"
    assert out.source_of("hcas").startswith("catalog: vpc-cni")  # not replaced on AWS
    # the cached catalog entry is untouched
    assert catalog.memory_mib == 2097152 and catalog.discovered is False
    assert profile("p5.48xlarge").memory_mib == 2097152


def test_apply_dgx_h100_hcas_and_no_memory_facts() -> None:
    out = apply_facts(profile("dgx-h100"), [load_facts_dir(FIXTURES)["dgx-001"]])
    assert out.network.hcas == [
        ("mlx5_0", 400), ("mlx5_3", 400), ("mlx5_4", 400), ("mlx5_5", 400),
        ("mlx5_6", 400), ("mlx5_9", 400), ("mlx5_10", 400), ("mlx5_11", 400),
    ]  # fmt: skip
    # no slurmd -C: memory is still the catalog's advertised size, so discovered stays False
    assert out.memory_mib == 2097152 and out.discovered is False
    assert out.gpu is not None and out.gpu.nvlinks_per_pair == 18
    # no CPU layout from this host: the catalog's affinity stays
    assert out.gpu.affinity == {"0-3": "0-55", "4-7": "56-111"}
    assert out.source_of("hcas") == "ibstat on dgx-001 (Active ports)"
    # facts this host did not give still name the catalog's citation
    assert out.source_of("memory") == "catalog: NVIDIA DGX H100 user guide: 2x 56-core 8480C, 2 TB"
    assert out.source_of("affinity").startswith("catalog: DGX H100 user guide nvidia-smi topo -m")
    assert "memory" not in out.discovered_from and "cpu_layout" not in out.discovered_from


def test_apply_mi300x_example_group() -> None:
    catalog = profile("mi300x-8gpu")
    assert catalog.sockets is None and catalog.gpu is not None and catalog.gpu.affinity is None
    out = apply_facts(catalog, mi_hosts())
    assert (out.sockets, out.cores_per_socket, out.threads_per_core) == (2, 96, 2)
    assert out.memory_mib == 2321768 and out.discovered
    assert out.gpu is not None
    # NUMA 0 = CPUs 0-95,192-287 -> cores 0-95; NUMA 1 = 96-191,288-383 -> cores 96-191
    assert out.gpu.affinity == {"0-3": "0-95", "4-7": "96-191"}
    assert out.gpu.nvlinks_per_pair == 1 and out.gpu.count == 8
    assert out.network.hcas == [(f"bnxt_re{i}", 400) for i in range(8)]
    assert out.sources["facts"] == (
        "discovered on mi-[01-04]: slurmd-C.txt, lscpu.txt, rocm-smi-topo.txt, ibstat.txt"
    )
    # rocm-smi names only each GPU's NUMA node; lscpu's NUMA CPU lists turn it into cores
    assert out.source_of("affinity") == "rocm-smi --showtopo + lscpu on mi-[01-04]"
    assert out.source_of("links") == "rocm-smi --showtopo on mi-[01-04]"
    assert out.source_of("cpu_layout") == "slurmd -C on mi-[01-04]"


def test_apply_rocm_without_lscpu_keeps_catalog_affinity() -> None:
    hosts = [h.model_copy(update={"lscpu": None}) for h in mi_hosts()]
    out = apply_facts(profile("mi300x-8gpu"), hosts)
    assert out.gpu is not None and out.gpu.affinity is None  # NUMA node alone names no CPUs
    assert out.cores_per_socket == 96


def test_apply_no_hosts_is_identity() -> None:
    p = profile("dgx-h100")
    assert apply_facts(p, []) is p


def test_apply_hosts_disagree_on_cpu_layout() -> None:
    hosts = mi_hosts()
    s = hosts[2].slurmd
    assert s is not None
    smaller = s.model_copy(update={"cpus": 256, "cores_per_socket": 64})
    hosts[2] = hosts[2].model_copy(update={"slurmd": smaller, "lscpu": None})
    with pytest.raises(FactsError) as err:
        apply_facts(profile("mi300x-8gpu"), hosts)
    msg = str(err.value)
    assert "disagree on cpu layout" in msg
    assert "mi-[01-02,04]: (2, 96, 2)" in msg and "mi-03: (2, 64, 2)" in msg
    assert "split it" in msg


def test_apply_hosts_disagree_on_hcas() -> None:
    hosts = mi_hosts()
    ports = list(hosts[3].hcas or ())
    ports[5] = ports[5].model_copy(update={"state": "Down", "physical_state": "Polling"})
    hosts[3] = hosts[3].model_copy(update={"hcas": tuple(ports)})
    with pytest.raises(FactsError, match=r"disagree on active HCA ports .*mi-04: .*split it"):
        apply_facts(profile("mi300x-8gpu"), hosts)


def test_apply_memory_tolerance() -> None:
    hosts = mi_hosts()

    def with_memory(h: HostFacts, mib: int) -> HostFacts:
        assert h.slurmd is not None
        return h.model_copy(update={"slurmd": h.slurmd.model_copy(update={"real_memory_mib": mib})})

    # a few MiB of kernel reservations apart: same hardware, the least is configured
    hosts[1] = with_memory(hosts[1], 2321700)
    assert apply_facts(profile("mi300x-8gpu"), hosts).memory_mib == 2321700
    # a DIMM short: a different node type
    hosts[1] = with_memory(hosts[1], 2224000)
    with pytest.raises(FactsError, match=r"disagree on RealMemory \(mi-02: 2224000 MiB; mi-\[01,03-04\]"):
        apply_facts(profile("mi300x-8gpu"), hosts)


def test_apply_fact_missing_on_some_hosts() -> None:
    hosts = mi_hosts()
    hosts[0] = hosts[0].model_copy(update={"hcas": None})
    with pytest.raises(FactsError, match=r"active HCA ports was found on mi-\[02-04\] but not on mi-01"):
        apply_facts(profile("mi300x-8gpu"), hosts)


def test_apply_refuses_wrong_vendor_and_gpu_on_cpu_profile() -> None:
    mi = mi_hosts()[0]
    with pytest.raises(FactsError, match="amd GPU facts for profile 'dgx-h100'"):
        apply_facts(profile("dgx-h100"), [mi])
    with pytest.raises(FactsError, match=r"reports 8 amd GPUs but profile 'c7i\.48xlarge' has none"):
        apply_facts(profile("c7i.48xlarge"), [mi])


def test_apply_refuses_interleaved_cpu_numbering() -> None:
    # Sockets interleaved: NUMA node0 = even CPUs. Sibling check passes, contiguity does not.
    even = ",".join(str(i) for i in range(0, 384, 2))
    odd = ",".join(str(i) for i in range(1, 384, 2))
    lscpu = parse_lscpu(
        "CPU(s): 384\nThread(s) per core: 2\nCore(s) per socket: 96\nSocket(s): 2\nNUMA node(s): 2\n"
        f"NUMA node0 CPU(s): {even}\nNUMA node1 CPU(s): {odd}\n"
    )
    host = mi_hosts()[0].model_copy(update={"lscpu": lscpu})
    with pytest.raises(FactsError, match=r"mi-01 lscpu\.txt: NUMA node0 .* interleaves CPU ids"):
        apply_facts(profile("mi300x-8gpu"), [host])


def test_apply_nonuniform_links_leaves_links_out() -> None:
    host = HostFacts(
        hostname="g1",
        slurmd=parse_slurmd_c(
            "NodeName=g1 CPUs=64 Boards=1 SocketsPerBoard=2 CoresPerSocket=16 ThreadsPerCore=2 "
            "RealMemory=500000\n"
        ),
        gpu_topo=parse_nvidia_smi_topo(NV_PAIRS),
        files=("slurmd-C.txt", "nvidia-smi-topo.txt"),
    )
    out = apply_facts(profile("g5.48xlarge"), [host])
    assert out.gpu is not None
    assert out.gpu.count == 4 and out.gpu.nvlinks_per_pair is None
    assert out.gpu.affinity == {"0-1": "0-15", "2-3": "16-31"}
    assert out.source_of("links") == "nvidia-smi topo -m on g1 (GPU pairs differ, Links= left out)"


def test_apply_gpu_count_change_drops_catalog_affinity() -> None:
    # 4 GPUs reported without CPU affinity on a profile whose catalog affinity names 8.
    text = NV_PAIRS.replace("0-15,32-47\t0", "N/A\tN/A").replace("16-31,48-63\t1", "N/A\tN/A")
    host = HostFacts(hostname="g1", gpu_topo=parse_nvidia_smi_topo(text), files=("nvidia-smi-topo.txt",))
    out = apply_facts(profile("p4d.24xlarge"), [host])
    assert out.gpu is not None and out.gpu.count == 4 and out.gpu.affinity is None


# ------------------------------------------------------------------------------- robustness

_PARSERS = [parse_slurmd_c, parse_lscpu, parse_nvidia_smi_topo, parse_rocm_smi_topo, parse_ibstat]
_FIXTURE_LINES = sorted(
    {ln for f in FIXTURES.glob("*/*.txt") for ln in f.read_text().splitlines()}
    | {
        "",
        "X",
        " X ",
        "NV",
        "NV999",
        "Port 0:",
        "CA ''",
        "==",
        "=== ===",
        "GPU[99]\t: (Topology) Numa Node: -1",
    }
)
# Garbage made of real lines (shuffled, repeated, cut) reaches deeper than random characters.
_line_soup = st.lists(st.sampled_from(_FIXTURE_LINES), max_size=40).map("\n".join)
_cut_fixture = st.tuples(
    st.sampled_from(sorted(FIXTURES.glob("*/*.txt"))), st.integers(0, 20000), st.integers(0, 20000)
).map(lambda t: t[0].read_text()[min(t[1], t[2]) : max(t[1], t[2])])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.one_of(st.text(max_size=400), _line_soup, _cut_fixture), which=st.sampled_from(_PARSERS))
def test_garbage_only_ever_raises_facts_error(text: str, which: Callable[[str], object]) -> None:
    with contextlib.suppress(FactsError):
        which(text)
