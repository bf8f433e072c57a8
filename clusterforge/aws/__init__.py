"""AWS facts the Pulumi program (``infra/``), the offline plan and the inventory share.

Everything here is pure Python without Pulumi, so it is importable (and type-checked strictly)
where the Pulumi SDK is not installed: the EFA interface layout, the stack output names and tag
keys, IAM policy documents and the user data that prepares a host for Ansible.
"""
