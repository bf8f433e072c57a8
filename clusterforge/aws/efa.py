"""EFA network-interface layout of a launch template, per instance type, from the catalog.

Current AWS guidance ("Maximize network bandwidth on instances with multiple network cards",
facts.md §1.3):

* the primary interface (network card 0, device index 0) is a plain ENA ``interface``: an
  EFA-only interface cannot be primary, and the primary one carries the node's IP address;
* card 0 also gets an ``efa-only`` interface at device index 1;
* every further network card gets one ``efa-only`` interface at device index **0**.

``efa-only`` interfaces take no IP address, so a p5.48xlarge (32 EFA devices) uses 1 IP instead
of 32, and the subnet does not run out of addresses when a group grows. Older AWS pages and
ParallelCluster 3.11 put ``efa`` (EFA with ENA) interfaces at device index 1 instead; that layout
still works but costs one IP per card.

The number of EFA devices is the catalog's ``network.efa_max`` (maximumEfaInterfaces), one per
network card: p5/p5e 32, p5en 16, p6-b200 8, p4d/p4de 4, g6e.48xlarge 4, g5 1, ...
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from clusterforge.catalog import HardwareProfile
from clusterforge.errors import ClusterforgeError

InterfaceType = Literal["interface", "efa-only", "efa"]


@dataclass(frozen=True, order=True)
class NetworkInterfaceSlot:
    """One ``network_interfaces`` entry of a launch template (EC2 ``InterfaceType`` spelling)."""

    network_card_index: int
    device_index: int
    interface_type: InterfaceType

    @property
    def is_efa(self) -> bool:
        return self.interface_type in ("efa", "efa-only")

    @property
    def is_primary(self) -> bool:
        return self.network_card_index == 0 and self.device_index == 0


class EfaLayoutError(ClusterforgeError, ValueError):
    """The catalog entry cannot carry the EFA layout (not EFA-capable, or inconsistent counts)."""


def efa_device_count(profile: HardwareProfile) -> int:
    """EFA devices the layout attaches: one per network card, ``efa_max`` of them."""
    net = profile.network
    if not net.efa_max:
        raise EfaLayoutError(
            f"{profile.name} does not support EFA (catalog network.efa_max is {net.efa_max!r}); "
            "set efa: false for this node group or pick an EFA-capable instance type"
        )
    cards = net.cards or 1
    if net.efa_max > cards:
        # More EFA devices than cards would need several EFA interfaces on one card, which the
        # current AWS layout does not describe; refuse rather than guess.
        raise EfaLayoutError(
            f"{profile.name}: catalog says efa_max={net.efa_max} but only {cards} network cards; "
            "the EFA layout puts one EFA interface on each card; fix the catalog entry"
        )
    if net.enis_per_card is not None and net.enis_per_card < 2:
        raise EfaLayoutError(
            f"{profile.name}: network card 0 takes {net.enis_per_card} interface(s); the EFA layout "
            "needs two there (ENA primary + EFA-only)"
        )
    return net.efa_max


def efa_interfaces(profile: HardwareProfile) -> list[NetworkInterfaceSlot]:
    """The launch-template interface list for an EFA group of ``profile``'s instance type.

    >>> from clusterforge.catalog import get_profile
    >>> p4d = get_profile("p4d.24xlarge")
    >>> [(s.network_card_index, s.device_index, s.interface_type) for s in efa_interfaces(p4d)]
    [(0, 0, 'interface'), (0, 1, 'efa-only'), (1, 0, 'efa-only'), (2, 0, 'efa-only'), (3, 0, 'efa-only')]
    """
    n = efa_device_count(profile)
    slots = [
        NetworkInterfaceSlot(0, 0, "interface"),
        NetworkInterfaceSlot(0, 1, "efa-only"),
    ]
    slots.extend(NetworkInterfaceSlot(card, 0, "efa-only") for card in range(1, n))
    return slots


def primary_interface() -> list[NetworkInterfaceSlot]:
    """The interface list of a group without EFA: the ENA primary interface only."""
    return [NetworkInterfaceSlot(0, 0, "interface")]
