"""One resolution for every verb: `validate` and `render` agree, `--facts` means the same everywhere,
and every verb that builds something refuses a spec with errors the same way."""

from __future__ import annotations

import copy
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusterforge.clusterspec import parse_spec
from clusterforge.errors import ClusterforgeError, SpecError
from clusterforge.render import render
from clusterforge.resolve import SpecInvalid, resolve, resolve_file
from tests.test_spec import _paths, run_cli

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
EXAMPLE_SPECS = sorted(p.name for p in EXAMPLES.glob("*.yaml"))
FACTS = EXAMPLES / "facts" / "mi300x"


def cli(*args: str) -> tuple[int, str]:
    return run_cli(*args)


@pytest.mark.parametrize("name", EXAMPLE_SPECS)
def test_examples_resolve_and_render(name: str) -> None:
    rc = resolve_file(EXAMPLES / name)
    assert rc.errors == ()
    result = render(rc)
    assert "slurm/slurm.conf" in result.files
    # every group has its profile resolved once; facts were applied where the spec points at them
    assert all(g.profile is not None for g in rc.groups)
    if name == "amd-mi300x.yaml":
        assert rc.group("mi300x").facts_hosts == ("mi-01", "mi-02", "mi-03", "mi-04")


# --------------------------------------------------------------------------- --facts everywhere


def _facts_spec(tmp: Path) -> Path:
    """amd-mi300x without facts_dir: its OEM profile has no CPU layout, so it needs --facts."""
    data = yaml.safe_load((EXAMPLES / "amd-mi300x.yaml").read_text())
    del data["facts_dir"]
    spec = tmp / "mi.yaml"
    spec.write_text(yaml.safe_dump(data))
    return spec


def test_profile_that_needs_facts_is_an_error_without_them(tmp_path: Path) -> None:
    spec = _facts_spec(tmp_path)
    code, out = cli("validate", str(spec))
    assert code == 1 and "cpu-layout-unknown" in out
    code, out = cli("render", str(spec), "--out", str(tmp_path / "out"))
    assert code == 1 and "not rendered" in out and not (tmp_path / "out").exists()


def test_facts_option_means_the_same_to_every_verb(tmp_path: Path) -> None:
    spec = _facts_spec(tmp_path)
    code, out = cli("validate", str(spec), "--facts", str(FACTS))
    assert code == 0, out
    assert "0 error(s)" in out
    code, out = cli("render", str(spec), "--out", str(tmp_path / "out"), "--facts", str(FACTS))
    assert code == 0, out
    # the facts reached the render: slurmd -C's layout of the MI300X hosts, not the catalog's (unknown)
    conf = (tmp_path / "out" / "slurm" / "slurm.conf").read_text()
    assert "NodeName=mi-[01-04]" in conf and "SocketsPerBoard=2" in conf
    code, out = cli("inventory", str(spec), "--out", str(tmp_path / "inv"), "--facts", str(FACTS))
    assert code == 0, out
    rendered = (tmp_path / "inv.render" / "slurm" / "slurm.conf").read_text()
    assert rendered == conf


def test_missing_facts_folder_is_exit_2(tmp_path: Path) -> None:
    code, out = cli("validate", str(EXAMPLES / "local.yaml"), "--facts", str(tmp_path / "nope"))
    assert code == 2 and "does not exist" in out and "Traceback" not in out


# --------------------------------------------------------------------------- one refusal


def _with_error(tmp: Path) -> Path:
    data = yaml.safe_load((EXAMPLES / "onprem-dgx.yaml").read_text())
    data["partitions"][0]["node_groups"] = ["no-such-group"]
    spec = tmp / "bad.yaml"
    spec.write_text(yaml.safe_dump(data))
    return spec


def test_inventory_refuses_a_spec_with_errors_as_render_does(tmp_path: Path) -> None:
    spec = _with_error(tmp_path)
    code_r, out_r = cli("render", str(spec), "--out", str(tmp_path / "out"))
    code_i, out_i = cli("inventory", str(spec), "--out", str(tmp_path / "inv"))
    assert code_r == code_i == 1
    assert "not rendered" in out_r and "not written" in out_i
    # the same findings, line for line
    assert out_r.splitlines()[:-1] == out_i.splitlines()[:-1]
    assert not (tmp_path / "inv").exists() and not (tmp_path / "inv.render").exists()


