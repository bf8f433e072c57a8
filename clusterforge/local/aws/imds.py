"""A stand-in for the EC2 instance metadata service (IMDSv2), one per emulated instance.

Run as ``python3 -m clusterforge.local.aws.imds --bind ADDR --port PORT --data FILE``; the local
cluster runs it inside each node's network namespace on 169.254.169.254:80, so a node's boto3,
cloud-init-like user data and ``curl`` reach it exactly as on EC2. It answers from FILE, re-read
on every request, so the emulator changes tags or posts a spot notice by rewriting it
(:func:`write_data`, atomic) while the node runs.

IMDSv2 as EC2 implements it (launch templates of the plan set ``http_tokens = "required"``):

* ``PUT /latest/api/token`` with ``X-aws-ec2-metadata-token-ttl-seconds: 1..21600`` returns a
  session token (400 when the header is missing or out of range); a PUT carrying
  ``X-Forwarded-For`` is refused (403): EC2 rejects token requests that went through a proxy.
* every GET needs a valid, unexpired ``X-aws-ec2-metadata-token`` (401 otherwise);
  other methods are 405; unknown paths 404.

Sources: EC2 User Guide, "Use the Instance Metadata Service to access instance metadata"
(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/configuring-instance-metadata-service.html)
and its error-code table (instancedata-data-retrieval.html); the TTL bounds also in
https://docs.purpleclay.dev/imds-mock/configure/imdsv2; what the SDK sends and expects:
botocore/utils.py ``IMDSFetcher`` (token PUT with TTL 21600; 403/404/405 make it fall back to
IMDSv1, 400 is an error) and ``InstanceMetadataRegionFetcher`` (GETs
``meta-data/placement/availability-zone/`` with a trailing slash, so paths are matched with
and without one).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import secrets
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = ["MAX_TTL", "InstanceData", "SpotAction", "make_server", "read_data", "resolve", "write_data"]

TOKEN_PATH = "/latest/api/token"
TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "X-aws-ec2-metadata-token"
MAX_TTL = 21600  # six hours, EC2's maximum session-token lifetime


@dataclass(frozen=True)
class SpotAction:
    """A spot interruption notice as EC2 serves it at ``meta-data/spot/instance-action``."""

    action: str  # "terminate" | "stop" | "hibernate"
    time: str  # ISO 8601 UTC, e.g. "2026-01-01T00:02:00Z": when the action happens


@dataclass(frozen=True)
class InstanceData:
    """What one instance's metadata service knows: the JSON shape of the data file."""

    instance_id: str
    instance_type: str
    local_ipv4: str
    region: str
    availability_zone: str
    mac: str = "02:00:00:00:00:01"
    account_id: str = "123456789012"  # moto's default account
    tags: dict[str, str] = field(default_factory=dict)
    # EC2 serves tags only when the instance's metadata options enable it (InstanceMetadataTags).
    instance_metadata_tags: bool = True
    user_data: str = ""  # plain text, as the instance received it
    role: str = "clusterforge-node"  # instance-profile role name
    # Fake but well-formed: moto accepts any key pair, botocore only checks that they are present.
    access_key_id: str = "EMULATEDLOCALACCESSKEY"
    secret_access_key: str = "emulated-local-secret-access-key"  # not a secret: moto's fake
    session_token: str = "emulated-local-session-token"  # not a secret: moto's fake
    spot_action: SpotAction | None = None
    maintenance_events: list[dict[str, Any]] = field(default_factory=list)


