"""A fuzz for every verb: malformed specs, facts folders and options through the real CLI entry.

Each of ``validate``, ``render``, ``plan``, ``inventory``, ``diff`` and ``check`` gets seeded,
generated malformed inputs of three kinds (``check`` reads a render, not a spec: its "spec" is the
render's ``manifest.json`` and its "facts" the render folder around it). Every case runs
``clusterforge.cli.main`` in-process (an escaping exception fails the case with its stack) inside a
sandbox: the working directory, ``HOME`` and ``TMPDIR`` are temporary folders, and every input is a
copy in that sandbox. Each case asserts

* exit code 1 or 2, and no ``Traceback`` in the output;
* the output names the offending field, path or option (each case says which names qualify:
  facts the generator knows, such as the key it mutated or the file it broke);
* the output carries a fix (see ``FIX``: a ``fix:``/``Fix`` line, or an imperative clause such as
  "...; use one of ..." after the reason, or click's ``Try '... --help'``);
* nothing changed anywhere in the sandbox, ``--out`` included (every case is a failure, and a
  failing verb writes nothing), checked by a snapshot of names, types, sizes and mtimes.

Generation is seeded per verb and kind (``random.Random("<verb>/<kind>")``), so the counts are
fixed; ``COUNTS`` below is the table the README quotes, and ``test_counts_are_the_documented_ones``
keeps it honest. ``python3 -m tests.test_cli_fuzz_verbs`` prints it::

    verb        spec  facts  options  total
    validate      70     24       14    108
    render        60     24       23    107
    plan          40     24        9     73
    inventory     50     24       21     95
    diff          40     24       32     96
    check         26     13       15     54
    total        286    133      114    533

(diff writes its report even when it exits 2, as documented: the report files are the one
place a diff case may write.)

Notes on what "malformed" can mean here: the tests run as root, so a mode-000 file or a read-only
folder is readable and writable to them; unreadable fact files are dangling symlinks, symlink loops
and folders under a fact file's name, and read-only targets are /proc and /sys. ``check`` stops at
the manifest for almost every case (before any daemon); a few render-folder cases (a broken
slurm.conf) reach the host's real slurmctld.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml

from .conftest import EXAMPLES, ROOT
from .test_spec import run_cli

VERBS = ("validate", "render", "plan", "inventory", "diff", "check")
KINDS = ("spec", "facts", "options")

# ---------------------------------------------------------------------------------- assertions

# A fix is an instruction: a "fix:"/"Fix" line (findings, schema errors), click's "Try ... --help",
# or an imperative clause after the reason ("...; use one of ...", "... . Check indentation ...").
FIX = re.compile(
    r"\bfix\b|\bTry '|"
    r"(?:[;:.,—(]|\bor|\bthen)\s+(?:use|give|pass|run|choose|drop|add|remove|write|check|install|compare|"
    r"set|rename|put|delete|create|make|point|keep|save|render|correct|re-?run|collect|split|list)\b|"
    r"^\s*run `",  # a line of its own: "run `pulumi stack output --json > stack.json` ..."
    re.IGNORECASE | re.MULTILINE,
)


def _snapshot(root: Path) -> dict[str, tuple[Any, ...]]:
    """Every entry under ``root`` (symlinks not followed: the fuzz makes loops on purpose)."""
    snap: dict[str, tuple[Any, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st_ = os.lstat(p)
            link = os.readlink(p) if stat.S_ISLNK(st_.st_mode) else None
            kind = stat.S_IFMT(st_.st_mode)
            # a folder's own mtime moves when a temporary file comes and goes: its entries tell
            when = None if kind == stat.S_IFDIR else (st_.st_size, st_.st_mtime_ns)
            snap[os.path.relpath(p, root)] = (kind, when, link)
    return snap


@dataclass
class Sandbox:
    """One case's world: ``cwd``, ``home``, ``tmp`` and the inputs in ``inp`` (examples copied)."""

    root: Path

    def __post_init__(self) -> None:
        # o+x down to TMPDIR: check's private munged refuses a socket folder others cannot traverse
        self.root.chmod(0o755)
        for d in ("cwd", "home", "tmp", "in"):
            (self.root / d).mkdir(mode=0o755)
        for spec in EXAMPLES.glob("*.yaml"):
            shutil.copy(spec, self.inp)
        shutil.copytree(EXAMPLES / "facts", self.inp / "facts")
        self.workdir = self.cwd

    @property
    def cwd(self) -> Path:
        return self.root / "cwd"

    @property
    def inp(self) -> Path:
        return self.root / "in"

    def example(self, name: str) -> Path:
        return self.inp / name

    def write_spec(self, data: Any, name: str = "spec.yaml") -> Path:
        p = self.inp / name
        p.write_text(yaml.safe_dump(data, width=10_000, allow_unicode=False))
        return p

    def env(self) -> dict[str, str]:
        return {
            "HOME": str(self.root / "home"),
            "TMPDIR": str(self.root / "tmp"),
            # check: no root filesystem cache to build into or read from (a family not installed stops)
            "CLUSTERFORGE_CACHE": str(self.root / "home" / "no-cache"),
            "GIT_CONFIG_NOSYSTEM": "1",
        }


Build = Callable[[Sandbox], tuple[list[str], tuple[str, ...]]]


@dataclass(frozen=True)
class Case:
    verb: str
    kind: str
    name: str
    build: Build  # makes the inputs in the sandbox; returns argv and the names one of which must show


def run_case(case: Case, base: Path) -> str | None:
    """Run one case; None when it holds, else what went wrong (with the output)."""
    sb = Sandbox(Path(tempfile.mkdtemp(prefix=f"{case.verb}-", dir=base)))
    try:
        argv, names = case.build(sb)
        before = _snapshot(sb.root)
        old_cwd, old_tempdir = os.getcwd(), tempfile.tempdir
        os.chdir(sb.workdir)
        tempfile.tempdir = None  # gettempdir() caches; make it read TMPDIR again
        try:
            with mock.patch.dict(os.environ, sb.env()):
                code, out = run_cli(*argv)
        except BaseException:
            return f"raised:\n{traceback.format_exc()}"
        finally:
            os.chdir(old_cwd)
            tempfile.tempdir = old_tempdir
        after = _snapshot(sb.root)
        if case.verb == "diff":  # diff writes its report even on exit 2 ("the report says so at the top")
            for opt in ("--output", "--json-output"):
                if opt in argv and argv.index(opt) + 1 < len(argv):
                    report = os.path.relpath(argv[argv.index(opt) + 1], sb.root)
                    before.pop(report, None)
                    after.pop(report, None)
        return _judge(code, out, names, before, after)
    finally:
        shutil.rmtree(sb.root, ignore_errors=True)


