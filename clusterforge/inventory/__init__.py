"""Spec (on-prem) or Pulumi stack outputs (AWS) -> an Ansible inventory folder.

The generated inventory is a contract between this generator and the roles, checked on the
Ansible side by ``playbooks/validate.yml``:

* one group per node group, ``<cluster>_<nodegroup>`` ('-' becomes '_'), holding its hosts with
  ``ansible_host`` (and ``instance_id``/``efa_count`` for cloud head hosts); the hosts of an Auto
  Scaling group come from ``aws_ec2.yml`` (the ``amazon.aws.aws_ec2`` plugin), named by the
  ``clusterforge:hostname`` tag each instance sets when it claims its name at boot;
* role groups ``slurm_controller``, ``slurm_compute``, ``slurm_login``, ``slurm_dbd`` and the
  feature groups ``gpu_nvidia``, ``gpu_amd``, ``nvswitch``, ``fabric_efa``, ``fabric_infiniband``,
  ``monitoring_server``, each made of node-group groups;
* ``group_vars/all/clusterforge.yml`` with the cluster-wide ``clusterforge_*`` variables, among
  them ``clusterforge_manifest_dir``, the folder ``clusterforge render`` wrote (the roles copy
  every Slurm/NCCL file from it and never template one themselves);
* ``group_vars/<cluster>_<nodegroup>.yml`` with the node group's ``clusterforge_*`` variables.

Call signatures (the CLI verb ``clusterforge inventory SPEC [--stack-outputs FILE]`` wraps the
first one)::

    generate_inventory(spec_path: Path, *, stack_outputs: Path | None = None,
                       out_dir: Path | None = None, manifest_dir: Path | None = None,
                       render: bool = True, ec2_access: Ec2Access | None = None) -> InventoryResult
    build_inventory(cluster: Cluster, *, stack_outputs: Mapping | StackOutputs | None = None,
                    manifest_dir: str = "{{ inventory_dir }}.render",
                    ec2_access: Ec2Access | None = None) -> Inventory
    write_inventory(inv: Inventory, out_dir: Path) -> list[Path]

``out_dir`` defaults to ``inventories/generated/<cluster>`` under the current directory. With
``render=True`` the spec is rendered into ``<out_dir>.render`` next to it (the manifest the group
variables point at; not inside it, since Ansible reads every file in an inventory folder) unless
``manifest_dir`` names an existing render. Stack outputs are validated as
``clusterforge.aws.outputs.StackOutputs`` (a file from another version fails, naming the field).
``ec2_access`` (endpoint URL and keys for the aws_ec2 plugin) is for the emulation only.
"""

from clusterforge.inventory.generate import (
    GENERATOR,
    INVENTORY_VERSION,
    ROLE_GROUPS,
    Ec2Access,
    Inventory,
    InventoryError,
    InventoryResult,
    build_inventory,
    generate_inventory,
    group_name,
    write_inventory,
)

__all__ = [
    "GENERATOR",
    "INVENTORY_VERSION",
    "ROLE_GROUPS",
    "Ec2Access",
    "Inventory",
    "InventoryError",
    "InventoryResult",
    "build_inventory",
    "generate_inventory",
    "group_name",
    "write_inventory",
]
