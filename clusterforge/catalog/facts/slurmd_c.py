"""Parser for `slurmd -C`: the node line slurmd would register with."""

from __future__ import annotations

from clusterforge.catalog.facts.models import FactsError, SlurmdC
from clusterforge.catalog.facts.text import parse_int as _int


def parse_slurmd_c(text: str, source: str = "slurmd -C output") -> SlurmdC:
    """Parse ``slurmd -C``: ``NodeName=x CPUs=192 Boards=1 ... RealMemory=...`` and ``UpTime=``."""
    node_lines = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("NodeName=")]
    if len(node_lines) != 1:
        found = "no" if not node_lines else f"{len(node_lines)}"
        raise FactsError(
            f"{source}: {found} 'NodeName=' lines; expected the output of `slurmd -C`: one line "
            "'NodeName=<host> CPUs=.. Boards=.. SocketsPerBoard=.. CoresPerSocket=.. "
            "ThreadsPerCore=.. RealMemory=..' and an 'UpTime=' line"
        )
    fields: dict[str, str] = {}
    for token in node_lines[0].split():
        key, sep, value = token.partition("=")
        if not sep or not key:
            raise FactsError(f"{source}: {token!r} in the NodeName line is not key=value")
        fields[key] = value
    needed = (
        "NodeName",
        "CPUs",
        "Boards",
        "SocketsPerBoard",
        "CoresPerSocket",
        "ThreadsPerCore",
        "RealMemory",
    )
    missing = [k for k in needed if not fields.get(k)]
    if missing:
        raise FactsError(
            f"{source}: the NodeName line lacks {', '.join(missing)} (slurmd -C prints all of them)"
        )
    uptime = None
    for ln in text.splitlines():
        if ln.strip().startswith("UpTime="):
            uptime = ln.strip().partition("=")[2]
    facts = SlurmdC(
        node_name=fields["NodeName"],
        cpus=_int(fields["CPUs"], "CPUs", source, 1),
        boards=_int(fields["Boards"], "Boards", source, 1),
        sockets_per_board=_int(fields["SocketsPerBoard"], "SocketsPerBoard", source, 1),
        cores_per_socket=_int(fields["CoresPerSocket"], "CoresPerSocket", source, 1),
        threads_per_core=_int(fields["ThreadsPerCore"], "ThreadsPerCore", source, 1),
        real_memory_mib=_int(fields["RealMemory"], "RealMemory", source, 1),
        uptime=uptime,
    )
    layout = facts.sockets * facts.cores_per_socket * facts.threads_per_core
    if layout != facts.cpus:
        raise FactsError(
            f"{source}: CPUs={facts.cpus} but Boards x SocketsPerBoard x CoresPerSocket x "
            f"ThreadsPerCore = {layout}; the file is edited or truncated"
        )
    return facts
