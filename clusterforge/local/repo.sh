#!/bin/bash
# Build (once per package list and Debian release) the local apt repository the local nodes
# install from.
#   clusterforge/local/repo.sh PACKAGE_LIST_FILE [CACHE_DIR] [SUITE]   -> prints the repository root
#   SUITE: bookworm (default) | trixie: the release of the nodes (rootfs.sh), whose packages the
#          repository holds (trixie: Slurm 24.11)
# The root holds debian/ (a flat repository: the dependency closure of the listed packages for a
# fresh minbase node, downloaded from this machine's own mirror) and the vendor stand-in
# repositories that standin.sh builds (nvidia/, grafana/). Cached by the list's checksum, so a
# second call returns at once; the nodes never reach the internet.
set -euo pipefail
LIST=${1:?package list file}; CACHE=${2:-${CLUSTERFORGE_CACHE:-/var/cache/clusterforge}}; SUITE=${3:-bookworm}
HERE=$(cd "$(dirname "$0")" && pwd)
# the node rootfs the closure is computed from (its folder name says its release and include list)
ROOTFS=$("$HERE/rootfs.sh" "$CACHE" "$SUITE" node)
key=$( (basename "$ROOTFS"; grep -v -E '^\s*(#|$)' "$LIST" | sort -u) | sha256sum | cut -c1-12)
REPO="$CACHE/apt-repo-$SUITE-$key"
# one build at a time per repository (two local clusters may come up side by side): the second
# caller waits, then finds it complete (standin.sh returns at once on its stamp)
exec 9>"$CACHE/.apt-repo-$SUITE-$key.lock"
flock -w 900 9 || { echo "repo.sh: another build of $REPO held its lock for 900 s" >&2; exit 1; }
if [ ! -f "$REPO/debian/.complete" ]; then
  command -v dpkg-scanpackages >/dev/null || { echo "dpkg-scanpackages missing: apt-get install -y dpkg-dev" >&2; exit 2; }
  TMP=$(mktemp -d "$CACHE/.repo.XXXXXX"); trap 'rm -rf "$TMP"' EXIT
  cp -a "$ROOTFS" "$TMP/dl"
  cp /etc/resolv.conf "$TMP/dl/etc/resolv.conf"
  mkdir -p "$TMP/dl/repo"
  mapfile -t pkgs < <(grep -v -E '^\s*(#|$)' "$LIST" | sort -u)
  chroot "$TMP/dl" sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends --download-only -o Dir::Cache::archives=/repo "$@"' _ "${pkgs[@]}" >"$TMP/dl.log" 2>&1 \
    || { tail -20 "$TMP/dl.log" >&2; exit 1; }
  mkdir -p "$REPO/debian"
  mv "$TMP/dl/repo/"*.deb "$REPO/debian/"
  (cd "$REPO/debian" && dpkg-scanpackages --multiversion . /dev/null 2>/dev/null > Packages && gzip -9kf Packages)
  touch "$REPO/debian/.complete"
fi
"$HERE/standin.sh" "$REPO"
echo "$REPO"
