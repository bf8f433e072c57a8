"""The EFA interface layout per instance type (clusterforge.aws.efa), a pure function."""

from __future__ import annotations

import pytest

from clusterforge.aws.efa import (
    EfaLayoutError,
    NetworkInterfaceSlot,
    efa_device_count,
    efa_interfaces,
    primary_interface,
)
from clusterforge.catalog import HardwareProfile, get_profile, profile_names

#: EFA devices per EFA-capable AWS type in the catalog (maximumEfaInterfaces; facts.md §1.1).
#: A new EFA-capable type in profiles.yaml must be added here, with its source.
EXPECTED_EFA = {
    "p5.48xlarge": 32,
    "p5e.48xlarge": 32,
    "p5en.48xlarge": 16,
    "p4d.24xlarge": 4,
    "p4de.24xlarge": 4,
    "p6-b200.48xlarge": 8,
    "g5.12xlarge": 1,
    "g5.48xlarge": 1,
    "g6e.48xlarge": 4,
    "c7i.48xlarge": 1,
    "c6in.32xlarge": 2,
    "hpc7a.96xlarge": 2,
}
GPU_TYPES = sorted(n for n in profile_names("aws") if (p := get_profile(n)) and p.gpu is not None)


def _profile(name: str) -> HardwareProfile:
    p = get_profile(name)
    assert p is not None, name
    return p


def expected_layout(n: int) -> list[tuple[int, int, str]]:
    """Current AWS guidance written out longhand: ENA primary, EFA-only beside it on card 0,
    EFA-only at device 0 on each further card."""
    return [(0, 0, "interface"), (0, 1, "efa-only")] + [(card, 0, "efa-only") for card in range(1, n)]


def test_every_efa_capable_aws_type_is_in_the_table() -> None:
    capable = sorted(n for n in profile_names("aws") if _profile(n).efa_capable)
    assert capable == sorted(EXPECTED_EFA), "add new EFA-capable catalog types to EXPECTED_EFA"


@pytest.mark.parametrize("name", GPU_TYPES)
def test_exact_interface_list_for_every_gpu_type(name: str) -> None:
    slots = efa_interfaces(_profile(name))
    got = [(s.network_card_index, s.device_index, s.interface_type) for s in slots]
    assert got == expected_layout(EXPECTED_EFA[name]), name


@pytest.mark.parametrize(("name", "n"), sorted(EXPECTED_EFA.items()))
def test_efa_device_count_matches_catalog(name: str, n: int) -> None:
    slots = efa_interfaces(_profile(name))
    assert efa_device_count(_profile(name)) == n
    assert sum(s.is_efa for s in slots) == n
    assert len(slots) == n + 1  # one ENA interface carries the node's only IP address


def test_p5_has_32_efa_only_interfaces_on_32_cards() -> None:
    slots = efa_interfaces(_profile("p5.48xlarge"))
    assert slots[0] == NetworkInterfaceSlot(0, 0, "interface") and slots[0].is_primary
    assert {s.network_card_index for s in slots if s.is_efa} == set(range(32))
    assert all(s.interface_type == "efa-only" for s in slots[1:])


@pytest.mark.parametrize("name", sorted(EXPECTED_EFA))
def test_layout_fits_the_cards(name: str) -> None:
    p = _profile(name)
    slots = efa_interfaces(p)
    assert len({(s.network_card_index, s.device_index) for s in slots}) == len(slots), "slot used twice"
    assert max(s.network_card_index for s in slots) < (p.network.cards or 1)
    per_card: dict[int, int] = {}
    for s in slots:
        per_card[s.network_card_index] = per_card.get(s.network_card_index, 0) + 1
    assert max(per_card.values()) <= (p.network.enis_per_card or 2)
    assert [s for s in slots if s.is_primary] == [slots[0]]


@pytest.mark.parametrize("name", ["m7i.2xlarge", "m7i.4xlarge", "c7i.2xlarge"])
def test_non_efa_types_are_refused_with_a_clear_message(name: str) -> None:
    with pytest.raises(EfaLayoutError, match=r"does not support EFA.*efa: false"):
        efa_interfaces(_profile(name))


def test_inconsistent_catalog_entry_is_refused() -> None:
    p5 = _profile("p5.48xlarge")
    broken = p5.model_copy(update={"network": p5.network.model_copy(update={"cards": 16})})
    with pytest.raises(EfaLayoutError, match="one EFA interface on each card"):
        efa_interfaces(broken)
    single = p5.model_copy(update={"network": p5.network.model_copy(update={"enis_per_card": 1})})
    with pytest.raises(EfaLayoutError, match="needs two there"):
        efa_interfaces(single)


def test_primary_interface_only_without_efa() -> None:
    assert primary_interface() == [NetworkInterfaceSlot(0, 0, "interface")]
