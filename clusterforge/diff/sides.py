"""The two sides of a diff: a spec as it is at a git ref, in the working tree, or in a file.

A spec at a ref is read with ``git show``/``git archive`` into a temporary folder, together with
the files it references relative to itself (``facts_dir``, ``topology.ec2_instance_topology``),
so it loads and renders exactly as it would in a checkout of that ref; no worktree is created and
the checkout is never touched.

Both sides are rendered and planned by the clusterforge that runs the diff (the head's code): a
pull request that changes the renderer itself shows its effect only through the specs it changes.
"""

from __future__ import annotations

import hashlib
import io
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from clusterforge.errors import ClusterforgeError
from clusterforge.proc import ProcNotFound, ProcTimeout, run_bytes

#: Folders searched for specs when ``clusterforge diff`` is given none (plus the specs named by
#: ``Pulumi.<stack>.yaml`` and every changed YAML file that looks like a spec).
SPEC_FOLDERS = ("examples",)


class DiffError(ClusterforgeError):
    """A diff cannot be computed: a bad git ref, a missing file, a spec that does not load."""


@dataclass(frozen=True)
class SpecSource:
    """One side's copy of one spec.

    ``label`` says where it came from (``origin/main@3f2a1b0``, ``working tree`` or a file path);
    ``spec_path`` is the name both sides share (repository-relative for git sides); ``path`` is the
    local file to load, ``None`` when the spec does not exist on this side (added or deleted by
    the change); ``base_dir`` resolves the spec's relative paths; ``fingerprint`` hashes the spec
    and the files it references, so identical sides are recognised without rendering.
    """

    label: str
    spec_path: str
    path: Path | None
    base_dir: Path
    fingerprint: str


# ----------------------------------------------------------------------------- git


def git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    try:
        proc = run_bytes(["git", "-C", str(repo), *args], timeout=120)
    except ProcNotFound:
        raise DiffError("git is not installed; install it or compare two files with --base-spec/--head-spec") from None
    except ProcTimeout as exc:
        raise DiffError(f"git {' '.join(args)} in {repo}: {exc}") from None
    if check and proc.returncode != 0:
        msg = proc.stderr.decode(errors="replace").strip().splitlines()
        raise DiffError(f"git {' '.join(args)} failed in {repo}: {msg[-1] if msg else 'exit ' + str(proc.returncode)}")
    return proc


def repo_root(start: Path) -> Path:
    proc = git(start, "rev-parse", "--show-toplevel", check=False)
    if proc.returncode != 0:
        raise DiffError(
            f"{str(start)!r} is not inside a git repository; run the diff from a checkout, or compare two files "
            "with --base-spec FILE --head-spec FILE"
        )
    return Path(proc.stdout.decode().strip())


def resolve_ref(repo: Path, ref: str) -> str:
    """The commit ``ref`` names, as a full sha; a message that says how to fetch it otherwise."""
    proc = git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
    if proc.returncode != 0:
        raise DiffError(
            f"git ref {ref!r} does not name a commit in {repo}; check the spelling, or fetch it first "
            f"(git fetch origin {ref.removeprefix('origin/')}; in GitHub Actions: actions/checkout with fetch-depth: 0)"
        )
    return proc.stdout.decode().strip()


def default_base(repo: Path, head: str | None) -> tuple[str, str]:
    """``(label, sha)`` of the merge-base of ``head`` (default HEAD) with ``main`` (or ``origin/main``)."""
    tip = resolve_ref(repo, head) if head else resolve_ref(repo, "HEAD")
    for candidate in ("main", "origin/main"):
        proc = git(repo, "rev-parse", "--verify", "--quiet", f"{candidate}^{{commit}}", check=False)
        if proc.returncode == 0:
            mb = git(repo, "merge-base", proc.stdout.decode().strip(), tip, check=False)
            if mb.returncode == 0:
                return f"merge-base({candidate})", mb.stdout.decode().strip()
    raise DiffError(
        f"no branch 'main' or 'origin/main' in {repo} to take the merge-base with; pass --base REF "
        "(e.g. --base origin/${{ github.base_ref }}) or fetch main first"
    )


def short(sha: str) -> str:
    return sha[:10]


def changed_paths(repo: Path, base_sha: str, head_sha: str | None) -> list[str]:
    """Paths that differ between the base commit and the head commit (or the working tree)."""
    args = ["diff", "--name-only", "--no-renames", base_sha] + ([head_sha] if head_sha else [])
    paths = git(repo, *args).stdout.decode().splitlines()
    if head_sha is None:  # new files not yet added count too
        paths += git(repo, "ls-files", "--others", "--exclude-standard").stdout.decode().splitlines()
    return sorted(set(p for p in paths if p))


def _tracked(repo: Path, sha: str | None, folder: str) -> list[str]:
    if sha is None:
        out = git(repo, "ls-files", "--cached", "--others", "--exclude-standard", "--", folder).stdout
    else:
        out = git(repo, "ls-tree", "-r", "--name-only", sha, "--", folder).stdout
    return out.decode().splitlines()


def _read(repo: Path, sha: str | None, rel: str) -> bytes | None:
    if sha is None:
        p = repo / rel
        return p.read_bytes() if p.is_file() else None
    proc = git(repo, "show", f"{sha}:{rel}", check=False)
    return proc.stdout if proc.returncode == 0 else None


