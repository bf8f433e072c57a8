"""DescribeInstanceTopology for a botocore that predates it, through botocore's own signer.

botocore learned DescribeInstanceTopology in 1.32 (Nov 2023); Debian 12's python3-botocore is
1.29 and Ubuntu 22.04's older still, so on those controllers the client has no
``describe_instance_topology``. This module sends the same EC2 Query request the newer client
would (``Action=DescribeInstanceTopology&Version=2016-11-15&InstanceId.N=...&NextToken=...``),
signed with botocore's SigV4 signer and the client's own credentials, region and endpoint, and
turns the documented XML answer (``instanceSet/item`` with ``networkNodeSet/item``, ``nextToken``;
errors as ``Response/Errors/Error``) into the client's dict shape. Shipped to the controller with
the cloud agent (clusterforge/aws/bundle.py); ``ec2topology`` uses it only when the client lacks
the operation. Tested against the stand-in, whose XML is built from botocore's current model.
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from typing import Any

API_VERSION = "2016-11-15"
TIMEOUT_S = 20.0


class Ec2QueryError(RuntimeError):
    """EC2 answered with an error (``code`` as AWS spells it, e.g. ``UnauthorizedOperation``)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"DescribeInstanceTopology: {code}: {message}")
        self.code = code


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]  # EC2 answers in its versioned XML namespace


def _child(el: ET.Element, name: str) -> ET.Element | None:
    return next((c for c in el if _local(c.tag) == name), None)


def _text(el: ET.Element, name: str) -> str | None:
    c = _child(el, name)
    return c.text if c is not None and c.text is not None else None


def parse(xml: bytes) -> dict[str, Any]:
    """The XML answer as the client's response dict (``Instances``, ``NextToken``)."""
    root = ET.fromstring(xml)
    if _local(root.tag) == "Response":  # the Query protocol's error document
        err = next((e for e in root.iter() if _local(e.tag) == "Error"), None)
        code = _text(err, "Code") if err is not None else None
        msg = _text(err, "Message") if err is not None else None
        raise Ec2QueryError(code or "Unknown", msg or ET.tostring(root, encoding="unicode")[:300])
    out: dict[str, Any] = {"Instances": []}
    items = _child(root, "instanceSet")
    for item in items if items is not None else []:
        inst: dict[str, Any] = {}
        for key, tag in (("InstanceId", "instanceId"), ("InstanceType", "instanceType"), ("GroupName", "groupName"),
                         ("AvailabilityZone", "availabilityZone"), ("ZoneId", "zoneId"),
                         ("CapacityBlockId", "capacityBlockId")):
            if (v := _text(item, tag)) is not None:
                inst[key] = v
        nodes = _child(item, "networkNodeSet")
        inst["NetworkNodes"] = [n.text or "" for n in nodes] if nodes is not None else []
        out["Instances"].append(inst)
    if token := _text(root, "nextToken"):
        out["NextToken"] = token
    return out


def describe_instance_topology(ec2: Any, **kw: Any) -> dict[str, Any]:
    """``ec2.describe_instance_topology(**kw)`` for a client whose botocore lacks it
    (``InstanceIds``, ``NextToken``, ``MaxResults`` as the API takes them)."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    params: dict[str, str] = {"Action": "DescribeInstanceTopology", "Version": API_VERSION}
    for i, iid in enumerate(kw.get("InstanceIds") or [], 1):
        params[f"InstanceId.{i}"] = str(iid)
    for key in ("NextToken", "MaxResults"):
        if kw.get(key) is not None:
            params[key] = str(kw[key])
    creds = ec2._request_signer._credentials  # the client's own provider chain (IMDS on EC2)
    if creds is None:
        raise Ec2QueryError("NoCredentials", "no AWS credentials found (instance profile, environment or config)")
    req = AWSRequest(method="POST", url=ec2.meta.endpoint_url, data=urllib.parse.urlencode(params),
                     headers={"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"})
    SigV4Auth(creds.get_frozen_credentials(), "ec2", ec2.meta.region_name).add_auth(req)
    prepared = req.prepare()
    body = prepared.body.encode() if isinstance(prepared.body, str) else prepared.body
    http = urllib.request.Request(prepared.url, data=body, method="POST",
                                  headers=dict(prepared.headers.items()))
    try:
        with urllib.request.urlopen(http, timeout=TIMEOUT_S) as r:
            return parse(r.read())
    except urllib.error.HTTPError as e:  # 4xx/5xx carry the error document
        return parse(e.read())
