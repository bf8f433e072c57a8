from __future__ import annotations

import doctest

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterforge import hostlist
from clusterforge.hostlist import HostlistError, compress, expand


def test_doctests() -> None:
    assert doctest.testmod(hostlist).failed == 0


def test_expand_padding_and_products() -> None:
    assert expand("dgx-[001-003]") == ["dgx-001", "dgx-002", "dgx-003"]
    assert expand("r[1-2]n[01-02]") == ["r1n01", "r1n02", "r2n01", "r2n02"]
    assert expand("a,b[7,9]") == ["a", "b7", "b9"]


@pytest.mark.parametrize("bad", ["", "a[1-", "a]", "a[3-1]", "a[x]", "a[[1]]", "a,,b"])
def test_bad_expressions(bad: str) -> None:
    with pytest.raises(HostlistError):
        expand(bad)


def test_compress_keeps_padded_ranges_together() -> None:
    names = [f"gpu-{i:03d}" for i in range(1, 129)]
    assert compress(names) == "gpu-[001-128]"
    # unpadded numbers of other widths are a different range in Slurm's notation
    assert compress(["n9", "n10", "n11"]) == "n[9-11]"
    assert compress(["gpu-099", "gpu-100"]) == "gpu-[099-100]"


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=100)
@given(st.sets(st.integers(min_value=0, max_value=5000), min_size=1, max_size=300), st.sampled_from([0, 3, 4]))
def test_roundtrip(nums: set[int], width: int) -> None:
    names = {f"node-{n:0{width}d}" for n in nums}
    assert sorted(expand(compress(names))) == sorted(names)
