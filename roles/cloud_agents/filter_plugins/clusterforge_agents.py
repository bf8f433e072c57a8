"""Filters for the cloud_agents role: the files of each agent, from clusterforge's own list.

clusterforge must be importable on the Ansible host (as for the slurm role's restart filter).
"""

from __future__ import annotations

from typing import Any


def agent_files(kind: str) -> list[dict[str, str]]:
    from clusterforge.aws.bundle import sources

    return sources(kind)


def agent_programs(kind: str) -> list[dict[str, str]]:
    from clusterforge.aws.bundle import PROGRAMS

    return [{"name": n, "module": m} for n, (m, k) in sorted(PROGRAMS.items()) if k == kind]


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"clusterforge_agent_files": agent_files, "clusterforge_agent_programs": agent_programs}
