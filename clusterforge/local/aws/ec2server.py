"""moto's server with ``DescribeInstanceTopology`` added: the EC2 stand-in of the local AWS flavour.

moto 5.2.1 has no ``DescribeInstanceTopology``. This runs moto's own server app (what
``python -m moto.server`` runs: ``DomainDispatcherApplication(create_backend_app)`` under
werkzeug's ``run_simple``) behind a WSGI middleware that answers EC2 query-protocol requests with
``Action=DescribeInstanceTopology`` from moto's EC2 backend; every other request goes to moto
unchanged.

The answer (shape and XML names from botocore's ec2 service model: ``instanceSet/item``,
``instanceId``, ``instanceType``, ``groupName``, ``networkNodeSet/item``, ``availabilityZone``,
``zoneId``, ``capacityBlockId``, ``nextToken``):

* instances: the pending/running instances of the request's region (from the SigV4 credential
  scope) whose type AWS reports (:data:`SUPPORTED_TYPES`, a documented subset of the list in
  the DescribeInstanceTopology reference; others are left out, as AWS does);
* placement: the ``--placements`` file (JSON ``{"i-...": ["nn-top", "nn-mid", "nn-bottom"]}``,
  re-read on every request, so a test moves an instance by rewriting it); an instance not in the
  file gets the default rule: the k-th supported instance the region ever launched (launch order,
  terminated ones counted, so a replacement lands elsewhere) sits under one spine, middle node
  ``k // 4`` and leaf ``k // 2`` (leaves of 2 instances, 2 leaves per middle node);
  ids look like AWS's: ``nn-`` + 17 hex digits of a SHA-256 of (region, level, index);
* ``InstanceIds`` (at most 100), ``MaxResults`` (1-100, default 20, not with ``InstanceIds``,
  as AWS documents) and ``NextToken`` pagination (pages of 20 when only ids are given).

CLI: ``python -m clusterforge.local.aws.ec2server -H HOST -p PORT [--placements FILE]``.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

#: The types this stand-in reports: p3dn/p4d/p4de/p5/p5e/p5en/trn1/trn1n/trn2 and hpc7a, a subset
#: of the supported-instance-types list of the DescribeInstanceTopology reference (facts.md).
SUPPORTED_TYPES = frozenset({
    "p3dn.24xlarge", "p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge",
    "trn1.2xlarge", "trn1.32xlarge", "trn1n.32xlarge", "trn2.48xlarge", "hpc7a.96xlarge",
})
DEFAULT_PAGE = 20
MAX_PAGE = 100
MAX_IDS = 100
XMLNS = "http://ec2.amazonaws.com/doc/2016-11-15/"
_REGION = re.compile(r"Credential=[^/]+/\d{8}/([a-z0-9-]+)/ec2/")

StartResponse = Callable[..., Any]
Wsgi = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def network_node_id(region: str, level: int, index: int) -> str:
    return "nn-" + hashlib.sha256(f"{region}/{level}/{index}".encode()).hexdigest()[:17]


def default_path(region: str, k: int) -> list[str]:
    """The k-th (0-based) supported instance's network nodes, top first (see the module doc)."""
    return [network_node_id(region, 1, 0), network_node_id(region, 2, k // 4), network_node_id(region, 3, k // 2)]


def _load_placements(path: Path | None) -> dict[str, list[str]]:
    if path is None or not path.is_file():
        return {}
    data = json.loads(path.read_text())
    return {str(k): [str(x) for x in v] for k, v in data.items()}


def _instances(region: str) -> list[Any]:
    """moto's instances of ``region`` in launch order (reservations keep insertion order)."""
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends

    backend = ec2_backends[DEFAULT_ACCOUNT_ID][region]
    return [i for r in backend.reservations.values() for i in r.instances]


def _zone(inst: Any) -> tuple[str, str]:
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends

    name = str(getattr(inst, "_placement", inst.placement).zone or "")
    z = ec2_backends[DEFAULT_ACCOUNT_ID][inst.region_name].get_zone_by_name(name) if name else None
    return name, (z.zone_id if z is not None else "")


def _error(code: str, message: str) -> tuple[str, bytes]:
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{code}</Code>'
        f"<Message>{escape(message)}</Message></Error></Errors><RequestID>{uuid.uuid4()}</RequestID></Response>"
    )
    return "400 Bad Request", body.encode()


def describe_instance_topology(form: dict[str, list[str]], region: str, placements: Path | None) -> tuple[str, bytes]:
    """The HTTP status and XML body of one DescribeInstanceTopology request (form fields as parsed)."""
    # EC2's query protocol flattens InstanceIds as InstanceId.1, InstanceId.2, ... (botocore's ec2 model)
    id_keys = sorted((k for k in form if re.fullmatch(r"InstanceId\.\d+", k)), key=lambda k: int(k.split(".")[1]))
    ids = [form[k][0] for k in id_keys]
    if len(ids) > MAX_IDS:
        return _error("InvalidParameterValue", f"at most {MAX_IDS} instance IDs per request, got {len(ids)}")
    max_results = form.get("MaxResults", [None])[0]
    if max_results is not None and ids:
        return _error("InvalidParameterCombination", "MaxResults can't be specified with InstanceIds")
    try:
        page = int(max_results) if max_results is not None else DEFAULT_PAGE
    except ValueError:
        return _error("InvalidParameterValue", f"MaxResults {max_results!r} is not a number")
    if not 1 <= page <= MAX_PAGE:
        return _error("InvalidParameterValue", f"MaxResults must be 1-{MAX_PAGE}, got {page}")
    token = form.get("NextToken", [None])[0]
    try:
        start = int(token) if token else 0
    except ValueError:
        return _error("InvalidNextToken", f"the token {token!r} is not valid")
    fixed = _load_placements(placements)
    rows = []
    k = 0
    for inst in _instances(region):
        if inst.instance_type not in SUPPORTED_TYPES:
            continue
        path = fixed.get(inst.id) or default_path(region, k)
        k += 1
        if inst._state.name not in ("pending", "running") or (ids and inst.id not in ids):
            continue
        rows.append((inst, path))
    chunk = rows[start : start + page]
    items = []
    for inst, path in chunk:
        az, zone_id = _zone(inst)
        nodes = "".join(f"<item>{escape(n)}</item>" for n in path)
        items.append(
            f"<item><instanceId>{inst.id}</instanceId><instanceType>{escape(inst.instance_type)}</instanceType>"
            f"<networkNodeSet>{nodes}</networkNodeSet><availabilityZone>{escape(az)}</availabilityZone>"
            f"<zoneId>{escape(zone_id)}</zoneId></item>"
        )
    nxt = f"<nextToken>{start + page}</nextToken>" if start + page < len(rows) else ""
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<DescribeInstanceTopologyResponse xmlns="{XMLNS}">'
        f"<requestId>{uuid.uuid4()}</requestId><instanceSet>{''.join(items)}</instanceSet>{nxt}"
        "</DescribeInstanceTopologyResponse>"
    )
    return "200 OK", body.encode()


