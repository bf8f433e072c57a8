"""Which aws-ofi-nccl / NCCL / EFA-installer release introduced what the NCCL renderer gates on,
and which instance types the plugin's docs list each EFA variable for.

One table, so every gate is reviewable in one place, cites its release and is unit-tested at its
boundary (tests/test_nccl.py). Sources were read from the repositories at the named tags:
aws/aws-ofi-nccl (doc/efa-env-var.md has one revision, e0a65432, first in v1.7.4-aws and unchanged
to HEAD 2daf7d30; RELEASENOTES.md on the release tags), NVIDIA/nccl (src/misc/tuner.cc), and the
aws-efa-installer CHANGELOG. Summary and audit in ../shared/reference/facts.md §4.1.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from clusterforge.clusterspec.types import version_tuple

Component = Literal["aws-ofi-nccl", "nccl", "efa-installer"]
Version = tuple[int, ...]

EFA_DOC = "aws-ofi-nccl doc/efa-env-var.md @v1.7.4-aws..HEAD"


# a NamedTuple: a frozen dataclass compiles its methods at import (tests/test_cli_lazy.py::RENDER_DATACLASSES)
class Gate(NamedTuple):
    component: Component
    first: Version  # the first release where the gated statement is true
    source: str


GATES: dict[str, Gate] = {
    # FI_PROVIDER=efa / NCCL_PROTO=simple: "Use for aws-ofi-nccl<=1.5.0" (efa-env-var.md L41-48,
    # presets L133-149). No 1.5.x after 1.5.0-aws was tagged; v1.6.0 is the next release.
    "ofi_picks_efa": Gate(
        "aws-ofi-nccl", (1, 6, 0),
        f"{EFA_DOC} L41-48: FI_PROVIDER/NCCL_PROTO 'Use for aws-ofi-nccl<=1.5.0'",
    ),
    # FI_EFA_USE_DEVICE_RDMA=1: "Do not set for libfabric>=1.18.0 and aws-ofi-nccl>=1.7.0" (L29-31).
    # Both halves are gates: the plugin one, and libfabric, known here through the EFA installer.
    "ofi_gdr_default": Gate(
        "aws-ofi-nccl", (1, 7, 0),
        f"{EFA_DOC} L29-31: 'Do not set for libfabric>=1.18.0 and aws-ofi-nccl>=1.7.0'",
    ),
    "libfabric_gdr_default": Gate(
        "efa-installer", (1, 23, 0),
        "aws-efa-installer CHANGELOG [1.23.0] May 2023: 'Ingest libfabric 1.18.0amzn1.0'",
    ),
    # From 1.8.0 the plugin refuses libfabric < 1.18, so the libfabric half holds by itself.
    "ofi_requires_libfabric_1_18": Gate(
        "aws-ofi-nccl", (1, 8, 0),
        "aws-ofi-nccl RELEASENOTES v1.8.0-aws: 'This release requires Libfabric v1.18.0 or later'",
    ),
    # The tuner: a separate libnccl-ofi-tuner.so, built for platform-aws only.
    "ofi_tuner": Gate(
        "aws-ofi-nccl", (1, 8, 0),
        "aws-ofi-nccl RELEASENOTES v1.8.0-aws: 'A tuner component for the plugin'; "
        "src/Makefile.am @v1.8.0-aws L37-42 (libnccl-ofi-tuner.la)",
    ),
    "ofi_tuner_v2": Gate(
        "aws-ofi-nccl", (1, 9, 0),
        "aws-ofi-nccl RELEASENOTES v1.9.0-aws: 'support v2 ext-tuner interface introduced with NCCL 2.21'",
    ),
    # 1.9.0 broke the v1 entry point that NCCL 2.19/2.20 call (commit 2fe67477, 'spurious deref').
    "ofi_tuner_v1_fixed": Gate(
        "aws-ofi-nccl", (1, 9, 2),
        "aws-ofi-nccl RELEASENOTES v1.9.2-aws: 'Fixed bug that prevented the tuner from getting loaded "
        "with NCCL 2.19 and 2.20'",
    ),
    # From 1.16.0 the tuner is inside libnccl-net.so and the plugin sets NCCL_TUNER_PLUGIN itself
    # (to dodge an NCCL dlopen refcount bug), unless the variable is already set.
    "ofi_sets_tuner_plugin": Gate(
        "aws-ofi-nccl", (1, 16, 0),
        "aws-ofi-nccl src/Makefile.am @v1.16.0 L48-53 'add the tuner sources into the library'; "
        "src/platform-aws.cpp @v1.16.0 L465-496; RELEASENOTES v1.16.0 'enable collective algorithm tuner by default'",
    ),
    # NCCL side. The first 2.19 release is v2.19.1-1, the first 2.21 release v2.21.5-1.
    "nccl_tuner_plugin_env": Gate(
        "nccl", (2, 19, 0),
        "NVIDIA/nccl src/misc/tuner.cc @v2.19.1-1 L29 getenv(\"NCCL_TUNER_PLUGIN\"); no tuner in v2.18.6-1",
    ),
    "nccl_tuner_v2": Gate(
        "nccl", (2, 21, 0),
        "NVIDIA/nccl src/include/nccl_tuner.h @v2.21.5-1 L58 NCCL_TUNER_PLUGIN_SYMBOL \"ncclTunerPlugin_v2\"; "
        "src/misc/tuner.cc @v2.21.5-1 L62-118 also tries libnccl-tuner.so, then libnccl-net.so",
    ),
    # Minimums the validation rules enforce (clusterspec/rules/nodes.py, efa_rules).
    "ofi_p5_minimum": Gate(
        "aws-ofi-nccl", (1, 7, 2),
        f"{EFA_DOC} L101-105: p5.48xlarge 'aws-ofi-nccl>=1.7.2 (recommend at least 1.7.3)'",
    ),
    "nccl_nvls": Gate(
        "nccl", (2, 18, 5),
        "aws-ofi-nccl RELEASENOTES v1.7.3-aws: 'For NCCL 2.18.5 or later, don't disable NVLS support'",
    ),
}

# Instance types each variable is documented for. ALL_EFA_GPU: the doc says "EFA-enabled GPU
# instances" (AWS's EFA instance-type list), so every EFA GPU type in the catalog qualifies.
ALL_EFA_GPU = "any EFA GPU instance"
DOC_TYPES: dict[str, str | dict[str, Version]] = {
    "FI_PROVIDER": ALL_EFA_GPU,  # efa-env-var.md L41-45 and presets L133-149 ("p4/p5" and "without RDMA")
    "NCCL_PROTO": ALL_EFA_GPU,  # efa-env-var.md L47-49, same presets
    # efa-env-var.md L91: "only p4 and p5 instances support both EFA and NVIDIA GPUDirect RDMA";
    # presets L122-123, L134-137: FI_EFA_USE_DEVICE_RDMA=1 for "p4/p5 instances", N/A for "EFA
    # instances without RDMA" (g5, g6e). The doc predates p5e/p5en/p6, which need newer plugins anyway.
    "FI_EFA_USE_DEVICE_RDMA": {"p4d.24xlarge": (0,), "p4de.24xlarge": (0,), "p5.48xlarge": (0,)},
    # Not in efa-env-var.md: the tuner's own platform list, with the release that first models the
    # type. v1.8.0 is built for P5 alone (include/nccl_ofi_tuner.h @v1.8.0-aws L36-46, "TODO: When
    # extending to P4/other platforms") and applies that model to any host until v1.13.0 checks the
    # platform (src/tuner/nccl_ofi_tuner.c @v1.13.0-aws L84-90: p5, p5e, p5en); p6-b200 from
    # v1.15.0 (src/tuner/nccl_ofi_tuner.cpp @v1.15.0 L84-92). p4d/g5/g6e: never modelled.
    "NCCL_TUNER_PLUGIN": {
        "p5.48xlarge": (1, 8, 0),
        "p5e.48xlarge": (1, 13, 0),
        "p5en.48xlarge": (1, 13, 0),
        "p6-b200.48xlarge": (1, 15, 0),
    },
}


def has(installed: str | None, gate: str) -> bool:
    """True when `installed` (a version string; None = not installed) is at or past the gate."""
    g = GATES[gate]
    return installed is not None and version_tuple(installed) >= g.first


def first(gate: str) -> str:
    return ".".join(str(p) for p in GATES[gate].first)


def documented_for(variable: str, instance_type: str, ofi: str | None) -> bool:
    """Does the plugin's documentation list `variable` for this instance type at this version?"""
    types = DOC_TYPES[variable]
    if isinstance(types, str):
        return True  # every EFA GPU type; the caller is rendering an EFA GPU group
    since = types.get(instance_type)
    return since is not None and ofi is not None and version_tuple(ofi) >= since


def listed_types(variable: str) -> str:
    types = DOC_TYPES[variable]
    return types if isinstance(types, str) else ", ".join(types)
