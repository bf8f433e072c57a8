"""Parser for `ibstat`: one record per port of every RDMA adapter (CA)."""

from __future__ import annotations

import re

from clusterforge.catalog.facts.models import FactsError, Hca
from clusterforge.catalog.facts.text import NUM as _NUM
from clusterforge.catalog.facts.text import parse_int as _int


def parse_ibstat(text: str, source: str = "ibstat output") -> list[Hca]:
    """Parse ``ibstat``: one :class:`Hca` per port of every ``CA '<name>'`` block."""
    hcas: list[Hca] = []
    ca: str | None = None
    ca_ports: int | None = None
    seen_ports = 0
    port: dict[str, str] | None = None
    port_no = 0

    def close_port() -> None:
        nonlocal port
        if port is None or ca is None:
            return
        missing = [k for k in ("State", "Rate", "Link layer") if k not in port]
        if missing:
            raise FactsError(f"{source}: CA {ca!r} port {port_no} has no {', '.join(missing)} line")
        rate = re.fullmatch(rf"({_NUM})(?:\.[0-9]+)?", port["Rate"])
        if not rate:
            raise FactsError(
                f"{source}: CA {ca!r} port {port_no} Rate {port['Rate']!r} is not a number of Gb/s"
            )
        hcas.append(
            Hca(
                ca=ca,
                port=port_no,
                state=port["State"],
                physical_state=port.get("Physical state"),
                # Only 1x SDR (2.5) is fractional; Gb/s as an int is what the catalog stores.
                rate_gbps=int(rate.group(1)),
                link_layer=port["Link layer"],
            )
        )
        port = None

    def close_ca() -> None:
        close_port()
        if ca is not None and ca_ports is not None and ca_ports != seen_ports:
            raise FactsError(f"{source}: CA {ca!r} says 'Number of ports: {ca_ports}' but lists {seen_ports}")

    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        # Kernel RDMA device names (mlx5_0, bnxt_re3, rdmap79s0); anything else is not ibstat.
        m = re.fullmatch(r"CA '([A-Za-z0-9_.-]{1,64})'", line)
        if m:
            close_ca()
            ca, ca_ports, seen_ports = m.group(1), None, 0
            if any(h.ca == ca for h in hcas):
                raise FactsError(f"{source}: CA {ca!r} is listed twice")
            continue
        if ca is None:
            raise FactsError(
                f"{source}: {line!r} before the first \"CA '<name>'\" line; expected `ibstat` output"
            )
        m = re.fullmatch(r"Port ([0-9]{1,3}):", line)
        if m:
            close_port()
            port, port_no = {}, int(m.group(1))
            seen_ports += 1
            continue
        key, sep, value = line.partition(":")
        if not sep or not key.strip():
            raise FactsError(f"{source}: {line!r} in CA {ca!r} is not 'key: value'")
        if port is not None:
            port[key.strip()] = value.strip()
        elif key.strip() == "Number of ports":
            ca_ports = _int(value, f"CA {ca!r} Number of ports", source)
    close_ca()
    if not hcas:
        raise FactsError(f"{source}: no \"CA '<name>'\" block with a port; expected `ibstat` output")
    return hcas

