"""The configs of the programs clusterforge runs on cloud hosts: ``cloud/agent.json`` and ``cloud/node-agent.json``.

* ``cloud/agent.json`` (controller groups, ``/etc/clusterforge/cloud-agent.json``): read by
  ``clusterforge-cloud-agent`` (``aws/cloud_agent.py``): the tree basis (``render/tree.py``) it
  rebuilds topology.conf from with live ``DescribeInstanceTopology`` answers, and the capacity
  blocks (``aws/capacity.py``) it keeps in their windows.
* ``cloud/node-agent.json`` (cloud compute groups, ``/etc/clusterforge/node-agent.json``): read by
  ``clusterforge-node-agent`` (``aws/node_agent.py``).

Both are written only for clusters with cloud compute groups, as sorted-key JSON (a re-render of
an unchanged spec gives the same bytes). The programs that read them, and
which files each host gets, are listed in :mod:`clusterforge.aws.bundle`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from clusterforge.render import jsonfile

if TYPE_CHECKING:
    from clusterforge.clusterspec.models import Cluster
    from clusterforge.render.model import TopologyModel

AGENT_CONFIG_PATH = "/etc/clusterforge/cloud-agent.json"
NODE_AGENT_CONFIG_PATH = "/etc/clusterforge/node-agent.json"
AGENT_DIR = "/usr/local/lib/clusterforge-agents"
#: package files shipped to the hosts, relative to the checkout (stdlib + boto3/jinja2/yaml only)
def _dump(data: Any) -> str:
    return jsonfile.dumps(data, sort_keys=True)


def agent_config(cluster: Cluster, slurm_version: str, topology: TopologyModel, topology_path: str | None) -> str:
    """``cloud/agent.json``; ``topology`` is null unless the render has a topology/tree."""
    # the agents' own modules (stdlib programs for the hosts: urllib, socket, argparse) only here,
    # and only for clusters with cloud compute groups
    from clusterforge.aws import capacity
    from clusterforge.aws.outputs import names_table

    basis = None
    if topology.plugin == "topology/tree" and topology.basis is not None:
        # the render chose a tree, so the agent's rebuild must be one too, even before any
        # instance is reported (then only the aws-<group> leaves and the spec switches)
        basis = dict(topology.basis, tree_required=True)
    return _dump(
        {
            "cluster": cluster.name,
            "region": cluster.aws.region if cluster.aws else "",
            "names_table": names_table(cluster.name),
            "slurm_version": slurm_version,
            "topology": basis,
            "topology_path": topology_path if basis is not None else None,
            "capacity_blocks": capacity.blocks_config(cluster),
        }
    )


def node_agent_config(cluster: Cluster) -> str:
    from clusterforge.aws import node_agent

    return _dump(node_agent.config(cluster))


def wanted(cluster: Cluster) -> bool:
    """Agents run only where cloud compute groups exist (on-prem clusters get neither file)."""
    return any(g.is_cloud and g.role == "compute" for g in cluster.node_groups)