class TopologyMiddleware:
    """Answers ``Action=DescribeInstanceTopology``; passes every other request to ``app``."""

    def __init__(self, app: Wsgi, placements: Path | None) -> None:
        self.app = app
        self.placements = placements

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        ctype = environ.get("CONTENT_TYPE", "")
        if environ.get("REQUEST_METHOD") == "POST" and ctype.startswith("application/x-www-form-urlencoded"):
            length = int(environ.get("CONTENT_LENGTH") or 0)
            body = environ["wsgi.input"].read(length) if length else b""
            environ["wsgi.input"] = io.BytesIO(body)  # moto reads it again
            form = parse_qs(body.decode("utf-8", "replace"))
            if form.get("Action", [""])[0] == "DescribeInstanceTopology":
                m = _REGION.search(environ.get("HTTP_AUTHORIZATION", ""))
                region = m.group(1) if m else "us-east-1"
                status, out = describe_instance_topology(form, region, self.placements)
                start_response(status, [("Content-Type", "text/xml"), ("Content-Length", str(len(out)))])
                return [out]
        return self.app(environ, start_response)


def make_app(placements: Path | None) -> TopologyMiddleware:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    return TopologyMiddleware(DomainDispatcherApplication(create_backend_app), placements)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="ec2server", description="moto's server plus DescribeInstanceTopology")
    ap.add_argument("-H", "--host", default="127.0.0.1")
    ap.add_argument("-p", "--port", type=int, default=5000)
    ap.add_argument("--placements", type=Path, default=None, help="JSON: instance id -> NetworkNodes (top first)")
    a = ap.parse_args(argv)
    os.environ.setdefault("MOTO_PORT", str(a.port))  # as moto.server does (its self-references)
    from werkzeug.serving import run_simple

    run_simple(a.host, a.port, make_app(a.placements), threaded=True)


if __name__ == "__main__":
    main()
