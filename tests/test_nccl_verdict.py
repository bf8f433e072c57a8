"""NCCL acceptance verdict (clusterforge.nccl_verdict, `clusterforge nccl-verdict`) on real nccl-tests
outputs kept in tests/fixtures/nccl/ (each with a .source.md naming where it was published).

Every expected number below was read off the fixture text by eye, not computed by the parser.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clusterforge.cli import app
from clusterforge.errors import ClusterforgeError
from clusterforge.nccl_verdict import (
    GIB,
    NcclOutputError,
    collect_inputs,
    judge,
    large_message,
    load_expectations,
    parse_file,
    parse_text,
)
from clusterforge.nccl_verdict.report import parse_size

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "nccl"
JOB = ROOT / "examples" / "jobs" / "nccl-allreduce.sbatch"
runner = CliRunner()


def cli(*args: str) -> tuple[int, str]:
    res = runner.invoke(app, ["nccl-verdict", *args])
    if isinstance(res.exception, ClusterforgeError):  # main() turns these into "error: ..." + exit 2
        return res.exception.exit_code, str(res.exception)
    return res.exit_code, res.output


# --- fixtures and their sources -----------------------------------------------------------------


def test_every_fixture_has_its_source() -> None:
    outputs = sorted(FIX.glob("*.txt"))
    assert len(outputs) >= 6
    for f in outputs:
        note = (FIX / (f.name + ".source.md")).read_text()
        assert note.startswith("SOURCE: "), f
        assert "https://github.com/" in note or "h100-2node-roce.txt" in note, f


# --- parsing: figures read off the fixtures ---------------------------------------------------


def test_parse_p5_two_node_efa_table_with_srun_labels() -> None:
    run = parse_file(FIX / "p5-2node-efa.txt")
    assert len(run.rows) == 32  # 8 B .. 16 GiB, doubling
    first, last = run.rows[0], run.rows[-1]
    assert (first.size, first.count, first.dtype, first.redop) == (8, 2, "float", "sum")
    assert (last.size, last.count) == (17179869184, 4294967296)
    assert (last.oop_algbw, last.oop_busbw, last.ip_algbw, last.ip_busbw) == (259.78, 487.09, 259.87, 487.26)
    one_gib = next(r for r in run.rows if r.size == 1073741824)
    assert (one_gib.oop_busbw, one_gib.ip_busbw) == (436.95, 440.96)
    assert all(r.wrong == 0 for r in run.rows)
    assert run.avg_busbw is None and run.max_bytes is None and run.hosts == []  # the README cut them


def test_parse_single_node_a100_full_output() -> None:
    run = parse_file(FIX / "a100-1node-nvlink.txt")
    assert len(run.rows) == 1
    r = run.rows[0]
    assert (r.size, r.count, r.oop_busbw, r.ip_busbw, r.oop_wrong, r.ip_wrong) == (
        10737418240, 2684354560, 235.61, 235.62, 0, 0)
    assert run.avg_busbw == 235.616
    assert run.out_of_bounds == 0
    assert run.max_bytes == 10737418240
    assert (run.hosts, run.ranks) == (["inst-d5ige-comp"], 8)


def test_parse_two_node_h100_hosts_and_summary() -> None:
    run = parse_file(FIX / "h100-2node-roce.txt")
    assert run.hosts == ["inst-xxxxx-h100-ol89", "inst-yyyyy-h100-ol89"]
    assert run.ranks == 16
    assert [r.size for r in run.rows] == [1073741824, 2147483648, 4294967296, 8589934592, 17179869184]
    assert (run.rows[2].oop_busbw, run.rows[2].ip_busbw) == (461.83, 461.60)
    assert run.avg_busbw == 458.452


def test_parse_eight_node_h100_ib_excerpt() -> None:
    run = parse_file(FIX / "h100-8node-ib.txt")
    assert [r.size for r in run.rows] == [536870912, 1073741824, 2147483648, 4294967296, 8589934592]
    assert (run.rows[-1].oop_busbw, run.rows[-1].ip_busbw) == (386.56, 385.56)
    assert run.avg_busbw == 373.187
    assert run.max_bytes == 2147483648  # what its header says; the README's table goes further


def test_old_release_error_column_and_na_wrong() -> None:
    # the column layout of nccl-tests before "root"/"#wrong" (aws/aws-ofi-nccl#33, 2020), and a -c 0 run
    old = (
        "#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error\n"
        "#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n"
        "     1048576        262144   float     sum   1035.3    1.01    1.90  5e-07    643.4    1.63    3.06  5e-07\n"
    )
    r = parse_text(old).rows[0]
    assert (r.size, r.oop_busbw, r.ip_busbw, r.oop_wrong, r.wrong) == (1048576, 1.90, 3.06, None, 0)
    na = (
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
        "        2048            32     float    none      -1   106.88    0.02    0.02       0   111.25    0.02    0.02    N/A\n"
    )
    r = parse_text(na).rows[0]
    assert (r.oop_wrong, r.ip_wrong, r.ip_busbw) == (0, None, 0.02)


# --- the verdict per fixture ---------------------------------------------------------------------


def test_expected_catalog_figures_and_sources() -> None:
    table = load_expectations()
    assert table["p5.48xlarge"].busbw_gbs == 487
    assert table["single-node-h100-nvlink"].busbw_gbs == 480
    assert table["dgx-h100"].busbw_gbs == 368
    assert table["p5.48xlarge"].single_node == "single-node-h100-nvlink"
    for e in table.values():
        assert all(s.url.startswith("https://") and s.date for s in e.sources), e.name
    for left_out in ("p5e.48xlarge", "p5en.48xlarge", "p4d.24xlarge"):  # no published figure found
        assert left_out not in table


@pytest.mark.parametrize(
    ("fixture", "expect", "code", "busbw"),
    [
        ("p5-2node-efa.txt", "p5.48xlarge", 0, "487.17"),  # (487.09 + 487.26) / 2 at 16 GiB
        ("h100-8node-ib.txt", "dgx-h100", 0, "386.06"),  # (386.56 + 385.56) / 2 at 8 GiB
        ("a100-1node-nvlink.txt", "single-node-a100-nvlink", 0, "235.62"),  # 235.615 rounds up
        ("v100-1node-nvlink.txt", "single-node-a100-nvlink", 1, "135.45"),  # the low figure
        ("h100-8node-ib.txt", "p5.48xlarge", 1, "386.06"),  # an IB H100 run is not a 2-node p5 run
    ],
)
def test_verdict_per_fixture(fixture: str, expect: str, code: int, busbw: str) -> None:
    rc, text = cli(str(FIX / fixture), "--expect", expect)
    assert rc == code, text
    assert busbw in text
    assert ("verdict: PASS" if code == 0 else "verdict: FAIL") in text


def test_large_message_is_judged_at_min_size_and_above() -> None:
    run = parse_file(FIX / "p5-2node-efa.txt")
    assert large_message(run, GIB).size == 17179869184
    assert large_message(run, parse_size("512M")).size == 17179869184
    with pytest.raises(NcclOutputError, match="largest message is 1073741824 bytes"):
        large_message(parse_file(FIX / "v100-1node-nvlink.txt"), parse_size("2G"))


def test_tolerance_is_configurable() -> None:
    # 135.45 GB/s against 230: fails at 0.90 (207.0), passes at 0.5 (115.0)
    assert cli(str(FIX / "v100-1node-nvlink.txt"), "--expect", "single-node-a100-nvlink")[0] == 1
    rc, text = cli(str(FIX / "v100-1node-nvlink.txt"), "--expect", "single-node-a100-nvlink", "--tolerance", "0.5")
    assert rc == 0 and "115.0" in text


def test_wrong_results_fail_whatever_the_bandwidth() -> None:
    text = (FIX / "a100-1node-nvlink.txt").read_text().replace(
        "235.61      0    79750  134.64  235.62      0", "235.61      3    79750  134.64  235.62      0")
    run = parse_text(text, "a100-with-wrong")
    v = judge(run, {}, load_expectations()["single-node-a100-nvlink"])
    assert not v.ok and v.run is not None
    assert v.run.wrong == 3
    assert "#wrong = 3" in v.run.reasons[0]


# --- slow nodes: a constructed allocation of real single-node outputs ---------------------------


def _allocation(tmp_path: Path) -> Path:
    """gpu-001..003 ran the A100 single-node output, gpu-004 the V100 one (the low figure)."""
    out = tmp_path / "nccl-42"
    out.mkdir()
    for n in ("gpu-001", "gpu-002", "gpu-003"):
        shutil.copy(FIX / "a100-1node-nvlink.txt", out / f"node-{n}.out")
    shutil.copy(FIX / "v100-1node-nvlink.txt", out / "node-gpu-004.out")
    shutil.copy(FIX / "p5-2node-efa.txt", out / "all.out")
    return out


def test_slow_node_named_against_the_expected_figure(tmp_path: Path) -> None:
    out = _allocation(tmp_path)
    rc, text = cli(str(out), "--expect", "single-node-a100-nvlink")
    assert rc == 1
    assert "slow nodes: gpu-004" in text
    assert "gpu-004: busbw 135.5 GB/s < 207.0 GB/s" in text  # 0.9 x 230
    for ok in ("gpu-001", "gpu-002", "gpu-003"):
        assert f"{ok}: busbw" not in text


def test_slow_node_named_as_outlier_without_expectation(tmp_path: Path) -> None:
    run, nodes = collect_inputs([str(_allocation(tmp_path))])
    assert run is not None and run.name == "all.out"
    v = judge(None, {n: parse_file(p) for n, p in nodes.items()}, None)
    assert v.slow_nodes == ["gpu-004"]
    # median of 235.615 x3 and 135.455 is 235.615; 90 % of it is 212.1
    assert "212.1" in v.nodes[-1].reasons[0]


def test_p5_allocation_all_nodes_run_and_nodes_judged_separately(tmp_path: Path) -> None:
    out = _allocation(tmp_path)
    rc, text = cli(str(out), "--expect", "p5.48xlarge", "--node-expect-gbs", "230")
    assert rc == 1
    lines = {ln.split()[0]: ln for ln in text.splitlines() if ln.startswith(("all nodes", "gpu-"))}
    assert "ok" in lines["all"]  # all.out: 487.17 >= 438.3
    assert "slow nodes: gpu-004" in text


def test_two_nodes_without_expectation_is_refused(tmp_path: Path) -> None:
    shutil.copy(FIX / "a100-1node-nvlink.txt", tmp_path / "node-a.out")
    shutil.copy(FIX / "v100-1node-nvlink.txt", tmp_path / "node-b.out")
    rc, text = cli(str(tmp_path))
    assert rc == 2
    assert "nothing to hold the figures to" in text


def test_name_equals_file_names_a_node(tmp_path: Path) -> None:
    run, nodes = collect_inputs([f"dgx-07={FIX / 'a100-1node-nvlink.txt'}", str(FIX / "p5-2node-efa.txt")])
    assert run == FIX / "p5-2node-efa.txt"
    assert nodes == {"dgx-07": FIX / "a100-1node-nvlink.txt"}


# --- unreadable input: exit 2 with file, line, why, fix ------------------------------------------


def test_truncated_file_is_exit_2_with_line_and_fix() -> None:
    rc, text = cli(str(FIX / "truncated.txt"), "--expect", "p5.48xlarge")
    assert rc == 2
    assert text.startswith(f"{FIX / 'truncated.txt'}:26: table row has 7 fields, the header has 13")
    assert "fix: rerun" in text


def test_run_cut_at_a_line_boundary_is_exit_2() -> None:
    text = (FIX / "h100-2node-roce.txt").read_text()
    cut = text[: text.index("  4294967296    1073741824")]
    with pytest.raises(NcclOutputError) as exc:
        parse_text(cut, "cut.out")
    assert exc.value.line == 25
    assert "stops at 2147483648 bytes of 17179869184 without its '# Avg bus bandwidth' line" in exc.value.why


def test_not_nccl_output_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "all.out"
    bad.write_text("srun: error: gpu-003: task 17: Exited with exit code 1\n")
    rc, text = cli(str(bad), "--expect", "p5.48xlarge")
    assert rc == 2 and "no nccl-tests result table" in text and "fix:" in text
    rc, text = cli(str(tmp_path / "nope.out"), "--expect", "p5.48xlarge")
    assert rc == 2 and "cannot read it" in text
    rc, text = cli(str(FIX / "p5-2node-efa.txt"), "--expect", "p9.huge")
    assert rc == 2 and "not in catalog/nccl_expected.yaml" in text


def test_main_prints_one_line_not_a_traceback() -> None:
    res = subprocess.run(
        ["python3", "-m", "clusterforge.cli", "nccl-verdict", str(FIX / "truncated.txt"), "--expect", "p5.48xlarge"],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    assert res.returncode == 2
    assert res.stderr.startswith("error: ") and "Traceback" not in res.stderr


# --- the job template writes what the verdict reads ----------------------------------------------


def _stub(path: Path, body: str) -> None:
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_job_template_per_node_then_all(tmp_path: Path) -> None:
    """Run the sbatch script with stand-ins for srun/scontrol/all_reduce_perf (rank 0's output only)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "srun.log"
    _stub(bindir / "scontrol", 'printf "gpu-001\\ngpu-002\\ngpu-003\\ngpu-004\\n"\n')
    # srun: --mpi=list answers like Slurm; otherwise record the options and run the command once
    _stub(bindir / "srun", f"""
if [[ $1 == --mpi=list ]]; then printf 'MPI plugin types are...\\n\\tnone\\n\\tpmi2\\n\\tpmix\\n'; exit 0; fi
opts=(); while [[ $1 == -* ]]; do opts+=("$1"); [[ $1 == -N || $1 == -w ]] && {{ shift; opts+=("$1"); }}; shift; done
echo "${{opts[*]}} -- $*" >> {log}
node=""; for i in "${{!opts[@]}}"; do [[ ${{opts[$i]}} == -w ]] && node=${{opts[$((i+1))]}}; done
NODE=$node exec "$@"
""")
    _stub(bindir / "all_reduce_perf", f"""
case $NODE in gpu-004) cat {FIX / 'v100-1node-nvlink.txt'};; "") cat {FIX / 'p5-2node-efa.txt'};;
  *) cat {FIX / 'a100-1node-nvlink.txt'};; esac
""")
    out = tmp_path / "nccl-7"
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "SLURM_JOB_ID": "7",
           "SLURM_JOB_NODELIST": "gpu-[001-004]", "SLURM_GPUS_PER_NODE": "8",
           "NCCL_TESTS_BIN": str(bindir / "all_reduce_perf"), "NCCL_OUT_DIR": str(out)}
    res = subprocess.run(["bash", str(JOB)], env=env, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in out.glob("*.out")) == [
        "all.out", "node-gpu-001.out", "node-gpu-002.out", "node-gpu-003.out", "node-gpu-004.out"]
    calls = log.read_text().splitlines()
    assert "--mpi=pmix -N1 -w gpu-004 --ntasks=8 --gpus-per-node=8 -- " in "\n".join(calls)
    assert any(c.startswith("--mpi=pmix -N 4 --ntasks-per-node=8 --gpus-per-node=8 --") for c in calls)
    assert all(c.endswith("-b 8 -e 16G -f 2 -g 1") for c in calls)
    rc, text = cli(str(out), "--expect", "single-node-a100-nvlink")
    assert rc == 1 and "slow nodes: gpu-004" in text


def test_job_template_refuses_a_missing_mpi_plugin(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _stub(bindir / "srun", "printf 'MPI plugin types are...\\n\\tnone\\n\\tpmi2\\n'\n")
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "SLURM_JOB_ID": "8",
           "SLURM_JOB_NODELIST": "gpu-001", "SLURM_GPUS_PER_NODE": "8", "NCCL_OUT_DIR": str(tmp_path / "o")}
    res = subprocess.run(["bash", str(JOB)], env=env, capture_output=True, text=True, check=False)
    assert res.returncode == 2
    assert "srun --mpi=pmix: not a plugin of this Slurm" in res.stderr and "pmi2" in res.stderr


def test_job_template_header() -> None:
    text = JOB.read_text()
    for line in ("#SBATCH -N 2", "#SBATCH --gpus-per-node=8", "#SBATCH --ntasks-per-node=8",
                 "#SBATCH --exclusive", "#SBATCH --partition=gpu"):
        assert line in text
    assert text.startswith("#!/bin/bash -l\n")
