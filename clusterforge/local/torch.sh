#!/bin/bash
# Build (once) the PyTorch layer of a cached node root filesystem (rootfs.sh):
#   clusterforge/local/torch.sh ROOTFS [VERSION] [CACHE]   -> prints the layer folder
# The layer is what `pip install torch==VERSION` adds to a node: /usr/local/lib/python3.X/
# dist-packages and /usr/local/bin (torchrun), installed by the nodes' own python3 (Debian 13:
# 3.13), so the wheels, their tags and the compiled .pyc are the nodes', not this machine's.
# `clusterforge local up --torch` stacks it read-only over the rootfs (an overlay lower layer):
# every node sees one copy and nothing is installed per node.
#
# Two steps, so that the download uses this machine's pip configuration (index, mirror, CA
# bundle) and the install needs no network:
#   1. this machine's pip downloads the wheels for the nodes' interpreter and C library
#      (--python-version/--abi/--platform taken from the rootfs), plus a pip wheel;
#   2. in a private mount namespace, an overlay of the rootfs whose upper folder becomes the
#      layer; chrooted there, the nodes' python3 runs that pip from its wheel, offline
#      (--no-index) from the downloaded wheels, and imports torch.distributed with gloo.
# What PyPI serves for torch 2.13.0 on cp313 x86_64 is the CUDA 13.0 build: the wheel (~527 MB)
# and the NVIDIA libraries it links against (cuDNN, cuBLAS, NCCL, ...), which it needs even to
# import on a CPU-only node. It runs on CPU (gloo) without a GPU; the README gives the size.
# The folder ($CACHE/<rootfs folder>.torch-VERSION) is keyed by the rootfs it was built for, so
# a rebuilt rootfs gets a layer of its own; a second call returns at once.
set -euo pipefail
ROOTFS=${1:?usage: torch.sh ROOTFS [VERSION] [CACHE]}
VERSION=${2:-2.13.0}
CACHE=${3:-${CLUSTERFORGE_CACHE:-/var/cache/clusterforge}}
# the pip the nodes' python3 runs from its wheel (Debian's minbase has none)
PIP=26.3
[ -f "$ROOTFS/.complete" ] || { echo "torch.sh: $ROOTFS is not a complete rootfs (rootfs.sh builds it)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "torch.sh: needs root (mount namespace, overlay, chroot)" >&2; exit 2; }
LAYER="$CACHE/$(basename "$ROOTFS").torch-$VERSION"
if [ -f "$LAYER/.complete" ]; then echo "$LAYER"; exit 0; fi
python3 -m pip --version >/dev/null 2>&1 || { echo "torch.sh: this machine's python3 has no pip" >&2; exit 2; }
# the nodes' interpreter and C library, asked of the rootfs itself
read -r PYVER GLIBC < <(chroot "$ROOTFS" /usr/bin/python3 -S -c \
  'import platform, sys; print("%d.%d" % sys.version_info[:2], platform.libc_ver()[1])')
ARCH=$(uname -m)
# every manylinux tag that C library runs, newest first (an older pip does not widen
# manylinux_2_41 to the older tags by itself), and the legacy names of 2_17, 2_12 and 2_5
PLATFORMS=()
for ((minor = ${GLIBC#*.}; minor >= 5; minor--)); do PLATFORMS+=(--platform "manylinux_2_${minor}_$ARCH"); done
PLATFORMS+=(--platform "manylinux2014_$ARCH" --platform "manylinux2010_$ARCH" --platform "manylinux1_$ARCH")
LOG="$CACHE/torch-$VERSION-$(basename "$ROOTFS").log"
mkdir -p "$CACHE"
TMP=$(mktemp -d "$CACHE/.torch.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP/wheels" "$TMP/layer" "$TMP/work" "$TMP/root"
echo "torch.sh: torch==$VERSION for python $PYVER, glibc $GLIBC, $ARCH ($ROOTFS)" >"$LOG"
# --no-cache-dir: the wheels are gigabytes; kept neither in pip's cache nor after the install
python3 -m pip download --no-cache-dir --disable-pip-version-check --dest "$TMP/wheels" \
  --only-binary=:all: --implementation cp --python-version "$PYVER" --abi "cp${PYVER/./}" \
  "${PLATFORMS[@]}" "torch==$VERSION" "pip==$PIP" >>"$LOG" 2>&1 \
  || { tail -20 "$LOG" >&2; echo "torch.sh: download failed (log: $LOG)" >&2; exit 1; }
du -sh "$TMP/wheels" >>"$LOG"
unshare --mount --propagation private bash -c '
  set -e; lower=$1; t=$2; version=$3; pip=$4; r=$t/root
  mount -t overlay overlay -o "lowerdir=$lower,upperdir=$t/layer,workdir=$t/work" "$r"
  mount -t proc proc "$r/proc"; mount --rbind /dev "$r/dev"
  mount -t tmpfs tmpfs "$r/tmp"
  mount --bind "$t/wheels" "$r/mnt"; mount -o remount,bind,ro "$r/mnt"
  run() { chroot "$r" env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/tmp LANG=C.UTF-8 "$@"; }
  # --break-system-packages: Debian marks its python3 externally managed (PEP 668); pip then
  # installs into /usr/local, which is where Debian lets pip put what root installs
  run python3 "/mnt/pip-$pip-py3-none-any.whl/pip" install --no-index --find-links /mnt --no-cache-dir \
    --break-system-packages --root-user-action=ignore --disable-pip-version-check "torch==$version"
  run env PYTHONDONTWRITEBYTECODE=1 python3 -c "
import torch, torch.distributed as dist
assert torch.__version__.split(\"+\")[0] == \"$version\", torch.__version__
assert dist.is_available() and dist.is_gloo_available(), \"no gloo\"
print(\"torch\", torch.__version__, \"gloo ok\")"
  run torchrun --help >/dev/null
' _ "$ROOTFS" "$TMP" "$VERSION" "$PIP" >>"$LOG" 2>&1 \
  || { tail -20 "$LOG" >&2; echo "torch.sh: install failed (log: $LOG)" >&2; exit 1; }
# the layer is /usr/local only: anything else the overlay recorded (a copied-up folder's
# timestamps, /root) is dropped, so the layer can never hide a file of the rootfs below it
find "$TMP/layer" -mindepth 1 -maxdepth 1 ! -name usr -exec rm -rf {} +
find "$TMP/layer/usr" -mindepth 1 -maxdepth 1 ! -name local -exec rm -rf {} +
[ -d "$TMP/layer/usr/local/lib/python$PYVER/dist-packages/torch" ] \
  || { echo "torch.sh: no torch in the layer's /usr/local (log: $LOG)" >&2; exit 1; }
du -sh "$TMP/layer" >>"$LOG"
touch "$TMP/layer/.complete"
rm -rf "$LAYER"; mv "$TMP/layer" "$LAYER"
echo "$LAYER"
