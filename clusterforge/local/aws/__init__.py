"""The emulated AWS of the local cluster's AWS flavour: what a node of an AWS spec talks to when
its "cloud" is one machine.

* ``cloud``: the EC2 / Auto Scaling / DynamoDB API, which is moto in server mode (``start_moto``),
  filled with what the Pulumi plan creates (``populate``: launch templates with the plan's user
  data and tags, Auto Scaling groups of the plan's sizes, head instances, the node-name table)
  and read back by the local "hypervisor" (``instances``) that boots and kills node namespaces.
* ``ec2server``: moto's server app behind a middleware that answers DescribeInstanceTopology
  (moto has none) from moto's instances and a placements file.
* ``imds``: a stand-in for the EC2 instance metadata service (IMDSv2: session tokens, instance
  identity, tags, spot notices, instance-profile credentials), one per node namespace at
  169.254.169.254:80, answering from a JSON file the emulator rewrites (``write_data``).
"""
