#!/usr/bin/env bash
# The whole suite as two pytest processes side by side, which is what `make test` (and so CI)
# runs: the end-to-end local clusters (`-m local`) spend most of their time waiting on booting
# nodes, apt, systemd and Slurm's timers, while the rest of the suite is CPU-bound. Side by side
# they finish about when the local clusters alone would. They cannot meet: every test that makes
# network namespaces has its own /24 and name prefix (10.80 node images, 10.81 on-prem, 10.82 AWS flavour, 10.83
# crash test, 10.84 lifecycle, 10.85 cloud nodes, 10.86 real-daemon failover, 10.87 roles, 10.88
# backup controller, 10.89 accounting across a replaced controller), and each
# process has its own --basetemp. The first lane runs the on-prem cluster (tests/test_local_cluster.py,
# about 32 minutes) and every other local module but two: the backup controller's
# (tests/test_local_failover.py, about 7); the
# second runs the rest of the suite (about 15), then the AWS flavour (tests/test_local_aws_cluster.py,
# about 15), the roles cluster (tests/test_local_roles.py, about 7) and the baked node images
# (tests/test_local_image_cluster.py, about 4), so the two lanes end at
# about the same time and at most two pytest processes share the two cores. The stand-in
# apt repositories are built once per machine (rootfs.sh/repo.sh, cached), so clusters side by side
# never rebuild one under the other. The end-to-end output is printed when both are done (and if
# this script is killed). Extra arguments go to every pytest process.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
# not under /tmp/pytest-of-<user>: any other pytest run there deletes folders it did not number
base="${TMPDIR:-/tmp}/clusterforge-tests"
mkdir -p "$base"
log="$base/local-suite.log"
opts=(-q -p no:cacheprovider --durations=15 "$@")
python3 -m pytest "${opts[@]}" -m local --ignore=tests/test_local_aws_cluster.py --ignore=tests/test_local_roles.py --ignore=tests/test_local_image_cluster.py --basetemp="$base/pytest-local" >"$log" 2>&1 &
local_pid=$!
show_local() {
  echo
  echo "==== end-to-end local clusters (pytest -m local; log $log) ===="
  cat "$log"
}
# a killed run still shows what the end-to-end half printed, and does not leave it running
trap 'kill "$local_pid" 2>/dev/null; wait "$local_pid" 2>/dev/null; show_local; exit 130' INT TERM
echo "==== the rest of the suite (pytest -m 'not local'), beside the end-to-end local clusters ===="
python3 -m pytest "${opts[@]}" -m "not local" --basetemp="$base/pytest-unit"
rest=$?
echo "==== the AWS-flavour, roles and node-image clusters (pytest -m local tests/test_local_aws_cluster.py tests/test_local_roles.py tests/test_local_image_cluster.py), beside the other local clusters ===="
python3 -m pytest "${opts[@]}" -m local tests/test_local_aws_cluster.py tests/test_local_roles.py tests/test_local_image_cluster.py --basetemp="$base/pytest-lane2"
roles=$?
# "no tests collected" there (a -k that matched none of its tests) is fine; anything else counts
if [ "$roles" != 0 ] && [ "$roles" != 5 ] && { [ "$rest" = 0 ] || [ "$rest" = 5 ]; }; then rest=$roles; fi
if [ "$roles" = 0 ] && [ "$rest" = 5 ]; then rest=0; fi
wait "$local_pid"
local_rc=$?
trap - INT TERM
show_local
echo "run-tests: not-local exit $rest (roles cluster exit $roles), local exit $local_rc"
# 5 is pytest's "no tests collected": fine for one half when a -k or path narrowed the run
ok() { [ "$1" = 0 ] || [ "$1" = 5 ]; }
if ok "$rest" && ok "$local_rc" && ! { [ "$rest" = 5 ] && [ "$local_rc" = 5 ]; }; then exit 0; fi
[ "$rest" != 0 ] && [ "$rest" != 5 ] && exit "$rest"
exit "$local_rc"
