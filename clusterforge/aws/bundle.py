"""Which clusterforge files run on which cloud hosts: the agents' bundle.

The agents run on the cluster's own hosts with Debian's python3 (+ python3-boto3, python3-jinja2,
python3-yaml): no pydantic and no clusterforge install there. So each agent is a small set of
package files copied verbatim into one folder (``LIB_DIR``) and run with that folder on
``sys.path``; the modules import each other as top-level names there (and as
``clusterforge.*`` in tests). This list is the one place that says what goes where; the
``cloud_agents`` role copies exactly these files (its filter plugin reads :func:`sources`).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["LIB_DIR", "PROGRAMS", "shipped_modules", "sources"]

LIB_DIR = "/usr/local/lib/clusterforge-agents"
_PKG = Path(__file__).resolve().parents[1]  # clusterforge/
_REPO = _PKG.parent

#: program name on the host -> (module it runs, which hosts get it)
PROGRAMS: dict[str, tuple[str, str]] = {
    "clusterforge-cloud-agent": ("cloud_agent.py", "controller"),
    "clusterforge-retire": ("retire.py", "controller"),
    "clusterforge-node-agent": ("node_agent.py", "node"),
}

# host kind -> files (package-relative or repo-relative source, name in LIB_DIR)
_FILES: dict[str, tuple[tuple[Path, str], ...]] = {
    "controller": (
        (_PKG / "aws" / "cloud_agent.py", "cloud_agent.py"),
        (_PKG / "aws" / "ec2topology.py", "ec2topology.py"),
        (_PKG / "aws" / "ec2query.py", "ec2query.py"),
        (_PKG / "aws" / "capacity.py", "capacity.py"),
        (_PKG / "aws" / "retire.py", "retire.py"),
        (_PKG / "aws" / "nodename.py", "nodename.py"),
        (_PKG / "aws" / "slurmcmd.py", "slurmcmd.py"),
        (_PKG / "render" / "tree.py", "tree.py"),
        (_PKG / "hostlist.py", "hostlist.py"),
        (_PKG / "render" / "yamlfile.py", "yamlfile.py"),
        (_REPO / "templates" / "topology.conf.j2", "templates/topology.conf.j2"),
    ),
    "node": (
        (_PKG / "aws" / "node_agent.py", "node_agent.py"),
        (_PKG / "aws" / "slurmcmd.py", "slurmcmd.py"),
    ),
}


def sources(kind: str) -> list[dict[str, str]]:
    """The files a ``kind`` host ("controller" or "node") gets: ``[{"src": abs path, "dest":
    name in LIB_DIR}]``, in a stable order."""
    if kind not in _FILES:
        raise ValueError(f"unknown agent host kind {kind!r}; expected one of {sorted(_FILES)}")
    return [{"src": str(src), "dest": dest} for src, dest in _FILES[kind]]


def shipped_modules() -> set[str]:
    """Package-relative paths (``aws/retire.py``) of every module shipped to some host: they run
    without the package, so they cannot use :mod:`clusterforge.proc` and keep to the stdlib."""
    return {str(src.relative_to(_PKG)) for files in _FILES.values() for src, _ in files if src.suffix == ".py"}