def _judge(code: int, out: str, names: tuple[str, ...], before: dict[str, Any], after: dict[str, Any]) -> str | None:
    problems = []
    if code not in (1, 2):
        problems.append(f"exit {code}, want 1 or 2")
    if "Traceback" in out:
        problems.append("a traceback")
    if names and not any(n in out for n in names):
        problems.append(f"names none of {names!r}")
    if not FIX.search(out):
        problems.append("no fix hint")
    if before != after:
        added = sorted(set(after) - set(before))
        gone = sorted(set(before) - set(after))
        changed = sorted(k for k in set(before) & set(after) if before[k] != after[k])
        problems.append(f"wrote: added {added[:5]} removed {gone[:5]} changed {changed[:5]}")
    if not problems:
        return None
    return "; ".join(problems) + "\n--- output ---\n" + out[-700:]


def _run_all(cases: list[Case], base: Path) -> None:
    failures = []
    for case in cases:
        bad = run_case(case, base)
        if bad is not None:
            failures.append(f"[{case.verb}/{case.kind}] {case.name}: {bad}")
    assert not failures, f"{len(failures)} of {len(cases)} failed:\n\n" + "\n\n".join(failures[:60])


# ---------------------------------------------------------------------------------- spec cases

ENUM_KEYS = {"role", "type", "plugin", "purpose", "throughput_mode", "node_state", "vendor", "os",
             "version", "market", "throughput_per_tib", "return_to_service"}
COUNT_KEYS = {"count", "capacity_gib", "max_count", "min_count", "gpus", "size"}
# paths on the nodes (an NFS export is the server's own path: any absolute path may be right there)
PATH_KEYS = {"mount", "state_save_location", "local_nvme_raid0", "program"}
HOSTLIST_KEYS = {"hosts", "addresses"}
SYSTEM_PATHS = ["/", "/etc", "/proc", "/dev/zero", "/etc/shadow", "/sys/kernel", "/dev/null"]
CONTROL = ["\n", "\x00", "\x1b[31m", "\r", "\x07", "\u2028", "\t"]
BAD_HOSTLISTS = ["n-[9-1]", "n-[1-", "n-[a-c]", "n-[001-0999999999]", "n-[[1-2]]", ",,", "n-[1-2]x[", "-[]",
                 "n-[1-99999999999999999999]"]
YAML_BREAKS = ["\t", "key: [unclosed\n", "{{\n", "a: 'unterminated\n", "@at: 1\n", "- x\n y: [\n", "&a *b\n",
               "%YAML 9.9\n---\n", ": :\n"]
NON_UTF8 = [b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xfe\xfe\xfe", b"\x80abc"]


def _walk(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    out: list[tuple[tuple[Any, ...], Any]] = [(prefix, node)]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _walk(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _walk(v, (*prefix, i))
    return out


def _key(path: tuple[Any, ...]) -> str:
    """The last named field on ``path`` (an index names its list)."""
    return next(str(p) for p in reversed(path) if isinstance(p, str))


def _set(data: Any, path: tuple[Any, ...], value: Any) -> None:
    for p in path[:-1]:
        data = data[p]
    data[path[-1]] = value


def _field_mutation(rng: random.Random, data: dict[str, Any]) -> tuple[str, str] | None:
    """Break one field of ``data`` in place so that no valid spec can result; (what, field name)."""
    nodes = _walk(data)
    leaves = [(p, v) for p, v in nodes if p and not isinstance(v, (dict, list)) and v is not None]
    kind = rng.choice(["type", "unknown", "enum", "range", "huge", "syspath", "control", "hostlist"])
    if kind == "type":
        path, _ = rng.choice(leaves)
        _set(data, path, {"zz_not_a_scalar": [1, 2]})
        return f"type {path}", _key(path)
    if kind == "unknown":
        path, _ = rng.choice([(p, v) for p, v in nodes if isinstance(v, dict)])
        key = "zz_" + rng.choice(["bogus", "nodes", "slurm_", "typo"])
        _set(data, (*path, key), 1) if path else data.__setitem__(key, 1)
        return f"unknown {(*path, key)}", key
    candidates: list[tuple[tuple[Any, ...], Any]] = []
    value: Any
    if kind == "enum":
        candidates = [(p, v) for p, v in leaves if _key(p) in ENUM_KEYS and isinstance(p[-1], str)]
        value = rng.choice(["zz-not-a-choice", "", "COMPUTE", 99])
    elif kind == "range":
        candidates = [(p, v) for p, v in leaves if _key(p) in COUNT_KEYS and isinstance(v, int)]
        value = rng.choice([-1, -(10**6), 0.5, "-3"])
    elif kind == "huge":
        candidates = [(p, v) for p, v in leaves if _key(p) in COUNT_KEYS | HOSTLIST_KEYS]
        value = rng.choice([10**9, 2**63, 10**40, 1e308, float("inf"), float("nan")])
    elif kind == "syspath":
        candidates = [(p, v) for p, v in leaves if _key(p) in PATH_KEYS]
        candidates += [(("facts_dir",), None), (("topology", "ec2_instance_topology"), None)]
        value = rng.choice(SYSTEM_PATHS)
    elif kind == "control":
        candidates = [(p, v) for p, v in leaves if isinstance(v, str)]
        value = None
    else:
        candidates = [(p, v) for p, v in leaves if _key(p) in HOSTLIST_KEYS and isinstance(v, str)]
        value = rng.choice(BAD_HOSTLISTS)
    if not candidates:
        return None
    path, old = rng.choice(candidates)
    if kind == "control":
        c = rng.choice(CONTROL)
        value = rng.choice([f"{old}{c}{old}", f"{c}{old}", f"{old}{c}"])
    if path == ("topology", "ec2_instance_topology"):
        data.setdefault("topology", {})
    if kind == "syspath" and path[-1] == "ec2_instance_topology" and not any(
        g.get("cloud") for g in data.get("node_groups", [])
    ):
        path = ("facts_dir",)
    _set(data, path, value)
    return f"{kind} {path} = {value!r}", _key(path)


def spec_case_builder(rng: random.Random, examples: list[str]) -> tuple[str, Callable[[Sandbox], tuple[Path, tuple[str, ...]]]]:
    """One malformed spec: (case name, a function writing it into a sandbox -> its path, names)."""
    example = rng.choice(examples)
    data = yaml.safe_load((EXAMPLES / example).read_text())
    whole = rng.random()
    if whole < 0.12:  # broken YAML
        text = yaml.safe_dump(data, width=10_000)
        lines = text.splitlines(keepends=True)
        at = rng.randrange(1, len(lines))
        brk = rng.choice(YAML_BREAKS)
        content = "".join(lines[:at]).encode() + (brk if brk != "\t" else "\t" + lines[at]).encode() + "".join(
            lines[at + (brk == "\t"):]
        ).encode()
        return f"{example}: broken YAML {brk!r} at line {at + 1}", _bytes_writer(content)
    if whole < 0.2:  # non-UTF-8 bytes
        text = yaml.safe_dump(data, width=10_000).encode()
        at = rng.randrange(len(text))
        bad = rng.choice(NON_UTF8)
        return f"{example}: bytes {bad!r} at {at}", _bytes_writer(text[:at] + bad + text[at:])
    mutations = []
    for _ in range(rng.choice([1, 1, 2])):
        m = _field_mutation(rng, data)
        if m is not None:
            mutations.append(m)
    if not mutations:
        return spec_case_builder(rng, examples)
    names = tuple(n for _, n in mutations)

    def write(sb: Sandbox) -> tuple[Path, tuple[str, ...]]:
        return sb.write_spec(data), names

    return f"{example}: " + ", ".join(w for w, _ in mutations), write


def _bytes_writer(content: bytes) -> Callable[[Sandbox], tuple[Path, tuple[str, ...]]]:
    def write(sb: Sandbox) -> tuple[Path, tuple[str, ...]]:
        p = sb.inp / "spec.yaml"
        p.write_bytes(content)
        return p, (str(p),)

    return write


def _whole_file_cases() -> list[tuple[str, Callable[[Sandbox], tuple[Path, tuple[str, ...]]]]]:
    def empty(sb: Sandbox) -> tuple[Path, tuple[str, ...]]:
        p = sb.inp / "empty.yaml"
        p.write_bytes(b"")
        return p, (str(p),)

    def folder(sb: Sandbox) -> tuple[Path, tuple[str, ...]]:
        p = sb.inp / "a-folder.yaml"
        p.mkdir()
        return p, (str(p),)

    def missing(sb: Sandbox) -> tuple[Path, tuple[str, ...]]:
        p = sb.inp / "missing.yaml"
        return p, (str(p),)

    def loop(sb: Sandbox) -> tuple[Path, tuple[str, ...]]:
        p = sb.inp / "loop.yaml"
        p.symlink_to(p)
        return p, (str(p),)

    return [("empty file", empty), ("a folder", folder), ("missing file", missing), ("symlink loop", loop)]


# every verb that reads a spec: how to run it on spec file ``p`` in sandbox ``sb``
SPEC_ARGV: dict[str, Callable[[Sandbox, Path], list[str]]] = {
    "validate": lambda sb, p: ["validate", str(p)],
    "render": lambda sb, p: ["render", str(p), "--out", str(sb.cwd / "out")],
    "plan": lambda sb, p: ["plan", str(p)],
    "inventory": lambda sb, p: ["inventory", str(p), "--out", str(sb.cwd / "inv")],
    "diff": lambda sb, p: ["diff", "--base-spec", str(sb.example("p5-training.yaml")), "--head-spec", str(p),
                           "--output", str(sb.cwd / "report.txt")],
}
SPEC_COUNTS = {"validate": 66, "render": 56, "plan": 36, "inventory": 46, "diff": 36}
ALL_EXAMPLES = sorted(p.name for p in EXAMPLES.glob("*.yaml"))
# plan: the specs with cloud node groups (an on-prem spec stops at "nothing for Pulumi to create")
SPEC_EXAMPLES = {"plan": ["p5-training.yaml", "hybrid.yaml", "local-aws.yaml"]}


def spec_cases(verb: str) -> list[Case]:
    rng = random.Random(f"{verb}/spec")
    built = [spec_case_builder(rng, SPEC_EXAMPLES.get(verb, ALL_EXAMPLES)) for _ in range(SPEC_COUNTS[verb])]
    built += _whole_file_cases()
    cases = []
    for name, write in built:
        def build(sb: Sandbox, write: Any = write) -> tuple[list[str], tuple[str, ...]]:
            p, names = write(sb)
            return SPEC_ARGV[verb](sb, p), names

        cases.append(Case(verb, "spec", name, build))
    return cases


# ---------------------------------------------------------------------------------- facts cases

FACT_FILES = ["slurmd-C.txt", "lscpu.txt", "rocm-smi-topo.txt", "ibstat.txt"]


def _garbage(rng: random.Random) -> bytes:
    return rng.choice([
        bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))),
        "".join(rng.choice("abc:=[]{}- \n\t0123456789") for _ in range(rng.randrange(1, 300))).encode(),
        b'{"CPUs": 384, "json": "not what the tool prints"}\n',
        b"\x00" * 64,
    ])


