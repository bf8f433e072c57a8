"""Every CLI verb against malformed input: exit 0, 1 or 2 with a message, never a traceback.

Two corpora go through the real entry point (``clusterforge.cli.main``, in-process, so an
escaping exception fails the test with its stack):

* ``NASTY``: hand-picked files each of which once escaped or could escape as a traceback (deep
  nesting, non-UTF-8, binary, numbers too long for ``int()``, alias bombs, wrong types);
* a Hypothesis generator: the examples mutated (keys deleted, unknown keys, values of the wrong
  type, corrupted text and bytes), a few examples per verb so the whole file stays under ~40 s
  on 2 cores (``plan`` runs the Pulumi program for each spec that validates).

``check`` gets a fuzzed ``manifest.json`` of a render made for a Slurm release whose family is not
the installed one's, with an empty root filesystem cache (CLUSTERFORGE_CACHE), so a manifest that
still parses stops at the release preflight instead of
starting daemons; the stages after it are tested with the real daemons in tests/test_check.py.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterforge.clusterspec import load_spec
from clusterforge.render import render_cluster
from clusterforge.render.writer import write_render

from .conftest import EXAMPLE_SPECS, EXAMPLES
from .test_spec import JUNK, _paths, _set, raw, run_cli

VALID = EXAMPLES / "onprem-dgx.yaml"


def _example_text(name: str) -> str:
    return (EXAMPLES / name).read_text()


NASTY: dict[str, bytes] = {
    "deep-lists": b"a: " + b"[" * 1000 + b"]" * 1000 + b"\n",
    "deep-maps": b"a: " + b"{b: " * 1000 + b"1" + b"}" * 1000 + b"\n",
    "deep-in-a-field": (_example_text("local.yaml") + "storage: " + "[" * 3000 + "]" * 3000 + "\n").encode(),
    "deep-block-indent": b"".join(b"  " * i + b"k:\n" for i in range(400)),
    "empty": b"",
    "only-a-comment": b"# nothing here\n",
    "only-whitespace": b"\n\n   \n",
    "binary": bytes(range(256)) * 4,
    "nul-byte": b"name: a\x00b\nnode_groups: []\n",
    "latin-1": "name: caf\xe9\n".encode("latin-1"),
    "utf-16": "name: x\nnode_groups: []\n".encode("utf-16"),
    "bom-utf-8": b"\xef\xbb\xbfname: x\n",
    "huge-int": b"name: x\nnode_groups: [{name: a, role: compute, count: " + b"9" * 5000 + b"}]\n",
    "huge-int-in-real-field": _example_text("p5-training.yaml").replace("count: 2", "count: " + "9" * 5000).encode(),
    "huge-but-parsable-int": _example_text("p5-training.yaml").replace("count: 2", "count: " + "9" * 400).encode(),
    "huge-float": b"name: 1.0e999\nnode_groups: .inf\n",
    "alias-bomb": b"a: &a [1,1,1,1,1,1,1,1,1,1]\n"
    + b"".join(
        f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]\n".encode() for p, c in zip("abcdefg", "bcdefgh", strict=True)
    )
    + b"node_groups: *h\n",
    "recursive-alias": b"name: x\nnode_groups: &a [*a]\n",
    "scalar": b"42\n",
    "list": b"- name: x\n",
    "python-tag": b"!!python/object/apply:os.system [echo hi]\n",
    "unknown-keys": (_example_text("local.yaml") + "bogus: 1\nslurm_: {x: 1}\n").encode(),
    "wrong-types": _example_text("onprem-dgx.yaml").replace("name: dgx-pod", "name: [1, 2]").encode(),
    "hostlist-huge": _example_text("onprem-dgx.yaml").replace("dgx-[001-016]", "dgx-[1-99999999999]").encode(),
    "hostlist-long-number": _example_text("onprem-dgx.yaml").replace("dgx-[001-016]", "dgx-[1-" + "9" * 5000 + "]").encode(),
    "duplicate-anchor-keys": b"name: x\nname: y\n<<: *nope\n",
}


def _verb_args(verb: str, spec: Path, work: Path) -> list[str]:
    if verb == "validate":
        return ["validate", str(spec)]
    if verb == "render":
        return ["render", str(spec), "--out", str(work / "out")]
    if verb == "plan":
        return ["plan", str(spec)]
    if verb == "inventory":
        return ["inventory", str(spec), "--out", str(work / "inv")]
    if verb == "diff-head":
        return ["diff", "--base-spec", str(VALID), "--head-spec", str(spec), "--no-plan"]
    if verb == "diff-base":
        return ["diff", "--base-spec", str(spec), "--head-spec", str(VALID), "--no-plan"]
    raise AssertionError(verb)


SPEC_VERBS = ["validate", "render", "plan", "inventory", "diff-head", "diff-base"]


def _assert_clean(code: int, out: str, what: str) -> None:
    assert "Traceback" not in out, f"{what}:\n{out}"
    assert code in (0, 1, 2), f"{what}: exit {code}\n{out}"
    if code != 0:
        assert out.strip(), f"{what}: exit {code} without a message"


def _run_spec(verb: str, content: bytes, what: str) -> None:
    with tempfile.TemporaryDirectory(prefix="cf-fuzz-") as d:
        work = Path(d)
        (work / "facts").mkdir()  # amd-mi300x's facts_dir is relative to the spec file
        spec = work / "spec.yaml"
        spec.write_bytes(content)
        code, out = run_cli(*_verb_args(verb, spec, work))
        _assert_clean(code, out, f"{verb} {what}")


@pytest.mark.parametrize("verb", SPEC_VERBS)
def test_nasty_files_through_every_verb(verb: str) -> None:
    for name, content in NASTY.items():
        _run_spec(verb, content, name)


def test_deep_nesting_is_one_clear_message(tmp_path: Path) -> None:
    spec = tmp_path / "deep.yaml"
    spec.write_text("a: " + "[" * 1000 + "]" * 1000 + "\n")
    code, out = run_cli("validate", str(spec))
    assert code == 2
    assert out.count("error:") == 1
    assert "a[0][0][0]" in out and "(line 1)" in out  # field, where
    assert "nest deeper than 64 levels" in out  # why
    assert "Fix: remove the extra brackets" in out  # fix


def test_alias_bomb_is_refused_quickly(tmp_path: Path) -> None:
    spec = tmp_path / "bomb.yaml"
    spec.write_bytes(NASTY["alias-bomb"])
    code, out = run_cli("validate", str(spec))
    assert code == 2 and "more than 100000 values" in out and "aliases" in out


# ------------------------------------------------------------------ generated malformed specs


@st.composite
def malformed_specs(draw: st.DrawFn) -> bytes:
    spec = copy.deepcopy(raw(draw(st.sampled_from(EXAMPLE_SPECS))))
    for _ in range(draw(st.integers(0, 2))):
        paths = _paths(spec)
        path = draw(st.sampled_from(paths))
        action = draw(st.sampled_from(["delete", "junk", "unknown", "deep", "huge"]))
        value: Any = None
        if action == "junk":
            value = draw(JUNK)
        elif action == "unknown":
            path = (*path[:-1], draw(st.text("abcxyz_", min_size=1, max_size=8)))
            value = 1
        elif action == "deep":
            value = 0
            for _ in range(draw(st.integers(50, 200))):
                value = [value]
        elif action == "huge":
            value = draw(st.sampled_from([10**30, -(10**30), 1e308, float("inf"), float("nan"), 2**63]))
        try:
            _set(spec, path, value, delete=action == "delete")
        except (TypeError, KeyError, IndexError):
            continue
    text = yaml.safe_dump(spec, width=10_000).encode()
    # half the specs stay parseable YAML, so that the rules, the renderer and the verbs see them
    corrupt = draw(st.sampled_from(["none", "none", "none", "text", "bytes", "truncate"]))
    cut = draw(st.integers(0, len(text)))
    if corrupt == "text":
        text = text[:cut] + draw(st.sampled_from([b"", b":", b"\t", b"[", b"{{", b"- ", b"&a *b", b"!!binary x"])) + text[cut:]
    elif corrupt == "bytes":
        text = text[:cut] + draw(st.binary(min_size=1, max_size=8)) + text[cut:]
    elif corrupt == "truncate":
        text = text[:cut]
    return text


# Examples per verb: plan runs the Pulumi program for every spec that still validates (~1 s).
BUDGET = {"validate": 20, "render": 20, "plan": 10, "inventory": 15, "diff-head": 10, "diff-base": 8}


@pytest.mark.parametrize("verb", SPEC_VERBS)
def test_generated_malformed_specs_through_every_verb(verb: str) -> None:
    @settings(max_examples=BUDGET[verb], deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(content=malformed_specs())
    def run(content: bytes) -> None:
        _run_spec(verb, content, repr(content[:200]))

    run()


# ------------------------------------------------------------------ check on a fuzzed manifest


@pytest.fixture(scope="module")
def render_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A render for a Slurm release other than the installed one (see the module docstring)."""
    installed = None
    if shutil.which("slurmctld"):
        import subprocess

        v = subprocess.run(["slurmctld", "-V"], capture_output=True, text=True, timeout=10, check=False).stdout
        installed = ".".join(v.split()[-1].split(".")[:2]) if v.strip() else None
    # another release family than the host's (22.05 | 23.02-24.11 | 25.05+): its rootfs is not in
    # the empty cache _run_check points at
    version = "24.11" if installed not in ("23.02", "23.11", "24.05", "24.11") else "22.05"
    out = tmp_path_factory.mktemp("render")
    cluster = load_spec(EXAMPLES / "onprem-dgx.yaml")
    write_render(render_cluster(cluster, base_dir=EXAMPLES, slurm_version=version), out)
    return out


