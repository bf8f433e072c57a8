"""Every rule of the pack, in the order ``pulumi preview`` reports them."""

from __future__ import annotations

from pulumi_policy import ResourceValidationPolicy, StackValidationPolicy

try:  # the `policy` package (tests) or top-level modules (the CLI); see hardening.py
    from . import hardening, rules, stateful
except ImportError:
    import hardening  # type: ignore[no-redef]
    import rules  # type: ignore[no-redef]
    import stateful  # type: ignore[no-redef]

POLICIES: tuple[ResourceValidationPolicy | StackValidationPolicy, ...] = (
    *rules.POLICIES,
    *hardening.POLICIES,
    *stateful.POLICIES,
)