def _looks_like_spec(text: bytes | None) -> bool:
    if text is None or b"node_groups" not in text:
        return False
    try:
        data = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError, ValueError):  # deep nesting, 5000-digit ints
        return False
    return isinstance(data, dict) and "name" in data and "node_groups" in data


def discover_specs(repo: Path, base_sha: str, head_sha: str | None) -> list[str]:
    """Specs worth comparing when none are named: the changed YAML files that are cluster specs,
    the specs in :data:`SPEC_FOLDERS` and those that ``Pulumi.<stack>.yaml`` files name (on either
    side). Unchanged ones drop out later by fingerprint, so listing too many costs only a read."""
    found: set[str] = set()
    changed = changed_paths(repo, base_sha, head_sha)
    for rel in changed:
        if rel.endswith((".yaml", ".yml")) and any(_looks_like_spec(_read(repo, s, rel)) for s in (base_sha, head_sha)):
            found.add(rel)
    for sha in (base_sha, head_sha):
        for folder in SPEC_FOLDERS:
            for rel in _tracked(repo, sha, folder):
                if rel.endswith((".yaml", ".yml")) and PurePosixPath(rel).parent == PurePosixPath(folder):
                    found.add(rel)
        for rel in _tracked(repo, sha, "."):
            name = PurePosixPath(rel).name
            if "/" not in rel and name.startswith("Pulumi.") and name.endswith(".yaml") and name != "Pulumi.yaml":
                try:
                    stack = yaml.safe_load(_read(repo, sha, rel) or b"") or {}
                except (yaml.YAMLError, RecursionError, ValueError):  # deep nesting, 5000-digit ints
                    continue
                spec = (stack.get("config") or {}).get("clusterforge:spec") if isinstance(stack, dict) else None
                if isinstance(spec, str):
                    found.add(spec)
    return sorted(r for r in found if any(_looks_like_spec(_read(repo, s, r)) for s in (base_sha, head_sha)))


# ----------------------------------------------------------------------------- materialising


def referenced_paths(spec_text: bytes) -> list[str]:
    """Paths a spec names relative to itself (read before validation, so a broken spec still lists them)."""
    try:
        data: Any = yaml.safe_load(spec_text)
    except (yaml.YAMLError, RecursionError, ValueError):  # deep nesting, 5000-digit ints
        return []
    if not isinstance(data, dict):
        return []
    out = []
    if isinstance(data.get("facts_dir"), str):
        out.append(data["facts_dir"])
    topo = data.get("topology")
    for key in ("ec2_instance_topology", "ec2_instances"):
        if isinstance(topo, dict) and isinstance(topo.get(key), str):
            out.append(topo[key])
    return out


def _fingerprint(root: Path, spec: Path, refs: list[str]) -> str:
    h = hashlib.sha256(spec.read_bytes())
    from clusterforge.catalog.facts.load import FACT_FILES

    for ref in sorted(refs):
        p = spec.parent / ref
        try:
            # a facts folder: only the files the loader reads (<dir>/<host>/<fact file>), never a walk
            # of whatever the spec names (facts_dir: / would walk the whole filesystem, /proc would block)
            files = (
                sorted(f for name in FACT_FILES for f in p.glob(f"*/{name}") if f.is_file())
                if p.is_dir()
                else ([p] if p.is_file() else [])
            )
            for f in files:
                h.update(str(f.relative_to(root) if f.is_relative_to(root) else f).encode())
                h.update(hashlib.sha256(f.read_bytes()).digest())
        except OSError as exc:  # unreadable: resolving the spec reports it; here it only must not match
            h.update(f"{ref}: {exc}".encode())
    return h.hexdigest()


def _normal(rel: PurePosixPath) -> str | None:
    """``a/b/../c`` -> ``a/c``; ``None`` when the path leaves the repository."""
    parts: list[str] = []
    for part in rel.parts:
        if part == "..":
            if not parts:
                return None
            parts.pop()
        elif part != ".":
            parts.append(part)
    return "/".join(parts)


def at_ref(repo: Path, sha: str, label: str, spec_path: str, dest: Path) -> SpecSource:
    """The spec ``spec_path`` as it is at commit ``sha``, copied under ``dest`` with its references."""
    text = _read(repo, sha, spec_path)
    if text is None:
        return SpecSource(label, spec_path, None, dest, "absent")
    spec_rel = PurePosixPath(spec_path)
    wanted = [spec_path]
    for ref in referenced_paths(text):
        rel = _normal(spec_rel.parent / ref)
        if rel and git(repo, "ls-tree", "--name-only", sha, "--", rel).stdout.strip():
            wanted.append(rel)
    archive = git(repo, "archive", "--format=tar", sha, "--", *wanted).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    local = dest / spec_path
    return SpecSource(label, spec_path, local, local.parent, _fingerprint(dest, local, referenced_paths(text)))


def in_tree(repo: Path, spec_path: str, label: str = "working tree") -> SpecSource:
    local = repo / spec_path
    if not local.is_file():
        return SpecSource(label, spec_path, None, local.parent, "absent")
    return SpecSource(
        label, spec_path, local, local.parent, _fingerprint(repo, local, referenced_paths(local.read_bytes()))
    )


def from_file(path: Path) -> SpecSource:
    if not path.is_file():
        raise DiffError(f"spec file {str(path)!r} does not exist; pass the path of a cluster YAML file")
    return SpecSource(
        str(path), str(path), path, path.resolve().parent,
        _fingerprint(path.resolve().parent, path.resolve(), referenced_paths(path.read_bytes())),
    )