def write_data(path: Path, data: InstanceData) -> None:
    """Write ``data`` to ``path`` atomically (a temporary file in the same folder, renamed), so a
    request that re-reads the file never sees half of it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(dataclasses.asdict(data), indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def read_data(path: Path) -> InstanceData:
    """The data file as :class:`InstanceData`; ``ValueError`` naming the file when it does not fit."""
    try:
        raw = json.loads(path.read_text())
        spot = raw.pop("spot_action", None)
        return InstanceData(**raw, spot_action=SpotAction(**spot) if spot else None)
    except (OSError, json.JSONDecodeError, TypeError) as exc:
        raise ValueError(f"{path}: not an instance-metadata data file ({exc}); write it with write_data()") from None


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _credentials(d: InstanceData) -> str:
    now = datetime.now(UTC)
    return json.dumps(
        {
            "Code": "Success",
            "LastUpdated": _iso(now),
            "Type": "AWS-HMAC",
            "AccessKeyId": d.access_key_id,
            "SecretAccessKey": d.secret_access_key,
            "Token": d.session_token,
            # Six hours ahead, as EC2 does: botocore refreshes before it, never mid-test.
            "Expiration": _iso(now + timedelta(hours=6)),
        },
        indent=2,
    )


def _identity(d: InstanceData) -> str:
    return json.dumps(
        {
            "accountId": d.account_id,
            "architecture": "x86_64",
            "availabilityZone": d.availability_zone,
            "imageId": "ami-emulated",
            "instanceId": d.instance_id,
            "instanceType": d.instance_type,
            "pendingTime": _iso(datetime.now(UTC)),
            "privateIp": d.local_ipv4,
            "region": d.region,
            "version": "2017-09-30",
        },
        indent=2,
    )


def resolve(d: InstanceData, path: str) -> str | None:
    """The body EC2 would serve at ``path`` (after ``/latest/``-style normalisation), or ``None``
    for a 404. Listings end a sub-tree name with ``/``, as EC2's do."""
    p = path.split("?", 1)[0].rstrip("/")
    md = "/latest/meta-data"
    tags = d.tags if d.instance_metadata_tags else None
    fixed: dict[str, str | None] = {
        "/latest": "dynamic\nmeta-data\nuser-data",
        md: "\n".join(
            ["events/", "iam/", "instance-id", "instance-type", "local-ipv4", "mac", "placement/"]
            + (["spot/"] if d.spot_action else [])
            + (["tags/"] if tags is not None else [])
        ),
        f"{md}/instance-id": d.instance_id,
        f"{md}/instance-type": d.instance_type,
        f"{md}/local-ipv4": d.local_ipv4,
        f"{md}/mac": d.mac,
        f"{md}/placement": "availability-zone\nregion",
        f"{md}/placement/availability-zone": d.availability_zone,
        f"{md}/placement/region": d.region,
        f"{md}/events": "maintenance/",
        f"{md}/events/maintenance": "scheduled",
        f"{md}/events/maintenance/scheduled": json.dumps(d.maintenance_events),
        f"{md}/iam": "security-credentials/",
        f"{md}/iam/security-credentials": d.role,
        f"{md}/iam/security-credentials/{d.role}": _credentials(d),
        "/latest/user-data": d.user_data or None,  # EC2: 404 when the instance has no user data
        "/latest/dynamic": "instance-identity/",
        "/latest/dynamic/instance-identity": "document",
        "/latest/dynamic/instance-identity/document": _identity(d),
    }
    if d.spot_action:
        fixed[f"{md}/spot"] = "instance-action"
        fixed[f"{md}/spot/instance-action"] = json.dumps(dataclasses.asdict(d.spot_action))
    if tags is not None:
        fixed[f"{md}/tags"] = "instance"
        fixed[f"{md}/tags/instance"] = "\n".join(sorted(tags))
        for k, v in tags.items():
            fixed[f"{md}/tags/instance/{k}"] = v
    return fixed.get(p)


class _Tokens:
    """Issued session tokens and their expiry (monotonic clock), shared by the server's threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._expiry: dict[str, float] = {}

    def issue(self, ttl: int) -> str:
        token = secrets.token_urlsafe(32)
        now = time.monotonic()
        with self._lock:
            self._expiry = {t: e for t, e in self._expiry.items() if e > now}  # drop the expired
            self._expiry[token] = now + ttl
        return token

    def valid(self, token: str | None) -> bool:
        with self._lock:
            return token is not None and self._expiry.get(token, 0.0) > time.monotonic()


class _Handler(BaseHTTPRequestHandler):
    server: _ImdsServer
    server_version = "EC2ws"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per request is written by _send instead (method, path, status)

    def _send(self, status: int, body: str = "", headers: dict[str, str] | None = None) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        print(f"imds {self.command} {self.path} {status}", file=sys.stderr, flush=True)

    def do_PUT(self) -> None:  # http.server dispatches on do_<METHOD>
        if self.path.split("?", 1)[0] != TOKEN_PATH:
            self._send(405)
            return
        if self.headers.get("X-Forwarded-For") is not None:
            self._send(403)  # a token request that went through a proxy is refused
            return
        raw = self.headers.get(TTL_HEADER)
        try:
            ttl = int(raw) if raw is not None else 0
        except ValueError:
            ttl = 0
        if not 1 <= ttl <= MAX_TTL:
            self._send(400)
            return
        self._send(200, self.server.tokens.issue(ttl), {TTL_HEADER: str(ttl)})

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] == TOKEN_PATH:
            self._send(405)  # the token is only ever PUT
            return
        if not self.server.tokens.valid(self.headers.get(TOKEN_HEADER)):
            self._send(401)  # http_tokens=required: no IMDSv1
            return
        try:
            body = resolve(read_data(self.server.data_path), self.path)
        except ValueError as exc:
            print(f"imds: {exc}", file=sys.stderr, flush=True)
            self._send(500)
            return
        if body is None:
            self._send(404)
        else:
            self._send(200, body)

    def _not_allowed(self) -> None:
        self._send(405)

    do_POST = do_DELETE = do_PATCH = do_HEAD = _not_allowed


class _ImdsServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], data_path: Path) -> None:
        super().__init__(address, _Handler)
        self.data_path = data_path
        self.tokens = _Tokens()


def make_server(bind: str, port: int, data_path: Path) -> ThreadingHTTPServer:
    """A bound, not yet serving stand-in (``port=0`` picks a free one: ``server.server_address``)."""
    return _ImdsServer((bind, port), data_path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m clusterforge.local.aws.imds", description=__doc__.split("\n")[0])
    ap.add_argument("--bind", default="169.254.169.254")
    ap.add_argument("--port", type=int, default=80)
    ap.add_argument("--data", type=Path, required=True, help="instance data JSON (write_data), re-read per request")
    args = ap.parse_args(argv)
    try:
        read_data(args.data)  # fail at start, not at the first request, on a bad file
        server = make_server(args.bind, args.port, args.data)
    except (ValueError, OSError) as exc:
        print(f"imds: {exc}", file=sys.stderr)
        return 2
    print(f"imds: serving {args.data} on {args.bind}:{server.server_address[1]}", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
