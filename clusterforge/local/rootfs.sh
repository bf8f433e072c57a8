#!/bin/bash
# Build (once) a Debian minbase root filesystem of one release, of one kind:
#   clusterforge/local/rootfs.sh [CACHE_DIR] [SUITE] [KIND]   -> prints the rootfs folder
#   SUITE: bookworm (Debian 12, Slurm 22.05; default) | trixie (Debian 13, Slurm 24.11)
#          | sid (Slurm 26.05 today)
#   KIND:  node  (default) what a bare cloud/on-prem image has: systemd as init, python3 for
#                Ansible, sshd, iproute2; every local node is an overlay of it, booted by
#                systemd-nspawn, and the roles bring the rest
#          slurm the Slurm daemons and clients of that release plus munge: `clusterforge check`
#                runs them (chrooted) to load a render made for that release family
# Each folder ($CACHE/rootfs-SUITE-node-HASH, $CACHE/rootfs-SUITE-slurm) is built once: a second call returns at once.
# Building takes ~50 s and ~290 MB per folder on this kind of machine (benchmarks/rootfs.py).
set -euo pipefail
CACHE=${1:-${CLUSTERFORGE_CACHE:-/var/cache/clusterforge}}
SUITE=${2:-bookworm}
KIND=${3:-node}
case "$SUITE" in
bookworm | trixie | sid) ;;
*) echo "rootfs.sh: unknown suite '$SUITE' (bookworm, trixie or sid)" >&2; exit 2 ;;
esac
case "$KIND" in
node)
  # systemd, systemd-sysv, dbus: a node boots systemd as PID 1 (systemd-nspawn -b), so that the
  # roles' units, handlers and systemctl run as in production. The folder is keyed by the
  # include list: a cache built from another list (e.g. the earlier one without systemd) is
  # never mistaken for this one.
  INCLUDE=python3,openssh-server,iproute2,ca-certificates,systemd,systemd-sysv,dbus
  ROOT="$CACHE/rootfs-$SUITE-node-$(echo "$INCLUDE" | sha256sum | cut -c1-8)" ;;
slurm)
  ROOT="$CACHE/rootfs-$SUITE-slurm"
  # exactly what the check runs: slurmctld, slurmd (-G), scontrol, munged/munge
  INCLUDE=slurmctld,slurmd,slurm-client,munge ;;
*) echo "rootfs.sh: unknown kind '$KIND' (node or slurm)" >&2; exit 2 ;;
esac
if [ -f "$ROOT/.complete" ]; then echo "$ROOT"; exit 0; fi
command -v debootstrap >/dev/null || { echo "debootstrap is missing: apt-get install -y debootstrap" >&2; exit 2; }
# the mirror this machine already uses (deb822 or one-line format)
MIRROR=$(grep -h -v '^ *#' /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null \
         | grep -o -E 'https?://[^ ]+/debian/?( |$)' | grep -v security | head -1 | tr -d ' ' || true)
MIRROR=${MIRROR:-http://deb.debian.org/debian}
mkdir -p "$CACHE"
# two local clusters coming up side by side (scripts/run-tests.sh's two lanes) build one folder once:
# the second waits for the first's build, then takes it (bounded: a build takes about a minute)
exec 9>"$CACHE/.rootfs-$SUITE-$KIND.lock"
flock -w 900 9 || { echo "rootfs.sh: another build of $ROOT held its lock for 900 s" >&2; exit 1; }
if [ -f "$ROOT/.complete" ]; then echo "$ROOT"; exit 0; fi
TMP=$(mktemp -d "$CACHE/.rootfs.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
LOG="$CACHE/debootstrap-$SUITE-$KIND.log"
# Debian's packages start nothing at install time inside debootstrap (no init runs there).
debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$TMP/root" "$MIRROR" >"$LOG" 2>&1 \
  || { tail -20 "$LOG" >&2; exit 1; }
# keep the image bare: no apt lists, no cached debs, no host keys (each host makes its own);
# the slurm kind also drops the munge key its postinst made (the check brings its own)
rm -rf "$TMP/root/var/lib/apt/lists/"* "$TMP/root/var/cache/apt/archives/"*.deb "$TMP/root/etc/ssh/ssh_host_"*
rm -f "$TMP/root/etc/munge/munge.key"
touch "$TMP/root/.complete"
rm -rf "$ROOT"; mv "$TMP/root" "$ROOT"
echo "$ROOT"
