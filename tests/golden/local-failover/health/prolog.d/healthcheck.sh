#!/bin/sh
# Slurm prolog for cluster local-failover (Slurm 24.11), rendered by clusterforge: the
# health check's prolog mode (/usr/local/sbin/clusterforge-healthcheck prolog, this node group's checks).
# Before each job: the fast checks; one that keeps failing drains the node and fails the job,
# which slurmd requeues (SchedulerParameters=nohold_on_prolog_fail: to run elsewhere, not held).
exec /usr/local/sbin/clusterforge-healthcheck prolog