def _wrong_types(rng: random.Random, fname: str, text: str) -> str:
    """The tool's own output with one value of the wrong type or range."""
    if fname == "slurmd-C.txt":
        field = rng.choice(["CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore", "RealMemory"])
        bad = rng.choice(["abc", "-4", "9" * 40, "", "1.5", "0"])
        return re.sub(rf"\b{field}=\S*", f"{field}={bad}", text)
    if fname == "lscpu.txt":
        field = rng.choice(["CPU\\(s\\)", "Socket\\(s\\)", "Core\\(s\\) per socket", "Thread\\(s\\) per core"])
        return re.sub(rf"^({field}:\s*)\S+", lambda m: m.group(1) + rng.choice(["many", "-1", "9" * 40, "0"]),
                      text, count=1, flags=re.M)
    if fname == "rocm-smi-topo.txt":
        return re.sub(r"\b(\d+)\b", lambda m: rng.choice(["x", "-1", m.group(1)]), text)
    return text.replace("Number of ports: 1", f"Number of ports: {rng.choice(['many', '-1', ''])}")


FACTS_MUTATIONS = ["empty-host", "garbage", "wrong-types", "empty-file", "dangling-link", "link-loop",
                   "folder-as-file", "host-loop", "wrong-host", "both-vendors", "facts-is-a-file", "missing"]


def facts_cases(verb: str, count: int = 24) -> list[Case]:
    rng = random.Random(f"{verb}/facts")
    cases = []
    for i in range(count):
        what = FACTS_MUTATIONS[i % len(FACTS_MUTATIONS)]
        host = rng.choice(["mi-01", "mi-02", "mi-03", "mi-04"])
        fname = rng.choice(FACT_FILES)
        garbage = _garbage(rng)
        sub = random.Random(rng.random())

        def build(sb: Sandbox, what: str = what, host: str = host, fname: str = fname, garbage: bytes = garbage,
                  sub: random.Random = sub) -> tuple[list[str], tuple[str, ...]]:
            facts = sb.inp / "facts" / "mi300x"
            f = facts / host / fname
            names: tuple[str, ...] = (str(f),)
            if what == "empty-host":
                (facts / "mi-09").mkdir()
                names = (str(facts / "mi-09"),)
            elif what == "garbage":
                f.write_bytes(garbage)
            elif what == "wrong-types":
                f.write_text(_wrong_types(sub, fname, f.read_text()))
            elif what == "empty-file":
                f.write_bytes(b"")
            elif what == "dangling-link":
                f.unlink()
                f.symlink_to(facts / "nowhere")
            elif what == "link-loop":
                f.unlink()
                f.symlink_to(f)
            elif what == "folder-as-file":
                f.unlink()
                f.mkdir()
            elif what == "host-loop":
                shutil.rmtree(facts / host)
                (facts / host).symlink_to(facts)
                names = (str(facts / host),)
            elif what == "wrong-host":
                f = facts / host / "slurmd-C.txt"
                f.write_text(f.read_text().replace(f"NodeName={host}", "NodeName=mi-99"))
                names = (str(f),)
            elif what == "both-vendors":
                shutil.copy(ROOT / "tests" / "fixtures" / "facts" / "dgx-001" / "nvidia-smi-topo.txt", facts / host)
                names = (str(facts / host),)
            elif what == "facts-is-a-file":
                facts = sb.inp / "facts.txt"
                facts.write_text("mi-01\n")
                names = (str(facts),)
            elif what == "missing":
                facts = sb.inp / "no-such-facts"
                names = (str(facts),)
            return _facts_argv(verb, sb, facts), names

        cases.append(Case(verb, "facts", f"{what} {host}/{fname}", build))
    return cases


