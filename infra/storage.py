"""Shared storage: FSx for Lustre (PERSISTENT_2) and EFS, both encrypted at rest, backed up,
and ``protect``-ed (a `pulumi destroy` or a replacing change stops at them instead of deleting
checkpoints and home directories; ``pulumi state unprotect`` first when that is really meant).

On-prem storage kinds of the spec (``nfs``, ``lustre``) create nothing here; Ansible mounts them.

The controller's state volume (``slurm.state_storage: {type: ebs}``) is here too: an encrypted EBS
volume in the controller's availability zone, ``protect``-ed like the file systems, so replacing or
terminating the controller leaves it (and the jobs in its StateSaveLocation) behind; infra/head.py
attaches it to the controller instance, and a replacement instance gets the same volume.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from clusterforge.aws import layout
from clusterforge.clusterspec.models import Cluster, EbsStateStorage, Efs, FsxLustre
from infra import lazy_aws as aws
from infra.common import TOKEN_PREFIX, child_opts, cluster_tags

#: Automatic daily backups of an FSx file system not linked to S3 are kept this long (0-90 days
#: allowed: FSx API Reference, LustreFileSystemConfiguration.AutomaticBackupRetentionDays).
FSX_BACKUP_RETENTION_DAYS = 7


@dataclass(frozen=True)
class FsxArgs:
    name: str
    mount: str
    capacity_gib: int
    throughput_per_tib: int
    subnet: str
    s3_import_path: str | None

    @property
    def file_system_path(self) -> str:
        """Where the S3 data appears inside the file system: ``/<last prefix component>``
        (``s3://bucket/corpus`` -> ``/corpus``, mounted at ``<mount>/corpus``)."""
        assert self.s3_import_path is not None
        parts = [p for p in self.s3_import_path.removeprefix("s3://").split("/") if p]
        return "/" + parts[-1]


@dataclass(frozen=True)
class EfsArgs:
    name: str
    mount: str
    throughput_mode: str
    subnets: tuple[str, ...]
    """one subnet per AZ that holds cloud nodes: a mount target each"""


@dataclass(frozen=True)
class StateVolumeArgs:
    controller: str
    """the controller's host name (the volume's Name tag says whose state it holds)"""
    availability_zone: str
    size_gib: int
    volume_type: str


@dataclass(frozen=True)
class StorageArgs:
    cluster: str
    fsx: tuple[FsxArgs, ...]
    efs: tuple[EfsArgs, ...]
    state_volume: StateVolumeArgs | None = None

    @classmethod
    def from_cluster(cls, cluster: Cluster) -> StorageArgs:
        fsx_subnet = layout.storage_subnet(cluster).name if cluster.aws else ""
        mt_subnets = (
            tuple(s.name for s in layout.one_subnet_per_az(layout.used_subnets(cluster))) if cluster.aws else ()
        )
        return cls(
            cluster=cluster.name,
            fsx=tuple(
                FsxArgs(s.name, s.mount, s.capacity_gib, s.throughput_per_tib, fsx_subnet, s.s3_import_path)
                for s in cluster.storage
                if isinstance(s, FsxLustre)
            ),
            efs=tuple(
                EfsArgs(s.name, s.mount, s.throughput_mode, mt_subnets) for s in cluster.storage if isinstance(s, Efs)
            ),
            state_volume=_state_volume(cluster),
        )


def _state_volume(cluster: Cluster) -> StateVolumeArgs | None:
    st = cluster.slurm.state_storage
    ctl = [g for g in cluster.groups_with_role("controller") if g.cloud is not None]
    if not isinstance(st, EbsStateStorage) or not ctl:
        return None  # the spec rules refuse ebs without a cloud controller (state-ebs-not-on-aws)
    if len(ctl[0].hostnames) != 1:
        raise layout.LayoutError(
            f"slurm.state_storage ebs with {len(ctl[0].hostnames)} controllers: an EBS volume attaches to one "
            "instance; two controllers share their state on storage[] (state_storage type shared)"
        )
    return StateVolumeArgs(
        controller=ctl[0].hostnames[0],
        availability_zone=layout.subnet_for(cluster, ctl[0]).availability_zone,
        size_gib=st.size_gib,
        volume_type=st.volume_type,
    )


class Storage(pulumi.ComponentResource):
    """FSx for Lustre for checkpoints and datasets; EFS for home directories."""

    fsx: dict[str, aws.fsx.LustreFileSystem]
    efs: dict[str, aws.efs.FileSystem]
    mounts: dict[str, dict[str, pulumi.Input[str] | None]]
    state_volume: aws.ebs.Volume | None

    def __init__(
        self,
        name: str,
        args: StorageArgs,
        subnet_ids: dict[str, pulumi.Output[str]],
        fsx_security_group_id: pulumi.Input[str] | None,
        efs_security_group_id: pulumi.Input[str] | None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(f"{TOKEN_PREFIX}:Storage", name, None, opts)
        tags = cluster_tags(args.cluster)
        self.fsx, self.efs, self.mounts = {}, {}, {}

        for f in args.fsx:
            assert fsx_security_group_id is not None
            fs = aws.fsx.LustreFileSystem(
                f"{name}-{f.name}",
                # PERSISTENT_2: replicated storage that survives server failure, the only deployment
                # type with data repository associations; encrypted at rest with KMS (the AWS
                # managed aws/fsx key unless kms_key_id is given). SCRATCH types lose data on
                # a server failure: not for checkpoints.
                deployment_type="PERSISTENT_2",
                storage_type="SSD",
                storage_capacity=f.capacity_gib,
                per_unit_storage_throughput=f.throughput_per_tib,
                file_system_type_version="2.15",
                # LZ4 costs little CPU on the servers and shrinks checkpoints and text corpora.
                data_compression_type="LZ4",
                # Daily backups, kept a week, unless S3 is the durable copy: "File system backups
                # aren't supported on file systems that are linked to an Amazon S3 data repository"
                # (FSx for Lustre User Guide, "Using data repositories with Amazon FSx for Lustre":
                # https://docs.aws.amazon.com/fsx/latest/LustreGuide/fsx-data-repositories.html).
                automatic_backup_retention_days=0 if f.s3_import_path else FSX_BACKUP_RETENTION_DAYS,
                # pulumi-aws 7 types this as one id: FSx for Lustre lives in exactly one subnet.
                subnet_ids=subnet_ids[f.subnet],
                security_group_ids=[fsx_security_group_id],
                tags=cluster_tags(args.cluster, {"Name": f"{args.cluster}-{f.name}"}),
                opts=child_opts(self, pulumi.ResourceOptions(protect=True)),
            )
            self.fsx[f.name] = fs
            if f.s3_import_path:
                aws.fsx.DataRepositoryAssociation(
                    f"{name}-{f.name}-s3",
                    file_system_id=fs.id,
                    data_repository_path=f.s3_import_path,
                    file_system_path=f.file_system_path,
                    # Import the object listing at creation; contents load lazily on first read.
                    batch_import_meta_data_on_create=True,
                    s3=aws.fsx.DataRepositoryAssociationS3Args(
                        auto_import_policy=aws.fsx.DataRepositoryAssociationS3AutoImportPolicyArgs(
                            events=["NEW", "CHANGED", "DELETED"],
                        ),
                    ),
                    tags=tags,
                    opts=child_opts(self),
                )
            self.mounts[f.name] = {
                "type": "fsx_lustre",
                "mount": f.mount,
                "dns_name": fs.dns_name,
                "mount_name": fs.mount_name,
            }

        for e in args.efs:
            assert efs_security_group_id is not None
            efs = aws.efs.FileSystem(
                f"{name}-{e.name}",
                encrypted=True,
                performance_mode="generalPurpose",
                throughput_mode=e.throughput_mode,
                tags=cluster_tags(args.cluster, {"Name": f"{args.cluster}-{e.name}"}),
                opts=child_opts(self, pulumi.ResourceOptions(protect=True)),
            )
            self.efs[e.name] = efs
            # Automatic daily backups (EFS API Reference, BackupPolicy: "If status has a value of
            # ENABLED, the file system is being automatically backed up"): home directories are
            # the one copy of users' files.
            aws.efs.BackupPolicy(
                f"{name}-{e.name}-backup",
                file_system_id=efs.id,
                backup_policy=aws.efs.BackupPolicyBackupPolicyArgs(status="ENABLED"),
                opts=child_opts(self),
            )
            for subnet in e.subnets:
                aws.efs.MountTarget(
                    f"{name}-{e.name}-{subnet}",
                    file_system_id=efs.id,
                    subnet_id=subnet_ids[subnet],
                    security_groups=[efs_security_group_id],
                    opts=child_opts(self),
                )
            self.mounts[e.name] = {
                "type": "efs",
                "mount": e.mount,
                "dns_name": efs.dns_name,
                "mount_name": None,
            }

        self.state_volume = None
        sv = args.state_volume
        if sv is not None:
            self.state_volume = aws.ebs.Volume(
                f"{name}-state",
                availability_zone=sv.availability_zone,
                size=sv.size_gib,
                type=sv.volume_type,
                # encrypted with the account's default EBS key (aws/ebs) unless kms_key_id is given
                encrypted=True,
                tags=cluster_tags(args.cluster, {"Name": f"{args.cluster}-state-{sv.controller}"}),
                # the one copy of slurmctld's state (and a controller-local MariaDB): `pulumi destroy`
                # or a replacing change stops here until `pulumi state unprotect` says otherwise
                opts=child_opts(self, pulumi.ResourceOptions(protect=True)),
            )

        self.register_outputs({"mounts": self.mounts})
