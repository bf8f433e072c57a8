"""Reusable typed fields of the cluster spec.

Each alias validates once, where the value enters, so the models and the rules that use them can
trust the value (a ``Cidr`` is a real network, a ``Hostlist`` expands).
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
import unicodedata
from typing import Annotated, Any, Literal

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
        hostlist.count(v)
    except hostlist.HostlistError as exc:
        raise ValueError(f"{exc}; write host sets like dgx-[001-032] or node1,node2") from None
    return v


_DNS_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")


def _hostnames(v: str) -> str:
    # A label's check minds the characters and the length, not which digits: a range's edge names
    # stand for it (hostlist.edge_names), so 65,536 hosts are not listed to check them. Only a bad
    # one lists them, for the first bad name in the spec's order.
    if all(_DNS_LABEL.fullmatch(name) for name in hostlist.edge_names(v)):
        return v
    for name in hostlist.expand(v):
        if not _DNS_LABEL.fullmatch(name):
            raise ValueError(
                f"host name {name!r} is not a valid lower-case DNS label (letters, digits, '-'; "
                "at most 63 characters; no leading or trailing '-')"
            )
    return v


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _addresses(v: str) -> str:
    # a range's edge addresses stand for it, as a label's edge names do (hostlist.edge_names: the
    # last part of an address is good up to a bound, its leading zeros fixed by its digit count)
    if all(_is_address(addr) for addr in hostlist.edge_names(v)):
        return v
    for addr in hostlist.expand(v):
        if not _is_address(addr):
            raise ValueError(f"{addr!r} is not an IP address; write addresses like 10.10.1.[1-32]")
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


def normal_path_problem(v: str) -> str | None:
    """Why ``v`` is not an absolute, normalised path, or None when it is.

    The roles create, chown, format and mount these paths, and the rules compare them as text (a
    state folder under a storage mount, a mount on a system folder): ``/srv/../etc`` reads as a
    folder under /srv but is /etc, ``//etc`` and ``/etc/`` are /etc spelled so that no comparison
    finds it."""
    if not v.startswith("/"):
        return "it is not absolute (the roles run from no particular folder); start it with '/'"
    if "//" in v:
        return "'//' names the same folder as '/' but hides it from comparisons; write one '/'"
    if len(v) > 1 and v.endswith("/"):
        return "a trailing '/' hides the folder from comparisons with the same path; drop it"
    parts = v.split("/")
    if ".." in parts or "." in parts:
        return (
            f"'.' and '..' make it another folder than it reads as (it is {posixpath.normpath(v)!r}); "
            "write the path it means"
        )
    return None


def _normal_path(v: str) -> str:
    why = normal_path_problem(v)
    if why is not None:
        raise ValueError(f"{v!r} is not an absolute, normalised path: {why}")
    return v


def _s3_bucket(v: str) -> str:
    """AWS's naming rules for general purpose buckets (Amazon S3 User Guide, "General purpose
    bucket naming rules", docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html):
    3-63 characters of lowercase letters, digits, '.' and '-'; begins and ends with a letter or
    digit; no two adjacent periods; not formatted as an IP address; none of the reserved prefixes
    (xn--, sthree-, amzn-s3-demo-) or suffixes (-s3alias, --ol-s3, .mrap, --x-s3, --table-s3).
    The instance roles' IAM policy names the bucket in its ARN, so a wildcard such as '*' would
    grant every bucket the account can reach."""
    why = None
    if not re.fullmatch(r"[a-z0-9.-]*", v):
        why = (
            "a bucket name holds only lowercase letters, digits, '.' and '-' (a '*' or other wildcard "
            "would let the instance roles read every bucket the account can reach)"
        )
    elif not 3 <= len(v) <= 63:
        why = f"it has {len(v)} characters; a bucket name has 3 to 63"
    elif not (v[0].isalnum() and v[-1].isalnum()):
        why = "a bucket name begins and ends with a letter or digit"
    elif ".." in v:
        why = "a bucket name has no two adjacent periods"
    elif re.fullmatch(r"\d+\.\d+\.\d+\.\d+", v):
        why = "a bucket name is not formatted as an IP address"
    else:
        for pre in ("xn--", "sthree-", "amzn-s3-demo-"):
            if v.startswith(pre):
                why = f"the prefix {pre!r} is reserved by AWS"
        for suf in ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"):
            if v.endswith(suf):
                why = f"the suffix {suf!r} is reserved by AWS (access point, Object Lambda, directory or table buckets)"
    if why is not None:
        raise ValueError(
            f"{v!r} is not an S3 bucket name: {why} (AWS's bucket naming rules); give the name of the bucket "
            "itself, e.g. my-datasets"
        )
    return v


def control_char_problem(text: str) -> str | None:
    """Where ``text`` holds a newline or another control character, or None.

    Every string of the spec ends up on one line of a rendered config (slurm.conf, slurmdbd.conf,
    gres.conf, nccl.conf, ...), an Ansible variable or a shell script; a newline there would start
    a line of its own: ``extra_conf: {MailProg: "/bin/true\\nAuthType=auth/none"}`` would add a
    setting no rule has seen (config injection). Unicode's line and paragraph separators end a
    line for some readers too."""
    for i, ch in enumerate(text):
        if unicodedata.category(ch) == "Cc" or ch in "\u2028\u2029":
            return f"{ch!r} (a control character) at position {i}"
    return None


def one_line(v: Any) -> Any:
    """``v`` unchanged when no string in it (list items, mapping keys and values) holds a control
    character; else a ValueError naming the string, the character and why (see
    ``control_char_problem``). Nested models check their own fields."""
    items: list[Any]
    if isinstance(v, str):
        items = [v]
    elif isinstance(v, (list, tuple)):
        items = list(v)
    elif isinstance(v, dict):
        items = [x for kv in v.items() for x in kv]
    else:
        return v
    for x in items:
        if isinstance(x, str):
            where = control_char_problem(x)
            if where is not None:
                raise ValueError(
                    f"{x!r} holds {where}: every spec value is written into a config file (slurm.conf, "
                    "nccl.conf, slurmdbd.conf, ...) or a script as one line, where a newline would start a line "
                    "of its own (config injection); write the value on one line without control characters"
                )
        elif isinstance(x, (list, tuple, dict)):
            one_line(x)
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
    str,
    StringConstraints(pattern=r"^/[A-Za-z0-9._/-]*$"),
    AfterValidator(_normal_path),
    Field(description="absolute, normalised path on the nodes (no '..', '//' or trailing '/')"),
]
PositiveInt = Annotated[int, Field(gt=0)]

#: Slurm reads at most 64K hosts in one hostlist range (src/common/hostlist.h@slurm-24-11-5-1:
#: ``#define MAX_RANGE MAX_SLURM_NODES /* 64K Hosts */``, slurm/slurm.h: 65536); a node group's
#: NodeName line is one, so a count above it cannot be rendered. Bounding the field also makes a
#: count of 10**30 an error at once instead of a list of 10**30 names.
MAX_HOSTS = 65536


def _host_count(v: int) -> int:
    if v > MAX_HOSTS:
        raise ValueError(
            f"count {v} is over {MAX_HOSTS}: Slurm reads at most {MAX_HOSTS} hosts in one hostlist (a node "
            "group's NodeName line); split the group or lower the count"
        )
    return v


HostCount = Annotated[
    int,
    Field(gt=0, json_schema_extra={"maximum": MAX_HOSTS}),
    AfterValidator(_host_count),
    Field(description=f"number of instances, 1-{MAX_HOSTS}"),
]
S3Bucket = Annotated[
    str,
    AfterValidator(_s3_bucket),  # the message says which rule; the schema's shape is for editors
    Field(
        description="an S3 general purpose bucket name, e.g. my-datasets",
        json_schema_extra={"pattern": r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"},
    ),
]
