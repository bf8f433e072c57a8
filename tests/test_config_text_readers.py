"""Nothing outside the renderer and the check's private-copy rewrite reads rendered config text
(issue 11: "grep finds no code outside the renderer and the check's private-copy rewrite that
reads rendered config text"). Consumers take what they need from the typed manifest.

The scan is over the syntax tree of every module in clusterforge/, and flags two things:

* a function that reads a file (``read_text``/``read_bytes``/``open``/``readlines``) and names a
  rendered config file (``slurm.conf``, ``gres.conf``, ...) in the same function, directly or
  through a module-level constant;
* a regular expression or ``startswith`` test over config syntax: a pattern naming a key that
  only rendered config lines carry (``NodeName``, ``SlurmctldHost``, ``SwitchName``, ...).

The detector is itself tested on snippets of the code it replaced, so it cannot pass vacuously.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "clusterforge"

RENDERED = {
    "slurm.conf", "gres.conf", "topology.conf", "topology.yaml", "cgroup.conf", "slurmdbd.conf",
    "acct_gather.conf", "nccl.conf",
}
CONFIG_KEYS = (
    "NodeName", "PartitionName", "SwitchName", "BlockName", "SlurmctldHost", "ControlMachine", "ControlAddr",
    "GresTypes", "TopologyPlugin", "SlurmUser", "StateSaveLocation", "SlurmdSpoolDir", "AccountingStorage",
    "StorageUser", "StorageHost", "StorageLoc", "Include",
)
READS = {"read_text", "read_bytes", "readlines", "open"}
PATTERN_CALLS = {"compile", "match", "fullmatch", "search", "findall", "finditer", "sub", "split", "startswith"}

# Reading rendered text is their job.
ALLOWED = {
    "clusterforge/render/": "the renderer writes (and reads back its own) config text",
    "clusterforge/check/copies.py": "the check's private copy rewrites paths/ports/munge socket/includes",
}
# Patterns over a tool's or daemon's OUTPUT that shares the config syntax: (path, pattern) -> why.
# By exact pattern, so a new pattern in the same module is still flagged.
OUTPUT_PARSERS = {
    ("clusterforge/catalog/facts/slurmd_c.py", "NodeName="): "parses `slurmd -C` output (a fact), not a rendered file",
    ("clusterforge/check/compare.py", "SlurmctldHost["): "parses `scontrol show config` (the daemon's view)",
}
# Known, owned elsewhere; every entry must still be needed (see the last test), so it goes as
# soon as its owner lands the fix.
PENDING = {
}


def _strings(node: ast.AST, consts: dict[str, str]) -> list[str]:
    out: list[str] = []
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            out.append(n.value)
        elif isinstance(n, ast.Name) and n.id in consts:
            out.append(consts[n.id])
    return out


def _docstrings(tree: ast.AST) -> set[int]:
    ids: set[int] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and n.body:
            first = n.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def violations(source: str, where: str = "<src>") -> list[str]:
    tree = ast.parse(source)
    docs = _docstrings(tree)
    consts = {
        t.id: n.value.value
        for n in tree.body
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    found: list[str] = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        reads = any(
            isinstance(c, ast.Call)
            and (
                (isinstance(c.func, ast.Attribute) and c.func.attr in READS)
                or (isinstance(c.func, ast.Name) and c.func.id == "open")
            )
            for c in ast.walk(fn)
        )
        named = sorted(
            {s for s in _strings(fn, consts) if Path(s.strip()).name in RENDERED and id(s) not in docs}
        )
        if reads and named:
            found.append(f"{where}:{fn.lineno}: {fn.name}() reads a file and names {', '.join(named)}")
    for c in ast.walk(tree):
        if not (isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr in PATTERN_CALLS):
            continue
        args = [a for a in c.args[:1] if id(getattr(a, "value", None)) not in docs]
        if c.func.attr == "startswith" or (isinstance(c.func.value, ast.Name) and c.func.value.id == "re"):
            for s in (s for a in args for s in _strings(a, consts)):
                keys = [k for k in CONFIG_KEYS if k.lower() in s.lower()]
                if keys and (where, s) not in OUTPUT_PARSERS:
                    found.append(f"{where}:{c.lineno}: pattern {s!r} matches config syntax ({', '.join(keys)})")
    for c in ast.walk(tree):  # key == "nodename": a hand-written parser of config lines
        if isinstance(c, ast.Compare):
            for s in (x.value for x in [c.left, *c.comparators] if isinstance(x, ast.Constant)):
                if isinstance(s, str) and s.lower() in {k.lower() for k in CONFIG_KEYS}:
                    found.append(f"{where}:{c.lineno}: compares with config key {s!r}")
    return found


def _scan() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if any(rel.startswith(a) for a in ALLOWED):
            continue
        found = violations(path.read_text(encoding="utf-8"), rel)
        if found:
            out[rel] = found
    return out


def test_no_code_outside_the_renderer_and_the_private_copy_reads_rendered_config_text() -> None:
    offenders = {rel: v for rel, v in _scan().items() if rel not in PENDING}
    assert offenders == {}, "read the typed manifest (clusterforge.render.manifest) instead:\n" + "\n".join(
        ln for v in offenders.values() for ln in v
    )


def test_every_pending_exemption_is_still_needed() -> None:
    scanned = _scan()
    stale = [rel for rel in PENDING if rel not in scanned]
    assert stale == [], f"no longer reads config text: drop {stale} from PENDING"


# What clusterforge/check.py did before it read the manifest (abridged from its history).
OLD_CHECK = '''
import re
_LINE_KEY = re.compile(r"^\\s*([A-Za-z][A-Za-z0-9_]*)\\s*=\\s*(.*?)\\s*$")
CONF = "slurm/slurm.conf"

def _controllers(text):
    """SlurmctldHost entries, e.g. slurm.conf."""
    return re.findall(r"^SlurmctldHost=(\\S+)", text, re.M)

def _conf_node_names(text):
    return [re.match(r"^\\s*NodeName=(\\S+)", ln, re.IGNORECASE) for ln in text.splitlines()]

def load(src):
    return (src / "slurm" / "slurm.conf").read_text()

def load_via_constant(src):
    return (src / CONF).read_text()

def gres(line):
    return line.startswith("NodeName=")

def parse(line):
    return line.split("=", 1)[0].lower() == "partitionname"
'''


def test_the_detector_flags_the_code_it_replaced() -> None:
    found = violations(OLD_CHECK)
    lines = sorted(int(f.split(": ", 1)[0].split(":")[1]) for f in found)
    assert lines == [
        8,  # re.findall(r"^SlurmctldHost=…")
        11,  # re.match(r"^\\s*NodeName=…")
        13,  # load(): (src / "slurm" / "slurm.conf").read_text()
        16,  # load_via_constant(): (src / CONF).read_text()
        20,  # line.startswith("NodeName=")
        23,  # … == "partitionname"
    ]
    found.sort(key=lambda f: int(f.split(": ", 1)[0].split(":")[1]))
    assert "load() reads a file and names slurm.conf" in found[2]
    assert "SlurmctldHost" in found[0] and "NodeName" in found[1]


@pytest.mark.parametrize(
    "ok",
    [
        'def f(p):\n    """Reads slurm.conf (docstring only)."""\n    return p.read_text()\n',
        'import re\nKV = re.compile(r"(?:^|\\s)([A-Za-z]+)=")\n',  # scontrol -o output, no config key
        'def f(d):\n    return (d / "manifest.json").read_text()\n',
        'def f(d):\n    return (d / "slurm" / "slurm.conf").is_file()\n',
    ],
)
def test_the_detector_leaves_other_code_alone(ok: str) -> None:
    assert violations(ok) == []
