"""The boot-time node-name claim (clusterforge/aws/nodename.py) against moto's in-process DynamoDB
and EC2, with a small IMDSv2 stand-in on loopback for ``main``. Expected names are written out."""

from __future__ import annotations

import ast
import http.server
import json
import os
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from clusterforge import hostlist
from clusterforge.aws import nodename, outputs
from clusterforge.aws.nodename import ClaimError, claim, holders, release
from clusterforge.aws.userdata import USER_DATA_LIMIT, claim_source, user_data
from clusterforge.clusterspec.loader import load_spec
from clusterforge.clusterspec.models import Cluster

ROOT = Path(__file__).resolve().parents[1]
TABLE = "c1-node-names"
GPU4 = ["gpu-001", "gpu-002", "gpu-003", "gpu-004"]


@pytest.fixture()
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Any]]:
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    # moto accepts any image id; loading its catalogue of real AMIs costs seconds per test.
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    with mock_aws():
        ddb = boto3.client("dynamodb", region_name="us-east-1")
        ddb.create_table(
            TableName=TABLE,
            KeySchema=[{"AttributeName": "name", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "name", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        yield ddb, boto3.client("ec2", region_name="us-east-1")


def launch(ec2: Any, n: int = 1, tags: dict[str, str] | None = None) -> list[str]:
    tags = {"clusterforge:cluster": "c1", "clusterforge:group": "gpu", "Name": "c1-gpu"} if tags is None else tags
    spec = [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}] if tags else []
    r = ec2.run_instances(ImageId="ami-12c6146b", MinCount=n, MaxCount=n, InstanceType="t3.micro", TagSpecifications=spec)
    return [i["InstanceId"] for i in r["Instances"]]


def tags_of(ec2: Any, iid: str) -> dict[str, str]:
    inst = ec2.describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0]
    return {t["Key"]: t["Value"] for t in inst.get("Tags", [])}


def do_claim(ddb: Any, ec2: Any, iid: str, names: list[str] = GPU4) -> str:
    return claim(ddb, ec2, table=TABLE, group="gpu", names=names, instance_id=iid, address="10.0.0.9", deadline_s=30)


def owners(ddb: Any) -> dict[str, str]:
    return {n: str(item["instance_id"]) for n, item in holders(ddb, table=TABLE).items()}


# ------------------------------------------------------------------------------------ claim()


def test_four_instances_claim_four_names_in_order_and_again_the_same(aws: tuple[Any, Any]) -> None:
    ddb, ec2 = aws
    ids = launch(ec2, 4)
    assert [do_claim(ddb, ec2, i) for i in ids] == ["gpu-001", "gpu-002", "gpu-003", "gpu-004"]
    assert owners(ddb) == dict(zip(GPU4, ids, strict=True))
    item = holders(ddb, table=TABLE)["gpu-002"]
    assert (item["group"], item["address"], type(item["claimed_at"])) == ("gpu", "10.0.0.9", int)
    # A rerun (user data retried, or a reboot before the first run finished) keeps the name.
    assert do_claim(ddb, ec2, ids[1]) == "gpu-002"
    assert owners(ddb) == dict(zip(GPU4, ids, strict=True))


def test_a_terminated_holders_name_is_taken_over_a_live_ones_never(aws: tuple[Any, Any]) -> None:
    ddb, ec2 = aws
    a, b = launch(ec2, 2)
    names = ["gpu-001", "gpu-002"]
    assert [do_claim(ddb, ec2, a, names), do_claim(ddb, ec2, b, names)] == ["gpu-001", "gpu-002"]
    ec2.terminate_instances(InstanceIds=[a])
    (c,) = launch(ec2)
    assert do_claim(ddb, ec2, c, names) == "gpu-001"
    assert owners(ddb) == {"gpu-001": c, "gpu-002": b}


def test_a_holder_aws_no_longer_lists_counts_as_gone(aws: tuple[Any, Any]) -> None:
    ddb, ec2 = aws
    ddb.put_item(TableName=TABLE, Item={"name": {"S": "gpu-001"}, "group": {"S": "gpu"},
                                        "instance_id": {"S": "i-0000000000forgotten"}})
    (c,) = launch(ec2)
    assert do_claim(ddb, ec2, c, ["gpu-001"]) == "gpu-001"


def test_group_full_is_a_claim_error_naming_the_fix(aws: tuple[Any, Any]) -> None:
    ddb, ec2 = aws
    a, b, c = launch(ec2, 3)
    names = ["gpu-001", "gpu-002"]
    do_claim(ddb, ec2, a, names)
    do_claim(ddb, ec2, b, names)
    with pytest.raises(ClaimError) as exc:
        do_claim(ddb, ec2, c, names)
    held = ", ".join(sorted([a, b]))
    assert str(exc.value) == (
        f"all 2 names of group gpu are held by live instances: {held}; the group has more instances than "
        "hostnames: raise its hostlist or lower its count"
    )
    assert exc.value.code == 3
    assert owners(ddb) == {"gpu-001": a, "gpu-002": b}


def test_losing_the_race_between_scan_and_put_moves_to_the_next_name(aws: tuple[Any, Any]) -> None:
    ddb, ec2 = aws
    me, rival = launch(ec2, 2)
    real = ddb.get_paginator

    def paginator(op: str) -> Any:
        pag = real(op)
        pages = list(pag.paginate(TableName=TABLE, ConsistentRead=True))  # the scan sees gpu-001 free...
        # ...then the rival's claim lands before ours is written.
        ddb.put_item(TableName=TABLE, Item={"name": {"S": "gpu-001"}, "instance_id": {"S": rival}})
        ddb.get_paginator = real

        class Stale:
            def paginate(self, **_: Any) -> list[Any]:
                return pages

        return Stale()

    ddb.get_paginator = paginator
    assert do_claim(ddb, ec2, me) == "gpu-002"
    assert owners(ddb) == {"gpu-001": rival, "gpu-002": me}


def test_racing_claims_in_threads_never_share_a_name(aws: tuple[Any, Any]) -> None:
    ddb, ec2 = aws
    ids = launch(ec2, 4)
    got: dict[str, str] = {}

    def run(i: str) -> None:
        got[i] = do_claim(ddb, ec2, i)

    threads = [threading.Thread(target=run, args=(i,)) for i in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(got.values()) == ["gpu-001", "gpu-002", "gpu-003", "gpu-004"]
    assert owners(ddb) == {name: i for i, name in got.items()}


def _flaky(fn: Any, code: str, failures: int) -> Any:
    calls = {"n": 0}

    def wrapped(**kw: Any) -> Any:
        calls["n"] += 1
        if calls["n"] <= failures:
            raise ClientError({"Error": {"Code": code, "Message": "Rate of requests exceeds the allowed throughput."}},
                              "PutItem")
        return fn(**kw)

    return wrapped


def test_throttling_is_retried_then_succeeds(aws: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    ddb, ec2 = aws
    monkeypatch.setattr(time, "sleep", lambda s: None)
    (i,) = launch(ec2)
    ddb.put_item = _flaky(ddb.put_item, "ProvisionedThroughputExceededException", 2)
    ec2.describe_instances = _flaky(ec2.describe_instances, "RequestLimitExceeded", 1)
    assert do_claim(ddb, ec2, i) == "gpu-001"


def test_persistent_throttling_is_a_claim_error(aws: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    ddb, ec2 = aws
    monkeypatch.setattr(time, "sleep", lambda s: None)
    (i,) = launch(ec2)
    ddb.put_item = _flaky(ddb.put_item, "ThrottlingException", 10**6)
    with pytest.raises(ClaimError, match=r"^AWS API still failing after 5 tries: ThrottlingException: Rate of") as exc:
        do_claim(ddb, ec2, i)
    assert exc.value.code == 4


def test_release_only_releases_while_still_held(aws: tuple[Any, Any]) -> None:
    ddb, ec2 = aws
    a, b = launch(ec2, 2)
    do_claim(ddb, ec2, a)
    assert release(ddb, table=TABLE, name="gpu-001", instance_id=b) is False
    assert owners(ddb) == {"gpu-001": a}
    assert release(ddb, table=TABLE, name="gpu-001", instance_id=a) is True
    assert owners(ddb) == {}
    assert release(ddb, table=TABLE, name="gpu-001", instance_id=a) is False


# ------------------------------------------------------------------------------------- main()


class Imds(http.server.BaseHTTPRequestHandler):
    meta: dict[str, str] = {}

    def do_PUT(self) -> None:
        ok = self.path == "/latest/api/token" and "X-aws-ec2-metadata-token-ttl-seconds" in self.headers
        self._send(200 if ok else 400, "tok-1")

    def do_GET(self) -> None:
        value = self.meta.get(self.path.removeprefix("/latest/meta-data/"))
        if self.headers.get("X-aws-ec2-metadata-token") != "tok-1":
            self._send(401, "")
        else:
            self._send(200 if value else 404, value or "")

    def _send(self, code: int, body: str) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def node(aws: tuple[Any, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """One launched instance, its IMDS on loopback and a root directory with node.json."""
    ddb, ec2 = aws
    (iid,) = launch(ec2)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), type("H", (Imds,), {"meta": {}}))
    server.RequestHandlerClass.meta.update({"instance-id": iid, "local-ipv4": "10.0.0.7"})  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("CLUSTERFORGE_IMDS_URL", f"http://127.0.0.1:{server.server_address[1]}")
    (tmp_path / "etc/clusterforge").mkdir(parents=True)
    cfg = {"cluster": "c1", "group": "gpu", "role": "compute", "region": "us-east-1", "table": TABLE,
           "hostlist": "gpu-[001-004]"}
    write_cfg(tmp_path, cfg)
    yield {"ddb": ddb, "ec2": ec2, "iid": iid, "root": tmp_path, "cfg": cfg}
    server.shutdown()
    server.server_close()


def write_cfg(root: Path, cfg: dict[str, Any]) -> None:
    (root / "etc/clusterforge/node.json").write_text(json.dumps(cfg))


def run_main(node: dict[str, Any], capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    code = nodename.main(["--root", str(node["root"]), "--deadline", "30", *extra])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def test_main_claims_tags_writes_the_name_and_sets_the_hostname(
    node: dict[str, Any], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    set_to: list[str] = []
    monkeypatch.setattr(nodename.socket, "sethostname", set_to.append)
    node["ec2"].create_tags(Resources=[node["iid"]], Tags=[{"Key": "clusterforge:claim-error", "Value": "old"}])
    assert run_main(node, capsys) == (0, "gpu-001\n", "")
    root = node["root"]
    assert (root / "etc/clusterforge/node-name").read_text() == "gpu-001\n"
    assert (root / "etc/hostname").read_text() == "gpu-001\n"
    assert set_to == ["gpu-001"]
    assert tags_of(node["ec2"], node["iid"]) == {
        "clusterforge:cluster": "c1", "clusterforge:group": "gpu", "clusterforge:hostname": "gpu-001", "Name": "c1-gpu-001",
    }
    assert holders(node["ddb"], table=TABLE)["gpu-001"]["address"] == "10.0.0.7"
    assert sorted(p.name for p in (root / "etc/clusterforge").iterdir()) == ["node-name", "node.json"]  # no tmp left


def test_main_head_node_claims_nothing_and_keeps_its_name_tag(
    node: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    write_cfg(node["root"], {"cluster": "c1", "group": "gpu", "role": "controller", "region": "us-east-1",
                             "hostname": "head-001"})
    assert run_main(node, capsys, "--no-hostname") == (0, "head-001\n", "")
    assert tags_of(node["ec2"], node["iid"])["clusterforge:hostname"] == "head-001"
    assert tags_of(node["ec2"], node["iid"])["Name"] == "c1-gpu"
    assert holders(node["ddb"], table=TABLE) == {}
    assert not (node["root"] / "etc/hostname").exists()


def test_main_missing_node_json_fields_exit_2(node: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    write_cfg(node["root"], {"cluster": "c1", "group": "gpu", "role": "compute", "region": "us-east-1"})
    code, out, err = run_main(node, capsys, "--no-hostname")
    path = node["root"] / "etc/clusterforge/node.json"
    assert (code, out) == (2, "")
    assert err == (f"clusterforge-claim: error: {path} lacks table, hostlist: user data from an older clusterforge? "
                   "run pulumi up\n")
    (path).unlink()
    code, _, err = run_main(node, capsys, "--no-hostname")
    assert code == 2 and err.startswith(f"clusterforge-claim: error: cannot read {path}: ")


def test_main_missing_instance_tags_exit_2(node: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    node["ec2"].delete_tags(Resources=[node["iid"]], Tags=[{"Key": "clusterforge:group"}])
    code, _, err = run_main(node, capsys, "--no-hostname")
    assert code == 2
    assert err == (f"clusterforge-claim: error: instance {node['iid']} lacks tag clusterforge:group=gpu: "
                   "the launch template must tag instances\n")
    assert holders(node["ddb"], table=TABLE) == {}
    assert tags_of(node["ec2"], node["iid"])["clusterforge:claim-error"] == err.split("error: ", 1)[1].strip()


def test_main_group_full_exit_3_and_tags_the_reason(node: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    other = launch(node["ec2"])[0]
    do_claim(node["ddb"], node["ec2"], other, ["gpu-001"])
    write_cfg(node["root"], {**node["cfg"], "hostlist": "gpu-001"})
    code, _, err = run_main(node, capsys, "--no-hostname")
    assert code == 3
    assert err.startswith(f"clusterforge-claim: error: all 1 names of group gpu are held by live instances: {other};")
    assert tags_of(node["ec2"], node["iid"])["clusterforge:claim-error"].startswith("all 1 names of group gpu")


def test_main_imds_unreachable_exit_4_within_the_bound(
    node: dict[str, Any], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("CLUSTERFORGE_IMDS_URL", f"http://127.0.0.1:{port}")
    t0 = time.monotonic()
    code, _, err = run_main(node, capsys, "--no-hostname")
    assert time.monotonic() - t0 < 10
    assert code == 4
    assert err.startswith(f"clusterforge-claim: error: instance metadata http://127.0.0.1:{port}/latest/ unreachable "
                          "after 3 tries: ")


def test_main_persistent_dynamodb_throttling_exit_4(
    node: dict[str, Any], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(time, "sleep", lambda s: None)
    real = boto3.client

    def client(service: str, **kw: Any) -> Any:
        c = real(service, **kw)
        if service == "dynamodb":
            c.put_item = _flaky(c.put_item, "ProvisionedThroughputExceededException", 10**6)
        return c

    monkeypatch.setattr(boto3, "client", client)
    code, _, err = run_main(node, capsys, "--no-hostname")
    assert code == 4
    assert err == ("clusterforge-claim: error: AWS API still failing after 5 tries: ProvisionedThroughputExceededException: "
                   "Rate of requests exceeds the allowed throughput.\n")
    assert tags_of(node["ec2"], node["iid"])["clusterforge:claim-error"].startswith("AWS API still failing")


# ----------------------------------------------------------------------- the shipped file itself


HOSTLISTS = [
    "gpu-[001-016]", "a[1-3],b-[01-02]", "gpu-001", "n[9-11],login", "r[1-2]n[01-02]", "x[0-3,7,010-012]",
    "node[098-101]", "a,b,c", "dgx-[001-003],cpu1", "p5-training-gpu-[1-2]",
]


def test_expand_matches_the_hostlist_codec() -> None:
    assert nodename.expand("gpu-[001-004]") == ["gpu-001", "gpu-002", "gpu-003", "gpu-004"]
    assert nodename.expand("a[1-3],b-[01-02]") == ["a1", "a2", "a3", "b-01", "b-02"]
    rng = random.Random(12)
    generated = []
    for _ in range(300):  # compressed forms of random name sets: what user data actually carries
        width = rng.choice([0, 2, 3, 4])
        nums = rng.sample(range(0, 1200), rng.randint(1, 40))
        names = [f"{rng.choice(['gpu-', 'n', 'cpu', 'a1b'])}{str(n).zfill(width)}" for n in nums]
        generated.append(hostlist.compress(names + rng.sample(["login", "head-001", "x"], rng.randint(0, 2))))
    for expr in HOSTLISTS + generated:
        assert nodename.expand(expr) == hostlist.expand(expr), expr


def test_expand_refuses_what_it_cannot_read() -> None:
    for bad in ("gpu-[a-b]", "gpu-[3-1x]", "gpu-[1-2000000]"):
        with pytest.raises(ClaimError) as exc:
            nodename.expand(bad)
        assert exc.value.code == 2


def test_the_claim_file_is_standalone_and_small() -> None:
    src = claim_source()
    assert src.startswith("#!/usr/bin/env python3\n")
    mods = {
        (n.module if isinstance(n, ast.ImportFrom) else a.name).split(".")[0]  # type: ignore[union-attr]
        for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Import | ast.ImportFrom)
        for a in n.names
    }
    assert mods == {"__future__", "argparse", "json", "os", "re", "socket", "sys", "time", "urllib", "typing",
                    "boto3", "botocore"}
    # Shipped verbatim in user data next to the shell part; 12 KB leaves 4 KB of the 16 KB cap.
    assert len(src.encode()) < 12 * 1024
    assert (nodename.TAG_HOSTNAME, nodename.TAG_CLAIM_ERROR) == (outputs.TAG_HOSTNAME, outputs.TAG_CLAIM_ERROR)
    assert outputs.names_table("p5-training") == "p5-training-node-names"


def _cloud_groups() -> list[tuple[Cluster, Any]]:
    out = []
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        spec = load_spec(path)
        if spec.aws is not None:
            out += [(spec, g) for g in spec.node_groups if g.cloud is not None]
    return out


def test_user_data_of_every_example_group_fits_the_aws_limit() -> None:
    sizes = []
    for spec, g in _cloud_groups():
        assert spec.aws is not None
        script = user_data(cluster=spec.name, group=g.name, role=g.role, os=spec.os, region=spec.aws.region,
                           table=outputs.names_table(spec.name), hostlist=hostlist.compress(g.hostnames),
                           hostname=g.hostnames[0] if g.role != "compute" else None)
        assert claim_source() in script  # verbatim
        sizes.append(len(script.encode()))
    assert len(sizes) >= 4 and max(sizes) < USER_DATA_LIMIT == 16384


def test_user_data_runs_the_claim_bounded_and_fails_with_it(tmp_path: Path) -> None:
    script = user_data(cluster="c1", group="gpu", role="compute", os="ubuntu-22.04", region="us-east-1",
                       table="c1-node-names", hostlist="gpu-[001-004]")
    assert '{"cluster": "c1", "group": "gpu", "hostlist": "gpu-[001-004]", "region": "us-east-1", "role": "compute", "table": "c1-node-names"}' in script
    assert "apt-get install -y -q python3 python3-apt python3-boto3" in script
    assert "timeout 300 /usr/local/sbin/clusterforge-claim-name 2>&1 | tee -a /var/log/clusterforge/claim.log" in script
    assert "chmod 0755 /usr/local/sbin/clusterforge-claim-name" in script
    assert "amazon-ssm-agent" in script
    # The heredoc carries the file byte for byte: cut it out the way bash would and compare.
    body = script.split("<<'CLUSTERFORGE_CLAIM_EOF'\n", 1)[1].split("\nCLUSTERFORGE_CLAIM_EOF\n", 1)[0] + "\n"
    assert body == claim_source()
    assert os.system(f"bash -n {_save(tmp_path, script)}") == 0


def _save(tmp: Path, text: str) -> Path:
    p = tmp / "ud.sh"
    p.write_text(text)
    return p