def _facts_argv(verb: str, sb: Sandbox, facts: Path) -> list[str]:
    mi = sb.example("amd-mi300x.yaml")
    if verb == "validate":
        return ["validate", str(mi), "--facts", str(facts)]
    if verb == "render":
        return ["render", str(mi), "--out", str(sb.cwd / "out"), "--facts", str(facts)]
    if verb == "plan":  # a spec Pulumi has something to create for: the facts are what is wrong
        return ["plan", str(sb.example("p5-training.yaml")), "--facts", str(facts)]
    if verb == "inventory":
        return ["inventory", str(mi), "--out", str(sb.cwd / "inv"), "--facts", str(facts)]
    return ["diff", "--base-spec", str(mi), "--head-spec", str(mi), "--facts", str(facts), "--format", "json",
            "--output", str(sb.cwd / "report.json")]


# ---------------------------------------------------------------------------------- option cases


def _opt(verb: str, name: str, argv: Callable[[Sandbox], list[str]], *names: str,
         names_fn: Callable[[Sandbox], tuple[str, ...]] | None = None) -> Case:
    def build(sb: Sandbox) -> tuple[list[str], tuple[str, ...]]:
        args = argv(sb)
        return args, names_fn(sb) if names_fn else names

    return Case(verb, "options", name, build)


def _a_file(sb: Sandbox) -> Path:
    p = sb.cwd / "a-file"
    p.write_text("not a folder\n")
    return p


def _full_folder(sb: Sandbox) -> Path:
    p = sb.cwd / "mine"
    p.mkdir()
    (p / "notes.txt").write_text("the user's own file\n")
    return p


def _out_options(verb: str, spec: str, opt: str = "--out") -> list[Case]:
    """The bad places to write, shared by render and inventory."""
    def run(target: Callable[[Sandbox], Path]) -> Callable[[Sandbox], list[str]]:
        return lambda sb: [verb, str(sb.example(spec)), opt, str(target(sb))]

    return [
        _opt(verb, f"{opt} a file", run(_a_file), opt),
        _opt(verb, f"{opt} under a file", run(lambda sb: _a_file(sb) / "sub"), opt),
        _opt(verb, f"{opt} in /proc (read-only)", run(lambda sb: Path("/proc/cf-fuzz-out")), opt),
        _opt(verb, f"{opt} under /sys (read-only)", run(lambda sb: Path("/sys/cf-fuzz/out")), opt),
        _opt(verb, f"{opt} the spec file itself", run(lambda sb: sb.example(spec)), opt),
        _opt(verb, f"{opt} the working directory (empty string)", lambda sb: [verb, str(sb.example(spec)), opt, ""],
             opt),
        *(
            # render replaces its whole folder; inventory writes its files into a folder that may hold
            # the site's own (host_vars/, ...) but never replaces one it did not write
            [_opt(verb, f"{opt} a folder of the user's own files", run(_full_folder), opt),
             _opt(verb, f"{opt} the folder holding the spec", run(lambda sb: sb.inp), opt)]
            if verb == "render" else
            [_opt(verb, f"{opt} a folder with a hand-written hosts.yml", run(_hand_written_inventory), opt),
             _opt(verb, f"{opt} a folder with a hand-written group_vars file",
                  run(lambda sb: _hand_written_inventory(sb, "group_vars/all/clusterforge.yml")), opt)]
        ),
    ]


def _hand_written_inventory(sb: Sandbox, rel: str = "hosts.yml") -> Path:
    p = sb.cwd / "site-inventory"
    (p / rel).parent.mkdir(parents=True)
    (p / rel).write_text("all:\n  hosts: {login-01: {}}\n")
    return p


def _common_options(verb: str, argv0: Callable[[Sandbox], list[str]]) -> list[Case]:
    return [
        _opt(verb, "unknown flag", lambda sb: [*argv0(sb), "--bogus"], "--bogus"),
        _opt(verb, "unknown short flag", lambda sb: [*argv0(sb), "-z"], "-z"),
        _opt(verb, "option without its value", lambda sb: [*argv0(sb), "--facts"], "--facts"),
        _opt(verb, "--facts a file", lambda sb: [*argv0(sb), "--facts", str(_a_file(sb))],
             names_fn=lambda sb: (str(sb.cwd / "a-file"),)),
        _opt(verb, "--facts the working directory (empty string)", lambda sb: [*argv0(sb), "--facts", ""], "facts"),
    ]