def _run_check(render_dir: Path, manifest: bytes | None, what: str, mutate: Callable[[Path], None] | None = None) -> None:
    with tempfile.TemporaryDirectory(prefix="cf-fuzz-check-") as d:
        folder = Path(d) / "r"
        shutil.copytree(render_dir, folder)
        if manifest is not None:
            (folder / "manifest.json").write_bytes(manifest)
        if mutate is not None:
            mutate(folder)
        with mock.patch.dict(os.environ, {"CLUSTERFORGE_CACHE": str(Path(d) / "no-rootfs")}):
            code, out = run_cli("check", str(folder), "--timeout", "5")
        _assert_clean(code, out, f"check {what}")
        assert code != 0, f"check {what}: a broken render passed\n{out}"


NASTY_MANIFESTS: dict[str, bytes] = {
    "empty": b"",
    "binary": bytes(range(256)),
    "latin-1": '{"cluster": "caf\xe9"}'.encode("latin-1"),
    "deep": b"[" * 100_000 + b"]" * 100_000,
    "deep-object": b'{"expect": ' + b'{"a": ' * 5000 + b"1" + b"}" * 5000 + b"}",
    "list": b"[]",
    "null": b"null",
    "huge-int": b'{"expect": {"nodes": [{"names": "n1", "cpus": ' + b"9" * 5000 + b"}]}}",
    "nan": b'{"expect": {"nodes": [{"names": "n1", "cpus": NaN}]}}',
    "bad-hostlist": b'{"expect": {"controller": {}, "nodes": [{"names": "n[9-1]"}]}}',
}


def test_check_nasty_manifests(render_dir: Path) -> None:
    for name, content in NASTY_MANIFESTS.items():
        _run_check(render_dir, content, name)


def test_check_without_slurm_conf(render_dir: Path) -> None:
    _run_check(render_dir, None, "no slurm.conf", lambda f: (f / "slurm" / "slurm.conf").unlink())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_check_generated_manifests(render_dir: Path, data: st.DataObject) -> None:
    manifest = json.loads((render_dir / "manifest.json").read_text())
    version = manifest["slurm_version"]
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(_paths(manifest)))
        try:
            if data.draw(st.booleans()):
                _set(manifest, path, None, delete=True)
            else:
                _set(manifest, path, data.draw(JUNK))
        except (TypeError, KeyError, IndexError):
            continue
    if isinstance(manifest, dict):
        manifest["slurm_version"] = version  # stop at the preflight, never start daemons
    text = json.dumps(manifest).encode()
    if data.draw(st.booleans()):
        cut = data.draw(st.integers(0, len(text)))
        text = text[:cut] + data.draw(st.binary(max_size=6)) + text[cut:]
    _run_check(render_dir, text, repr(text[:200]))
