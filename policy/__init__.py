"""clusterforge's Pulumi policy pack (CrossGuard): the second net behind the program's own tests.

Run it with ``pulumi preview --policy-pack policy/``. The rules live in ``policy.rules``,
``policy.hardening`` and ``policy.stateful`` (``policy.pack.POLICIES`` lists them) so tests can
import and call them directly; ``__main__.py`` only builds the pack (constructing a
``PolicyPack`` starts its gRPC server and blocks).
"""
