"""The CLI builds and imports only what the verb it runs needs, and says the same as the whole CLI.

``cli._app_for`` hands typer the named verb alone (typer builds a click command from every
registered function when it starts); each verb imports its modules when it runs. Neither may
change a word of help, usage or error text, and no verb may import another verb's modules.
"""

from __future__ import annotations

import ast
import io
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from clusterforge import cli

from .conftest import EXAMPLES, ROOT


def _run(argv: list[str], *, whole_tree: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    buf = io.StringIO()
    with monkeypatch.context() as m:
        m.setattr(sys, "argv", ["clusterforge", *argv])
        m.setenv("COLUMNS", "100")
        if whole_tree:
            m.setattr(cli, "_app_for", lambda _argv: cli.app)
        with redirect_stdout(buf), redirect_stderr(buf):
            try:
                cli.main()
                code = 0
            except SystemExit as exc:
                code = int(exc.code or 0)
    return code, buf.getvalue()


def _verbs() -> list[list[str]]:
    out: list[list[str]] = [[c.name] for c in cli.app.registered_commands if c.name]
    for g in cli.app.registered_groups:
        assert g.name and g.typer_instance
        out.append([g.name])
        out += [[g.name, c.name] for c in g.typer_instance.registered_commands if c.name]
    return out


ARGVS = [
    *([*v, "--help"] for v in _verbs()),
    *([*v, "--no-such-option"] for v in _verbs()),
    ["render"], ["render", str(EXAMPLES / "p5-training.yaml")], ["render", "--out"],
    ["validate", str(EXAMPLES / "p5-training.yaml"), "--fail-on", "info"],
    ["local"], ["local", "nosuch"], ["nosuch"], ["rendr"], [], ["--help"],
]


@pytest.mark.parametrize("argv", ARGVS, ids=lambda a: " ".join(a) or "(nothing)")
def test_one_verb_tree_says_what_the_whole_tree_says(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert _run(argv, whole_tree=False, monkeypatch=monkeypatch) == _run(argv, whole_tree=True,
                                                                        monkeypatch=monkeypatch)


def test_one_verb_tree_holds_that_verb_alone() -> None:
    names = [c.name for c in cli._app_for(["render", "x"]).registered_commands]
    assert names == ["render", "_"] and cli._app_for(["nosuch"]) is cli.app
    assert [g.name for g in cli._app_for(["local", "up"]).registered_groups] == ["local"]


# modules of other verbs, and heavy libraries only they use (urllib.request: the node agent's
# metadata client, which a cloud render does not run; it imports the module for config() alone)
NOT_FOR_RENDER = ("pulumi", "pulumi_aws", "boto3", "botocore", "ansible_runner", "clusterforge.plan",
                  "clusterforge.diff", "clusterforge.check", "clusterforge.local", "clusterforge.inventory",
                  "clusterforge.configure", "clusterforge.nccl_verdict", "urllib.request", "http.client")


def test_render_imports_no_other_verbs_modules(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "from clusterforge.cli import main; main()",
         "render", str(EXAMPLES / "p5-training.yaml"), "--out", str(tmp_path / "out")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    imported = {line.rsplit("|", 1)[1].strip() for line in res.stderr.splitlines() if line.startswith("import time:")}
    assert {"clusterforge.render", "clusterforge.aws.node_agent"} <= imported  # the listing is read right
    loaded = sorted(m for m in imported if m.split(".")[0] in NOT_FOR_RENDER or m.startswith(NOT_FOR_RENDER))
    assert loaded == []


def test_render_imports_no_asyncio(tmp_path: Path) -> None:
    # nothing a render does is asynchronous; what imported asyncio was pydantic_core's import, through
    # typing_extensions' @deprecated before 4.16 (about 60 M instructions on Python 3.11: the
    # benchmark's --instructions). Fails where an older typing_extensions is installed.
    imported = _imported(["render", str(EXAMPLES / "p5-training.yaml"), "--out", str(tmp_path / "out")])
    assert (tmp_path / "out" / "manifest.json").is_file()  # the render ran
    assert sorted(m for m in imported if m.split(".")[0] == "asyncio") == []


# the pydantic models a render validates or writes: the spec, the catalog, the manifest
RENDER_MODELS = {"clusterforge.catalog", "clusterforge.catalog.os_slurm", "clusterforge.clusterspec.models",
                 "clusterforge.clusterspec.package_repo", "clusterforge.render.manifest"}

_BUILT_MODELS = """
import contextlib, io, sys
sys.argv[0] = "clusterforge"
from clusterforge.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    main()
from pydantic import BaseModel
def subs(c):
    for s in c.__subclasses__():
        yield s
        yield from subs(s)
print(sorted({m.__module__ for m in subs(BaseModel) if m.__dict__.get("__pydantic_complete__")}))
"""


def _render_probe(code: str, out: Path) -> set[str]:
    """What ``code`` (a program that runs the CLI's ``main``, then prints a list) prints after a
    render of p5-training into ``out``."""
    res = subprocess.run(
        [sys.executable, "-c", code, "render", str(EXAMPLES / "p5-training.yaml"), "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert (out / "manifest.json").is_file()  # the render ran
    return set(ast.literal_eval(res.stdout))


def test_render_builds_only_the_models_it_uses(tmp_path: Path) -> None:
    # building a pydantic model's schema costs about as much as importing a small library: a model
    # render neither validates nor writes (the stack outputs, which agents.py imports for a name)
    # is built when first used (defer_build), not at import
    assert _render_probe(_BUILT_MODELS, tmp_path / "out") == RENDER_MODELS


# the dataclasses a render defines: each needs what a NamedTuple lacks. On Python 3.11 a frozen
# dataclass compiles each generated method (__init__, __repr__, __eq__, __hash__, __setattr__,
# __delattr__) when its module is imported, so a plain immutable record a render builds is a
# typing.NamedTuple instead (24 of them: a render's instructions, the benchmark's --instructions,
# in docs/performance.md)
RENDER_DATACLASSES = {
    "clusterforge.aws.ec2topology.Topology",  # mutable: filled as reports come in
    "clusterforge.cli._Rows",  # mutable: rows added as they are made
    "clusterforge.render.dashboards._Board",  # mutable: panels placed as they are made
    "clusterforge.render.dashboards._Grid",  # mutable: the next free cell
    "clusterforge.render.model.ClusterModel",  # a mutable notes list (default_factory)
    "clusterforge.render.model.GpuSet",  # a field named count (a tuple's method)
    "clusterforge.render.model.NodeSet",  # cached_property, and fields left out of ==
    "clusterforge.render.model.TopologyModel",  # a dict field left out of ==
    "clusterforge.resolve.ResolvedCluster",  # cached_property
    "clusterforge.resolve.ResolvedGroup",  # cached_property
}

_DATACLASSES = """
import contextlib, dataclasses, io, sys
sys.argv[0] = "clusterforge"
made = []
real = dataclasses._process_class
def record(cls, *args, **kwargs):
    made.append(f"{cls.__module__}.{cls.__qualname__}")
    return real(cls, *args, **kwargs)
dataclasses._process_class = record
from clusterforge.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    main()
print(sorted(m for m in made if m.startswith("clusterforge.")))
"""


def test_render_defines_only_the_dataclasses_it_needs(tmp_path: Path) -> None:
    assert _render_probe(_DATACLASSES, tmp_path / "out") == RENDER_DATACLASSES


def _imported(argv: list[str]) -> set[str]:
    """The modules a ``clusterforge`` process running ``argv`` imports (``python -X importtime``)."""
    res = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "from clusterforge.cli import main; main()", *argv],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    return {line.rsplit("|", 1)[1].strip() for line in res.stderr.splitlines() if line.startswith("import time:")}


def test_render_in_a_pipe_imports_no_rich(tmp_path: Path) -> None:
    # a pipe or a file gets the file list as tab-separated lines (tests/test_cli_output.py): rich's
    # console and table are for a terminal, about a tenth of a render's instructions (the benchmark's
    # --instructions)
    imported = _imported(["render", str(EXAMPLES / "p5-training.yaml"), "--out", str(tmp_path / "out")])
    assert "clusterforge.render.writer" in imported  # the listing is read right
    assert sorted(m for m in imported if m.split(".")[0] == "rich") == []


def test_plan_json_imports_no_rich() -> None:
    # rich prints the plan for people; the JSON is json.dumps of plain data
    as_json = _imported(["plan", str(EXAMPLES / "p5-training.yaml"), "--json"])
    assert "clusterforge.plan.text" in as_json  # the listing is read right
    assert sorted(m for m in as_json if m.split(".")[0] == "rich") == []
    assert "rich.tree" in _imported(["plan", str(EXAMPLES / "p5-training.yaml")])


_COLLECTOR = """
import atexit, gc, sys
sys.argv[0] = "clusterforge"
# registered before main's own exit hook, so it runs after it (atexit runs last-in, first-out)
atexit.register(lambda: print(gc.get_threshold()[0], gc.get_freeze_count() > 0))
from clusterforge.cli import main
main()
"""


def test_a_command_tunes_the_collector_and_freezes_the_heap_at_exit() -> None:
    # cli._tune_collector: fewer collections while the verb runs, none over its heap at exit
    res = subprocess.run([sys.executable, "-c", _COLLECTOR, "schema"], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.splitlines()[-1] == f"{cli.GC_YOUNG} True"
