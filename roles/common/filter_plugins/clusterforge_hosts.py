"""``hosts_block_with``: the common role's /etc/hosts block with one more host's line in its place.

The block's hosts with fixed addresses are listed once per play (``tasks/hosts.yml``); a compute
node of an Auto Scaling group adds only its own line, by name, where ``groups | sort`` put it
before (Jinja's ``sort``: case-insensitive). Jinja could split the block and sort it again, but
ansible-core 2.19 hands a template each list as a lazy container that templates every item it
yields, so each node paid in proportion to the fixed hosts, and a hybrid cluster's burst nodes
stayed N² for the play. Here it is one pass over the lines in Python
(``benchmarks/hosts_block.py``, the ``hybrid`` layout). No clusterforge import: the role runs alone
as well.
"""

from __future__ import annotations

import bisect
from typing import Any


def hosts_block_with(block: str, address: str, name: str) -> str:
    """``block`` ("address name" lines in name order) with ``address name`` in its place."""
    lines = block.splitlines()
    keys = [line.rsplit(" ", 1)[-1].lower() for line in lines]
    lines.insert(bisect.bisect_right(keys, name.lower()), f"{address} {name}")
    return "".join(f"{line}\n" for line in lines)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"hosts_block_with": hosts_block_with}