def option_cases(verb: str) -> list[Case]:
    spec = "onprem-dgx.yaml"
    if verb == "validate":
        base: Callable[[Sandbox], list[str]] = lambda sb: ["validate", str(sb.example(spec))]  # noqa: E731
        return [
            *_common_options(verb, base),
            _opt(verb, "--fail-on bogus", lambda sb: [*base(sb), "--fail-on", "fatal"], "--fail-on"),
            _opt(verb, "--fail-on empty", lambda sb: [*base(sb), "--fail-on", ""], "--fail-on"),
            _opt(verb, "--fail-on with a newline", lambda sb: [*base(sb), "--fail-on", "error\n"], "--fail-on"),
            _opt(verb, "--json with a value", lambda sb: [*base(sb), "--json=yes"], "--json"),
            _opt(verb, "no SPEC", lambda sb: ["validate"], "'spec'"),
            _opt(verb, "two SPECs", lambda sb: [*base(sb), str(sb.example("local.yaml"))], "local.yaml"),
            _opt(verb, "SPEC is '-'", lambda sb: ["validate", "-"], "'-'"),
            _opt(verb, "SPEC is empty", lambda sb: ["validate", ""], "folder", "''"),
            _opt(verb, "SPEC is a system file", lambda sb: ["validate", "/etc/passwd"], "/etc/passwd"),
        ]
    if verb == "render":
        base = lambda sb: ["render", str(sb.example(spec)), "--out", str(sb.cwd / "out")]  # noqa: E731
        return [
            *_common_options(verb, base),
            *_out_options(verb, spec),
            _opt(verb, "no --out", lambda sb: ["render", str(sb.example(spec))], "--out"),
            *[
                _opt(verb, f"--slurm-version {v!r}", lambda sb, v=v: [*base(sb), "--slurm-version", v], "--slurm-version")
                for v in ["99.99", "", "24.11\n", "24.11.1", "latest", "22.5", "-1"]
            ],
            _opt(verb, "--slurm-version with a too-old release for the spec",
                 lambda sb: ["render", str(sb.example("p5-training.yaml")), "--out", str(sb.cwd / "out"),
                             "--slurm-version", "21.08"], "--slurm-version"),
            _opt(verb, "--out twice, the second a file", lambda sb: [*base(sb), "--out", str(_a_file(sb))], "--out"),
        ]
    if verb == "plan":
        p5 = "p5-training.yaml"
        base = lambda sb: ["plan", str(sb.example(p5))]  # noqa: E731
        return [
            *_common_options(verb, base),
            _opt(verb, "--json with a value", lambda sb: [*base(sb), "--json=maybe"], "--json"),
            _opt(verb, "--out (plan writes nothing)", lambda sb: [*base(sb), "--out", str(sb.cwd / "o")], "--out"),
            _opt(verb, "an on-prem spec (nothing to plan)", lambda sb: ["plan", str(sb.example(spec))], "cloud"),
            _opt(verb, "--slurm-version (not a plan option)", lambda sb: [*base(sb), "--slurm-version", "24.11"],
                 "--slurm-version"),
        ]
    if verb == "inventory":
        base = lambda sb: ["inventory", str(sb.example(spec)), "--out", str(sb.cwd / "inv")]  # noqa: E731

        def so(content: bytes | None, folder: bool = False) -> Callable[[Sandbox], list[str]]:
            def argv(sb: Sandbox) -> list[str]:
                p = sb.inp / "stack.json"
                if folder:
                    p.mkdir()
                elif content is not None:
                    p.write_bytes(content)
                return ["inventory", str(sb.example("p5-training.yaml")), "--out", str(sb.cwd / "inv"),
                        "--stack-outputs", str(p)]
            return argv

        def render_sibling_is_a_file(sb: Sandbox) -> list[str]:
            (sb.cwd / "inv.render").write_text("in the way\n")
            return base(sb)

        stack_names = ("stack.json",)
        return [
            *_common_options(verb, base),
            *_out_options(verb, spec),
            _opt(verb, "--out's .render sibling is a file", render_sibling_is_a_file, "inv.render"),
            _opt(verb, "--stack-outputs missing", so(None), *stack_names),
            _opt(verb, "--stack-outputs a folder", so(None, folder=True), *stack_names),
            _opt(verb, "--stack-outputs not JSON", so(b"\xff\xfe garbage"), *stack_names),
            _opt(verb, "--stack-outputs a JSON list", so(b"[1, 2]"), *stack_names),
            _opt(verb, "--stack-outputs wrong types", so(b'{"gpu": {"asg": 5}, "vpc_id": [1]}'), *stack_names),
            _opt(verb, "--manifest-dir missing",
                 lambda sb: [*base(sb), "--manifest-dir", str(sb.cwd / "no-render")], "no-render"),
            _opt(verb, "--manifest-dir a file", lambda sb: [*base(sb), "--manifest-dir", str(_a_file(sb))], "a-file"),
        ]
    if verb == "diff":
        return diff_option_cases()
    return check_option_cases()


# diff's options and its git side: a temporary repository with one spec committed twice
def _repo(sb: Sandbox) -> Path:
    repo = sb.root / "cwd" / "repo"
    repo.mkdir()
    env = {**os.environ, **sb.env(), "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x.invalid"}

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)

    git("init", "-q", "-b", "main")
    (repo / "examples").mkdir()
    shutil.copy(EXAMPLES / "local.yaml", repo / "examples")
    git("add", "-A")
    git("commit", "-q", "-m", "base")
    text = (repo / "examples" / "local.yaml").read_text()
    (repo / "examples" / "local.yaml").write_text(text.replace("name: local", "name: [broken", 1))
    git("commit", "-q", "-am", "a broken head")
    sb.workdir = repo
    return repo


def _in_repo(argv: Callable[[Sandbox, Path], list[str]]) -> Callable[[Sandbox], list[str]]:
    return lambda sb: argv(sb, _repo(sb))


def diff_option_cases() -> list[Case]:
    v = "diff"
    two = lambda sb: ["diff", "--base-spec", str(sb.example("local.yaml")), "--head-spec",  # noqa: E731
                      str(sb.example("hybrid.yaml"))]
    cases = [
        *[_opt(v, f"--format {f!r}", lambda sb, f=f: [*two(sb), "--format", f], "--format")
          for f in ["xml", "", "JSON", "terminal\n"]],
        *[_opt(v, f"--max-chars {m!r}", lambda sb, m=m: [*two(sb), "--format", "markdown", "--max-chars", m],
               "--max-chars") for m in ["abc", "-5", "0", "1e9"]],
        _opt(v, "--output a folder", lambda sb: [*two(sb), "--output", str(sb.inp)], "--output"),
        _opt(v, "--output under a file", lambda sb: [*two(sb), "--output", str(_a_file(sb) / "r.txt")], "--output"),
        _opt(v, "--output under a missing folder", lambda sb: [*two(sb), "--output", str(sb.cwd / "no" / "r.txt")],
             "--output"),
        _opt(v, "--output in /proc", lambda sb: [*two(sb), "--output", "/proc/cf-fuzz-report"], "--output"),
        _opt(v, "--json-output a folder", lambda sb: [*two(sb), "--json-output", str(sb.inp)], "--json-output"),
        _opt(v, "--json-output under a file", lambda sb: [*two(sb), "--json-output", str(_a_file(sb) / "r.json")],
             "--json-output"),
        _opt(v, "--json-output under a missing folder",
             lambda sb: [*two(sb), "--json-output", str(sb.cwd / "no" / "r.json")], "--json-output"),
        _opt(v, "--base-spec without --head-spec", lambda sb: ["diff", "--base-spec", str(sb.example("local.yaml"))],
             "--head-spec"),
        _opt(v, "--base-spec with --base", lambda sb: [*two(sb), "--base", "main"], "--base"),
        _opt(v, "--base-spec with SPEC", lambda sb: [*two(sb), "examples/local.yaml"], "SPEC"),
        _opt(v, "--base-spec missing", lambda sb: ["diff", "--base-spec", str(sb.inp / "gone.yaml"), "--head-spec",
                                                   str(sb.example("local.yaml"))], "gone.yaml"),
        _opt(v, "unknown flag", lambda sb: [*two(sb), "--bogus"], "--bogus"),
        _opt(v, "--plan with a value", lambda sb: [*two(sb), "--plan=no"], "--plan"),
        _opt(v, "not in a git repository", lambda sb: ["diff", "--base", "main"], "git"),
        _opt(v, "--base no such revision", _in_repo(lambda sb, r: ["diff", "--base", "no-such-ref", "--no-plan"]),
             "no-such-ref"),
        _opt(v, "--head no such revision", _in_repo(lambda sb, r: ["diff", "--base", "main~1", "--head", "nope~3",
                                                                     "--no-plan"]), "nope~3"),
        _opt(v, "--base beyond the first commit", _in_repo(lambda sb, r: ["diff", "--base", "main~5", "--no-plan"]),
             "main~5"),
        _opt(v, "--base looks like a git option",
             _in_repo(lambda sb, r: ["diff", "--base=--output=/tmp/cf-fuzz-injected", "--no-plan"]), "--output="),
        _opt(v, "--base a range", _in_repo(lambda sb, r: ["diff", "--base", "main~1..main", "--no-plan"]),
             "main~1..main"),
        _opt(v, "SPEC in neither revision", _in_repo(
            lambda sb, r: ["diff", "--base", "main~1", "--head", "main", "examples/nope.yaml", "--no-plan"]),
            "examples/nope.yaml"),
        _opt(v, "SPEC outside the repository", _in_repo(
            lambda sb, r: ["diff", "--base", "main~1", "--head", "main", "/etc/passwd", "--no-plan"]), "/etc/passwd"),
        _opt(v, "SPEC climbs out of the repository", _in_repo(
            lambda sb, r: ["diff", "--base", "main~1", "--head", "main", "../../in/local.yaml", "--no-plan"]),
            "../../in/local.yaml"),
        _opt(v, "head revision's spec is broken", _in_repo(
            lambda sb, r: ["diff", "--base", "main~1", "--head", "main", "--no-plan", "--output",
                           str(sb.cwd / "report.txt")]), "examples/local.yaml"),
        _opt(v, "--facts a file in git mode", _in_repo(
            lambda sb, r: ["diff", "--base", "main~1", "--head", "main", "--facts", str(_a_file(sb))]), "a-file"),
    ]
    return cases