def test_configure_refuses_a_spec_with_errors(tmp_path: Path) -> None:
    from clusterforge.configure import configure

    with pytest.raises(SpecInvalid, match="not configured") as exc:
        configure(_with_error(tmp_path), inventory_dir=tmp_path / "inv")
    assert exc.value.exit_code == 1
    assert not (tmp_path / "inv").exists()


# --------------------------------------------------------------------------- validate <=> render

JUNK: list[Any] = [None, -1, 0, 1, 3, 10**6, "", "x", "abc_1", True, False, [], {}, [1, 2], {"a": 1},
                   "10.0.0.0/33", "dgx-[9-1]", "p9.huge", "0.0.0.0/0", "gpu-[001-999]", "1-00:00:00", "22.05",
                   "25.05", "block", "tree", "none", "efa", "infiniband", "compute", "login", "controller"]


def _mutants(count: int, seed: int) -> list[tuple[str, dict[str, Any]]]:
    """A fixed corpus of malformed specs: each example with 1-3 values replaced or deleted."""
    rnd = random.Random(seed)
    raw = {n: yaml.safe_load((EXAMPLES / n).read_text()) for n in EXAMPLE_SPECS}
    out = []
    for _ in range(count):
        name = rnd.choice(EXAMPLE_SPECS)
        spec = copy.deepcopy(raw[name])
        for _ in range(rnd.randint(1, 3)):
            path = rnd.choice(_paths(spec))
            node = spec
            for p in path[:-1]:
                node = node[p]
            if rnd.random() < 0.3:
                del node[path[-1]]
            else:
                node[path[-1]] = copy.deepcopy(rnd.choice(JUNK))
        out.append((name, spec))
    return out


def test_a_spec_validate_accepts_renders(tmp_path: Path) -> None:
    """Every example plus 800 generated malformed specs: no error findings => the render succeeds.

    A disagreement (validate says 0 errors, render raises) is a rule the validator lacks."""
    (tmp_path / "facts").symlink_to(EXAMPLES / "facts")
    accepted = refused = unparsable = 0
    disagreements = []
    for i, (name, data) in enumerate([(n, yaml.safe_load((EXAMPLES / n).read_text())) for n in EXAMPLE_SPECS]
                                     + _mutants(800, seed=11)):
        try:
            cluster = parse_spec(data, f"mutant {i} of {name}")
            rc = resolve(cluster, base_dir=tmp_path if name == "amd-mi300x.yaml" else EXAMPLES)
        except (SpecError, ClusterforgeError):
            unparsable += 1
            continue
        if rc.errors:
            refused += 1
            continue
        accepted += 1
        try:
            render(rc)
        except ClusterforgeError as exc:
            disagreements.append(f"mutant {i} of {name}: validate accepts, render says: {exc}")
    assert disagreements == []
    # the corpus exercises all three outcomes (a corpus that only ever fails to parse proves nothing)
    assert accepted > 40 and refused > 20 and unparsable > 20, (accepted, refused, unparsable)


def test_render_cli_uses_the_same_resolution(tmp_path: Path) -> None:
    """`render` of a copied example with its facts next to it equals the library's render."""
    shutil.copytree(EXAMPLES / "facts", tmp_path / "facts")
    shutil.copy(EXAMPLES / "amd-mi300x.yaml", tmp_path / "s.yaml")
    code, out = cli("render", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "out"))
    assert code == 0, out
    lib = render(resolve_file(tmp_path / "s.yaml"))
    assert (tmp_path / "out" / "slurm" / "gres.conf").read_text() == lib.files["slurm/gres.conf"].content


@pytest.mark.parametrize("verb", ["validate", "render", "inventory"])  # diff: tests/test_diff.py
def test_a_malformed_facts_folder_is_one_message_for_every_verb(tmp_path: Path, verb: str) -> None:
    facts = tmp_path / "facts"
    (facts / "mi-01").mkdir(parents=True)
    (facts / "mi-01" / "slurmd-C.txt").write_text("not what slurmd -C prints\n")
    spec = str(EXAMPLES / "amd-mi300x.yaml")
    args = {
        "validate": ["validate", spec],
        "render": ["render", spec, "--out", str(tmp_path / "out")],
        "inventory": ["inventory", spec, "--out", str(tmp_path / "inv")],
    }[verb]
    code, out = cli(*args, "--facts", str(facts))
    assert code == 2, out
    assert "no 'NodeName=' lines" in out and "Traceback" not in out
    assert not (tmp_path / "out").exists() and not (tmp_path / "inv").exists()
