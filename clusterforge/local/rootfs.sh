#!/bin/bash
# Build (once) the Debian 12 minbase rootfs every local node is an overlay of.
#   clusterforge/local/rootfs.sh [CACHE_DIR]   -> prints the rootfs folder
# The folder is cached: a second call returns at once. Building takes ~45 s and ~290 MB.
# Only the packages a bare cloud/on-prem image has are included (python3 for Ansible, sshd,
# iproute2); everything the roles need comes from the roles themselves.
set -euo pipefail
CACHE=${1:-${CLUSTERFORGE_CACHE:-/var/cache/clusterforge}}
ROOT="$CACHE/rootfs-bookworm"
if [ -f "$ROOT/.complete" ]; then echo "$ROOT"; exit 0; fi
command -v debootstrap >/dev/null || { echo "debootstrap is missing: apt-get install -y debootstrap" >&2; exit 2; }
# the mirror this machine already uses (deb822 or one-line format)
MIRROR=$(grep -h -v '^ *#' /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null \
         | grep -o -E 'https?://[^ ]+/debian/?( |$)' | grep -v security | head -1 | tr -d ' ' || true)
MIRROR=${MIRROR:-http://deb.debian.org/debian}
mkdir -p "$CACHE"
TMP=$(mktemp -d "$CACHE/.rootfs.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
debootstrap --variant=minbase --include=python3,openssh-server,iproute2,ca-certificates \
    bookworm "$TMP/root" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 \
  || { tail -20 "$CACHE/debootstrap.log" >&2; exit 1; }
# keep the image bare: no apt lists, no cached debs, no host keys (each host makes its own)
rm -rf "$TMP/root/var/lib/apt/lists/"* "$TMP/root/var/cache/apt/archives/"*.deb "$TMP/root/etc/ssh/ssh_host_"*
touch "$TMP/root/.complete"
rm -rf "$ROOT"; mv "$TMP/root" "$ROOT"
echo "$ROOT"