# check: a real render of a spec for the host's Slurm release family (so some cases reach the daemons)
def _render_into(sb: Sandbox, spec: str = "onprem-dgx.yaml") -> Path:
    from clusterforge.render import render
    from clusterforge.render.writer import write_render
    from clusterforge.resolve import resolve_file

    out = sb.inp / "render"
    write_render(render(resolve_file(EXAMPLES / spec, slurm_version=_host_release())), out)
    return out


def _host_release() -> str:
    if shutil.which("slurmctld") is None:
        return "24.11"
    v = subprocess.run(["slurmctld", "-V"], capture_output=True, text=True, timeout=10, check=False).stdout.split()
    return ".".join(v[-1].split(".")[:2]) if v else "24.11"


def check_option_cases() -> list[Case]:
    v = "check"

    def with_render(extra: list[str]) -> Callable[[Sandbox], list[str]]:
        return lambda sb: ["check", str(_render_into(sb)), *extra]

    return [
        _opt(v, "no folder", lambda sb: ["check"], "'rendered'"),
        _opt(v, "missing folder", lambda sb: ["check", str(sb.cwd / "gone")], "gone"),
        _opt(v, "a file, not a folder", lambda sb: ["check", str(sb.example("local.yaml"))], "local.yaml"),
        _opt(v, "an empty folder", lambda sb: ["check", str(sb.cwd)], "manifest.json"),
        _opt(v, "a spec's folder", lambda sb: ["check", str(sb.inp)], "manifest.json"),
        _opt(v, "the empty string", lambda sb: ["check", ""], "manifest.json"),
        *[_opt(v, f"--timeout {t!r}", with_render(["--timeout", t]), "--timeout") for t in
          ["abc", "-1", "0", "nan", "inf", "-inf", "1e400"]],
        _opt(v, "--build-rootfs with a value", with_render(["--build-rootfs=yes"]), "--build-rootfs"),
        _opt(v, "unknown flag", with_render(["--bogus"]), "--bogus"),
    ]


# ---------------------------------------------------------------------------------- check's render


def check_manifest_cases(count: int = 22) -> list[Case]:
    """check's "spec": the render's manifest.json, broken so that no manifest can result."""
    rng = random.Random("check/spec")
    cases = []
    for _ in range(count):
        how = rng.choice(["type", "unknown", "delete-required", "bytes", "truncate", "format"])
        seed = rng.random()

        def build(sb: Sandbox, how: str = how, seed: float = seed) -> tuple[list[str], tuple[str, ...]]:
            r = random.Random(seed)
            folder = _render_into(sb)
            mf = folder / "manifest.json"
            data = json.loads(mf.read_text())
            nodes = _walk(data)
            names: tuple[str, ...] = (str(mf),)
            if how == "type":
                path, _ = r.choice([(p, v) for p, v in nodes if p and isinstance(p[-1], str)
                                    and isinstance(v, (str, int)) and not isinstance(v, bool)])
                _set(data, path, {"zz": [1]})
                names = (str(path[-1]),)
            elif how == "unknown":
                path, _ = r.choice([(p, v) for p, v in nodes if isinstance(v, dict) and not
                                    (p and p[-1] in ("params", "gres_globals", "globals"))])
                (_walk_get(data, path))["zz_unknown"] = 1
                names = ("zz_unknown",)
            elif how == "delete-required":
                key = r.choice(["cluster", "slurm_version", "files", "slurm", "config", "expect"])
                del data[key]
                names = (key,)
            elif how == "format":
                data["format"] = r.choice([1, 3, "2", None])
                names = ("format",)
            text = json.dumps(data).encode()
            if how == "bytes":
                at = r.randrange(len(text))
                text = text[:at] + r.choice(NON_UTF8) + text[at:]
            elif how == "truncate":
                text = text[: r.randrange(len(text) - 1)]
            mf.write_bytes(text)
            return ["check", str(folder), "--timeout", "10"], names

        cases.append(Case("check", "spec", f"manifest {how}", build))

    def whole(name: str, make: Callable[[Path], None]) -> Case:
        def build(sb: Sandbox) -> tuple[list[str], tuple[str, ...]]:
            folder = _render_into(sb)
            make(folder / "manifest.json")
            return ["check", str(folder)], ("manifest.json",)
        return Case("check", "spec", f"manifest {name}", build)

    def to_dir(p: Path) -> None:
        p.unlink()
        p.mkdir()

    def to_loop(p: Path) -> None:
        p.unlink()
        p.symlink_to(p)

    return [*cases, whole("empty", lambda p: p.write_bytes(b"")), whole("a folder", to_dir),
            whole("a symlink loop", to_loop), whole("deleted", lambda p: p.unlink())]


