"""Reusable typed fields of the cluster spec.

Each alias validates once, where the value enters, so the models and the rules that use them can
trust the value (a ``Cidr`` is a real network, a ``Hostlist`` expands).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, StringConstraints

from clusterforge import hostlist

# The releases the renderer's gates know (render/versions.py cites what each changed).
SLURM_VERSIONS = ("22.05", "23.02", "23.11", "24.05", "24.11", "25.05", "25.11", "26.05")
SlurmVersion = Literal["22.05", "23.02", "23.11", "24.05", "24.11", "25.05", "25.11", "26.05"]


def version_tuple(v: str) -> tuple[int, ...]:
    """``"23.11"`` -> ``(23, 11)``; ``"2.26.2"`` -> ``(2, 26, 2)``."""
    return tuple(int(p) for p in re.findall(r"\d+", v))


def _cidr(v: str) -> str:
    try:
        net = ipaddress.ip_network(v, strict=True)
    except ValueError as exc:
        raise ValueError(
            f"{v!r} is not a network in CIDR form ({exc}); write it like 10.0.0.0/16 with the host bits zero"
        ) from None
    return str(net)


def _hostlist(v: str) -> str:
    try:
        hostlist.expand(v)
    except hostlist.HostlistError as exc:
        raise ValueError(f"{exc}; write host sets like dgx-[001-032] or node1,node2") from None
    return v


def _hostnames(v: str) -> str:
    for name in hostlist.expand(v):
        if not re.fullmatch(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", name):
            raise ValueError(
                f"host name {name!r} is not a valid lower-case DNS label (letters, digits, '-'; "
                "at most 63 characters; no leading or trailing '-')"
            )
    return v


def _addresses(v: str) -> str:
    for addr in hostlist.expand(v):
        try:
            ipaddress.ip_address(addr)
        except ValueError:
            raise ValueError(f"{addr!r} is not an IP address; write addresses like 10.10.1.[1-32]") from None
    return v


def _version(v: str) -> str:
    if not re.fullmatch(r"\d+(\.\d+){0,3}", v):
        raise ValueError(f"{v!r} is not a dotted version such as 2.26.2")
    return v


def _slurm_time(v: str) -> str:
    # Slurm time formats: "minutes", "m:s", "h:m:s", "d-h", "d-h:m", "d-h:m:s", or UNLIMITED/INFINITE.
    if v.upper() in {"UNLIMITED", "INFINITE"}:
        return v.upper()
    if not re.fullmatch(r"(\d+-)?\d+(:\d{1,2}){0,2}", v):
        raise ValueError(f"{v!r} is not a Slurm time; write minutes, HH:MM:SS, D-HH:MM:SS or UNLIMITED")
    return v


Name = Annotated[
    str,
    StringConstraints(pattern=r"^[a-z][a-z0-9-]{0,30}[a-z0-9]$"),
    Field(description="lower-case name: letters, digits and '-', 2-32 characters, starting with a letter"),
]
Cidr = Annotated[str, AfterValidator(_cidr), Field(description="IPv4/IPv6 network in CIDR form, e.g. 10.0.0.0/16")]
Hostlist = Annotated[
    str,
    AfterValidator(_hostlist),
    AfterValidator(_hostnames),
    Field(description="Slurm hostlist of host names, e.g. dgx-[001-032]"),
]
AddressList = Annotated[
    str,
    AfterValidator(_hostlist),
    AfterValidator(_addresses),
    Field(description="hostlist of IP addresses, one per host in order, e.g. 10.10.1.[1-32]"),
]
Version = Annotated[str, AfterValidator(_version), Field(description="dotted version, e.g. 2.26.2")]
SlurmTime = Annotated[
    str, AfterValidator(_slurm_time), Field(description="Slurm time limit: minutes, D-HH:MM:SS or UNLIMITED")
]
AbsPath = Annotated[
    str, StringConstraints(pattern=r"^/[A-Za-z0-9._/-]*$"), Field(description="absolute path on the nodes")
]
PositiveInt = Annotated[int, Field(gt=0)]
