"""Helpers every component uses: child options and tags."""

from __future__ import annotations

from collections.abc import Mapping

import pulumi

from clusterforge.aws.outputs import TAG_CLUSTER, TAG_GROUP, TAG_HOSTNAME, TAG_ROLE

#: Component type tokens share this prefix (``clusterforge:aws:Network`` ...).
TOKEN_PREFIX = "clusterforge:aws"


def child_opts(parent: pulumi.Resource, opts: pulumi.ResourceOptions | None = None) -> pulumi.ResourceOptions:
    """Options for a component's child: parented to the component (so providers, protect and
    aliases flow down and the tree in ``pulumi preview`` mirrors the code), merged with ``opts``."""
    return pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(parent=parent))


def cluster_tags(cluster: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Tags of every taggable resource; the policy pack requires ``clusterforge:cluster``."""
    tags = {TAG_CLUSTER: cluster}
    if extra:
        tags.update(extra)
    return tags


def instance_tags(cluster: str, group: str, role: str, name: str, hostname: str | None = None) -> dict[str, str]:
    """Tags of an instance (and its volumes and interfaces): the inventory filters on them.

    ``hostname`` (head nodes only) is the Slurm node name, the inventory's host name; instances
    of an Auto Scaling group get theirs from the boot-time claim instead."""
    extra = {TAG_GROUP: group, TAG_ROLE: role, "Name": name}
    if hostname is not None:
        extra[TAG_HOSTNAME] = hostname
    return cluster_tags(cluster, extra)