def _walk_get(data: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        data = data[p]
    return data


def check_folder_cases() -> list[Case]:
    """check's "facts": the rendered files the manifest names, broken (some reach slurmctld)."""
    def case(name: str, make: Callable[[Path], None], *names: str) -> Case:
        def build(sb: Sandbox) -> tuple[list[str], tuple[str, ...]]:
            folder = _render_into(sb)
            make(folder)
            return ["check", str(folder), "--timeout", "10"], names
        return Case("check", "facts", name, build)

    def conf(text: str) -> Callable[[Path], None]:
        return lambda f: (f / "slurm" / "slurm.conf").write_text(text)

    def edit(rel: str, old: str, new: str) -> Callable[[Path], None]:
        def make(f: Path) -> None:
            p = f / rel
            t = p.read_text()
            assert old in t, (rel, old)
            p.write_text(t.replace(old, new, 1))
        return make

    def replace_with(rel: str, kind: str) -> Callable[[Path], None]:
        def make(f: Path) -> None:
            p = f / rel
            p.unlink()
            if kind == "dir":
                p.mkdir()
            elif kind == "loop":
                p.symlink_to(p)
            elif kind == "dangling":
                p.symlink_to(f / "nowhere")
        return make

    sc = "slurm.conf"
    return [
        case("slurm.conf deleted", lambda f: (f / "slurm" / sc).unlink(), sc),
        case("slurm.conf empty", conf(""), sc),
        case("slurm.conf binary", lambda f: (f / "slurm" / sc).write_bytes(bytes(range(256))), sc),
        case("slurm.conf a folder", replace_with("slurm/slurm.conf", "dir"), sc),
        case("slurm.conf a symlink loop", replace_with("slurm/slurm.conf", "loop"), sc),
        case("slurm.conf a dangling symlink", replace_with("slurm/slurm.conf", "dangling"), sc),
        case("gres.conf a folder", replace_with("slurm/gres.conf", "dir"), "gres.conf"),
        case("slurm folder is a file", lambda f: (shutil.rmtree(f / "slurm"), (f / "slurm").write_text("x")), "slurm"),
        case("slurm.conf edited: unknown key", edit("slurm/slurm.conf", "ClusterName=", "NoSuchKey=1\nClusterName="),
             sc),
        case("slurm.conf edited: a node's CPUs", edit("slurm/slurm.conf", "CPUs=224", "CPUs=banana"), sc),
        case("slurm.conf edited: unbalanced hostlist", edit("slurm/slurm.conf", "dgx-[001-032]", "dgx-[001-032"),
             sc),
        case("topology.conf garbage", lambda f: (f / "slurm" / "topology.conf").write_text("SwitchName=[[[\n"),
             "topology.conf", "[[["),
        Case("check", "facts", "the render folder a symlink loop", _loop_folder),
    ]


def _loop_folder(sb: Sandbox) -> tuple[list[str], tuple[str, ...]]:
    loop = sb.inp / "render-loop"
    loop.symlink_to(loop)
    return ["check", str(loop)], (str(loop),)


# ---------------------------------------------------------------------------------- the cases

def all_cases() -> dict[tuple[str, str], list[Case]]:
    cases: dict[tuple[str, str], list[Case]] = {}
    for verb in VERBS:
        if verb == "check":
            cases[(verb, "spec")] = check_manifest_cases()
            cases[(verb, "facts")] = check_folder_cases()
        else:
            cases[(verb, "spec")] = spec_cases(verb)
            cases[(verb, "facts")] = facts_cases(verb)
        cases[(verb, "options")] = option_cases(verb)
    return cases


CASES = all_cases()
COUNTS = {verb: {kind: len(CASES[(verb, kind)]) for kind in KINDS} for verb in VERBS}


def counts_table() -> str:
    lines = [f"{'verb':<10} {'spec':>5} {'facts':>6} {'options':>8} {'total':>6}"]
    for verb in VERBS:
        c = COUNTS[verb]
        lines.append(f"{verb:<10} {c['spec']:>5} {c['facts']:>6} {c['options']:>8} {sum(c.values()):>6}")
    tot = {k: sum(COUNTS[v][k] for v in VERBS) for k in KINDS}
    lines.append(f"{'total':<10} {tot['spec']:>5} {tot['facts']:>6} {tot['options']:>8} {sum(tot.values()):>6}")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def base() -> Iterator[Path]:
    """The sandboxes' parent: in the system temp folder, traversable (pytest's tmp_path is 0700)."""
    d = Path(tempfile.mkdtemp(prefix="cf-fuzz-verbs-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize(("verb", "kind"), [(v, k) for v in VERBS for k in KINDS])
def test_malformed_inputs(verb: str, kind: str, base: Path) -> None:
    _run_all(CASES[(verb, kind)], base)


def test_counts_are_the_documented_ones() -> None:
    assert __doc__ is not None
    documented = "\n".join(line.strip() for line in __doc__.splitlines() if re.match(r"\s+(verb|[a-z]+ +\d)", line))
    assert documented == "\n".join(line.strip() for line in counts_table().splitlines()), counts_table()


# ---------------------------------------------------------------------------------- regressions
# Each a case the fuzz found failing before its fix; run through the same judge (exit 1/2, no
# traceback, names, fix, nothing written), plus what the fix must say.


def _regression(verb: str, name: str, build: Build, base: Path, *must_say: str) -> None:
    out_seen: list[str] = []

    def judge(code: int, out: str, *rest: Any) -> str | None:
        out_seen.append(out)
        return _JUDGE(code, out, *rest)

    with mock.patch(f"{__name__}._judge", judge):
        bad = run_case(Case(verb, "regression", name, build), base)
    assert bad is None, bad
    for text in must_say:
        assert text in out_seen[0], f"{text!r} not in:\n{out_seen[0]}"


_JUDGE = _judge


def _spec_bytes(content: bytes) -> Callable[[Sandbox], Path]:
    def make(sb: Sandbox) -> Path:
        p = sb.inp / "spec.yaml"
        p.write_bytes(content)
        return p
    return make


def test_regression_non_utf8_spec_says_where_and_how_to_fix(base: Path) -> None:
    mk = _spec_bytes((EXAMPLES / "local.yaml").read_bytes().replace(b"name: local", b"name: loc\xe9l", 1))
    _regression("validate", "latin-1 byte", lambda sb: (["validate", str(mk(sb))], ("spec.yaml",)), base,
                "is not UTF-8", "line ", "save the file as UTF-8")


def test_regression_empty_spec_has_a_fix(base: Path) -> None:
    mk = _spec_bytes(b"")
    _regression("render", "empty spec", lambda sb: (["render", str(mk(sb)), "--out", str(sb.cwd / "o")],
                                                    ("spec.yaml",)), base, "an empty file", "write one such as")


def test_regression_broken_fact_file_is_refused_not_skipped(base: Path) -> None:
    # plan used to exit 0: a dangling slurmd-C.txt was skipped as if the host had no such file
    def build(sb: Sandbox) -> tuple[list[str], tuple[str, ...]]:
        f = sb.inp / "facts" / "mi300x" / "mi-02" / "slurmd-C.txt"
        f.unlink()
        f.symlink_to(f.parent / "nowhere")
        return ["plan", str(sb.example("p5-training.yaml")), "--facts", str(sb.inp / "facts" / "mi300x")], (str(f),)
    _regression("plan", "dangling fact file", build, base, "not a readable file", "--facts")


def test_regression_facts_errors_name_the_option_and_the_fix(base: Path) -> None:
    def build(sb: Sandbox) -> tuple[list[str], tuple[str, ...]]:
        data = yaml.safe_load((EXAMPLES / "local.yaml").read_text())
        data["facts_dir"] = "/proc"
        return ["validate", str(sb.write_spec(data))], ("facts_dir",)
    _regression("validate", "facts_dir /proc", build, base, "facts_dir '/proc'", "Fix: save the tools' output")


def test_regression_empty_out_is_refused_not_the_working_directory(base: Path) -> None:
    # render --out "" rendered into the working directory (Path("") is ".")
    for verb in ("render", "inventory"):
        _regression(verb, "--out ''", lambda sb, verb=verb: ([verb, str(sb.example("local.yaml")), "--out", ""],
                                                             ("--out",)), base, "an empty path")


def test_regression_option_without_its_value_says_try_help(base: Path) -> None:
    _regression("validate", "--facts at the end", lambda sb: (["validate", str(sb.example("local.yaml")), "--facts"],
                                                              ("--facts",)), base,
                "Try 'clusterforge validate --help'")


def test_regression_diff_report_paths_that_cannot_be_written(base: Path) -> None:
    # --output a folder (IsADirectoryError) and under a missing folder (FileNotFoundError): tracebacks
    two = lambda sb: ["diff", "--base-spec", str(sb.example("local.yaml")), "--head-spec",  # noqa: E731
                      str(sb.example("hybrid.yaml")), "--no-plan"]
    _regression("diff", "--output a folder", lambda sb: ([*two(sb), "--output", str(sb.inp)], ("--output",)), base,
                "cannot write the report there")
    _regression("diff", "--json-output under a missing folder",
                lambda sb: ([*two(sb), "--json-output", str(sb.cwd / "no" / "r.json")], ("--json-output",)), base,
                "cannot write the report there")


def test_regression_stack_outputs_a_folder_or_not_text(base: Path) -> None:
    def build(content: bytes | None) -> Build:
        def b(sb: Sandbox) -> tuple[list[str], tuple[str, ...]]:
            p = sb.inp / "stack.json"
            p.mkdir() if content is None else p.write_bytes(content)
            return ["inventory", str(sb.example("p5-training.yaml")), "--out", str(sb.cwd / "inv"),
                    "--stack-outputs", str(p)], ("stack.json",)
        return b
    _regression("inventory", "--stack-outputs a folder", build(None), base, "--stack-outputs", "cannot read it")
    _regression("inventory", "--stack-outputs latin-1", build(b'{"region": "\xe9"}'), base, "not JSON")


def test_regression_inventory_leaves_a_hand_written_hosts_yml_alone(base: Path) -> None:
    # it was replaced, and the render written next to it
    def build(sb: Sandbox) -> tuple[list[str], tuple[str, ...]]:
        return ["inventory", str(sb.example("onprem-dgx.yaml")), "--out", str(_hand_written_inventory(sb))], ("--out",)
    _regression("inventory", "hand-written hosts.yml", build, base, "hosts.yml there was not written by clusterforge")


def test_regression_check_binary_or_folder_conf_stops_before_the_daemons(base: Path) -> None:
    # a binary slurm.conf was a UnicodeDecodeError traceback; a gres.conf folder reached slurmctld
    def build(make: Callable[[Path], None]) -> Build:
        def b(sb: Sandbox) -> tuple[list[str], tuple[str, ...]]:
            folder = _render_into(sb)
            make(folder)
            return ["check", str(folder), "--timeout", "10"], ("slurm.conf", "gres.conf")
        return b

    def gres_folder(f: Path) -> None:
        (f / "slurm" / "gres.conf").unlink()
        (f / "slurm" / "gres.conf").mkdir()

    _regression("check", "binary slurm.conf", build(lambda f: (f / "slurm" / "slurm.conf").write_bytes(bytes(range(256)))),
                base, "cannot be read as text", "fix: render again")
    _regression("check", "gres.conf a folder", build(gres_folder), base, "missing or not a file", "[manifest]")


def test_regression_check_report_ends_with_a_fix(base: Path) -> None:
    def build(sb: Sandbox) -> tuple[list[str], tuple[str, ...]]:
        folder = _render_into(sb)
        conf = folder / "slurm" / "slurm.conf"
        conf.write_text(conf.read_text().replace("CPUs=224", "CPUs=banana", 1))
        return ["check", str(folder), "--timeout", "10"], ("slurm.conf",)
    _regression("check", "slurm.conf edited", build, base, "fix: change the spec")


def test_regression_check_timeout_must_be_a_positive_number(base: Path) -> None:
    for t in ("nan", "inf", "0"):
        _regression("check", f"--timeout {t}",
                    lambda sb, t=t: (["check", str(_render_into(sb)), "--timeout", t], ("--timeout",)), base,
                    "a number > 0")


def test_regression_diff_of_a_spec_naming_system_paths(base: Path) -> None:
    # the fingerprint walked ec2_instance_topology: /proc with rglob: PermissionError traceback
    def build(sb: Sandbox) -> tuple[list[str], tuple[str, ...]]:
        data = yaml.safe_load((EXAMPLES / "local-aws.yaml").read_text())
        data.setdefault("topology", {})["ec2_instance_topology"] = "/proc"
        return ["diff", "--base-spec", str(sb.example("local-aws.yaml")), "--head-spec", str(sb.write_spec(data)),
                "--no-plan"], ("ec2_instance_topology",)
    _regression("diff", "ec2_instance_topology /proc", build, base)


def test_regression_diff_reads_a_bad_facts_folder_even_when_nothing_changed(base: Path) -> None:
    # identical sides never resolve: a broken --facts folder passed with exit 0
    def build(sb: Sandbox) -> tuple[list[str], tuple[str, ...]]:
        mi = sb.example("amd-mi300x.yaml")
        (sb.inp / "facts" / "mi300x" / "mi-09").mkdir()
        return ["diff", "--base-spec", str(mi), "--head-spec", str(mi), "--facts", str(sb.inp / "facts" / "mi300x")], \
            ("mi-09",)
    _regression("diff", "--facts with an empty host folder", build, base, "--facts")


def test_regression_diff_max_chars_must_be_positive(base: Path) -> None:
    _regression("diff", "--max-chars -5", lambda sb: (["diff", "--base-spec", str(sb.example("local.yaml")),
                                                       "--head-spec", str(sb.example("local.yaml")), "--format",
                                                       "markdown", "--max-chars", "-5"], ("--max-chars",)), base)


def test_regression_unreadable_manifest_has_a_fix(base: Path) -> None:
    def build(sb: Sandbox) -> tuple[list[str], tuple[str, ...]]:
        folder = _render_into(sb)
        (folder / "manifest.json").write_bytes(b'{"cluster": "\xff"}')
        return ["check", str(folder)], ("manifest.json",)
    _regression("check", "manifest not UTF-8", build, base, "render again")


# ---------------------------------------------------------------------------------- as a process


SUBPROCESS_SAMPLE = [("validate", "spec"), ("render", "options"), ("plan", "facts"), ("inventory", "spec"),
                     ("diff", "options"), ("check", "spec")]


@pytest.mark.parametrize(("verb", "kind"), SUBPROCESS_SAMPLE)
def test_a_sample_through_the_installed_entry_point(verb: str, kind: str, base: Path) -> None:
    """The first case of a few verb/kinds as a real process (stderr, exit status, no in-process state)."""
    case = CASES[(verb, kind)][0]
    sb = Sandbox(Path(tempfile.mkdtemp(prefix=f"proc-{verb}-", dir=base)))
    argv, names = case.build(sb)
    before = _snapshot(sb.root)
    proc = subprocess.run(
        [sys.executable, "-c", "from clusterforge.cli import main; main()", *argv],
        cwd=sb.workdir, env={**os.environ, **sb.env(), "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=120, check=False,
    )
    bad = _judge(proc.returncode, proc.stdout + proc.stderr, names, before, _snapshot(sb.root))
    assert bad is None, f"{case.name}: {bad}"


if __name__ == "__main__":
    print(counts_table())
    sys.exit(0)
