"""Stack rules on the resources that hold data: backups and the ``protect`` option.

They are stack validations because each looks at more than one resource (a backup policy or a
data repository association belongs to a file system through its ``fileSystemId`` dependency)
or at resource options, which only ``PolicyResource.opts`` carries. ``PolicyResourceOptions``
of pulumi-policy (sdk/python/lib/pulumi_policy/policy.py, 1.21) has ``protect``,
``ignore_changes``, ``delete_before_replace``, ``aliases``, ``custom_timeouts``,
``additional_secret_outputs`` and ``parent``, and no ``retain_on_delete``: so ``protect`` is what
the rule can see and what it asks for.
"""

from __future__ import annotations

from pulumi_policy import EnforcementLevel, PolicyResource, ReportViolation, StackValidationArgs, StackValidationPolicy

try:  # the `policy` package (tests) or a top-level module (the CLI); see hardening.py
    from .rules import _PRESENT, EBS_VOLUME, EFS, FSX_LUSTRE, TAG_CLUSTER, _get
except ImportError:
    from rules import _PRESENT, EBS_VOLUME, EFS, FSX_LUSTRE, TAG_CLUSTER, _get  # type: ignore[no-redef]

EFS_BACKUP_POLICY = "aws:efs/backupPolicy:BackupPolicy"
FSX_DRA = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"
DYNAMODB_TABLE = "aws:dynamodb/table:Table"

#: Resources whose deletion loses data; each must be created with ``protect=True``.
STATEFUL = (FSX_LUSTRE, EFS, EBS_VOLUME, DYNAMODB_TABLE)


def _points_at(r: PolicyResource, prop: str, target: PolicyResource) -> bool:
    """``r.props[prop]`` refers to ``target`` (its id is unknown in preview; the dependency is not)."""
    deps = r.property_dependencies.get(prop, []) if r.property_dependencies else []
    return any(d.urn == target.urn for d in deps)


# ---------------------------------------------------------------------------------- backups


def _backups(args: StackValidationArgs, report: ReportViolation) -> None:
    resources = args.resources
    for fs in resources:
        if fs.resource_type == EFS:
            enabled = [
                b
                for b in resources
                if b.resource_type == EFS_BACKUP_POLICY
                and _points_at(b, "fileSystemId", fs)
                and _get(_get(b.props, "backupPolicy"), "status") == "ENABLED"
            ]
            if not enabled:
                report(
                    f"EFS file system {fs.name} has no aws.efs.BackupPolicy with status ENABLED: "
                    "home directories would have no backup",
                    fs.urn,
                )
        elif fs.resource_type == FSX_LUSTRE:
            deployment = _get(fs.props, "deploymentType")
            if isinstance(deployment, str) and deployment.startswith("SCRATCH"):
                # FSx supports no backups of scratch file systems (AWS re:Post knowledge center,
                # "FSx for Lustre scratch file system"); clusterforge-encryption-at-rest refuses
                # SCRATCH anyway.
                continue
            linked = _get(fs.props, "importPath") is not None or any(
                d.resource_type == FSX_DRA and _points_at(d, "fileSystemId", fs) for d in resources
            )
            if linked:
                # "File system backups aren't supported on file systems that are linked [to] an
                # Amazon S3 data repository" (FSx for Lustre User Guide, "Using data repositories
                # with Amazon FSx for Lustre"); the S3 bucket is the durable copy.
                continue
            days = _get(fs.props, "automaticBackupRetentionDays")
            if days is _PRESENT:
                continue  # computed: judged at `up`
            if not (isinstance(days, int | float) and days > 0):
                report(
                    f"FSx for Lustre {fs.name} ({deployment}) is not linked to S3 and keeps no backups "
                    f"(automaticBackupRetentionDays {days!r}): set 1-90",
                    fs.urn,
                )


# ---------------------------------------------------------------------------------- protect


def _exempt_from_protect(r: PolicyResource) -> str | None:
    """Why a stateful-typed resource may go unprotected, or None."""
    if r.resource_type == DYNAMODB_TABLE:
        tags = _get(r.props, "tags")
        cluster = _get(tags, TAG_CLUSTER) if tags is not None and tags is not _PRESENT else None
        if isinstance(cluster, str) and _get(r.props, "name") == f"{cluster}-node-names":
            # The node-name registry (infra/registry.py) holds only which live instance holds
            # which name; the instances' claims rebuild it, and it must go with them on destroy.
            return "node-name registry"
    return None


def _protected(args: StackValidationArgs, report: ReportViolation) -> None:
    for r in args.resources:
        if r.resource_type not in STATEFUL or r.opts is None or r.opts.protect:
            continue
        if _exempt_from_protect(r) is None:
            report(
                f"{r.resource_type} {r.name} holds data but is not protected: create it with "
                "pulumi.ResourceOptions(protect=True) so a destroy or a replacing change cannot delete it",
                r.urn,
            )


BACKUPS = StackValidationPolicy(
    name="clusterforge-backups",
    description="Every EFS file system has an enabled backup policy; FSx file systems not linked to S3 keep backups.",
    validate=_backups,
    enforcement_level=EnforcementLevel.MANDATORY,
)
PROTECT_STATEFUL = StackValidationPolicy(
    name="clusterforge-protect-stateful",
    description="FSx, EFS, EBS volumes and DynamoDB tables are created with protect (the node-name registry excepted).",
    validate=_protected,
    enforcement_level=EnforcementLevel.MANDATORY,
)

POLICIES = (BACKUPS, PROTECT_STATEFUL)
