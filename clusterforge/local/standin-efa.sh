# Sourced by standin.sh (uses its pkg, WORK and ROOT): a stand-in AWS EFA installer,
#   efa/aws-efa-installer-<ver>.tar.gz  + efa/SHA256SUMS
# laid out like the real one (efa-installer.amazonaws.com/aws-efa-installer-<ver>.tar.gz, whose
# efa_installer.sh reads env.sh and package_list.txt and installs DEBS/<DISTRO>/<arch>/*.deb, the
# rdma-core/ and efa-driver/ subfolders, and writes /opt/amazon/efa_installed_packages):
#   aws-efa-installer/efa_installer.sh   the real one's flags: -y -u -n -l -k -g -m -d -h (long forms too)
#   aws-efa-installer/env.sh             EFA_INSTALLER_VERSION
#   aws-efa-installer/package_list.txt   every package path; anything else is refused, as the real one does
#   aws-efa-installer/DEBS/DEBIAN12/x86_64/            libfabric-aws, openmpi40-aws, efa-config,
#                                                      efa-profile, aws-ofi-nccl (stand-ins)
#   aws-efa-installer/DEBS/DEBIAN12/x86_64/rdma-core/  Debian's own rdma-core .debs (real; AWS
#                                                      ships its own rdma-core build here)
#   aws-efa-installer/DEBS/DEBIAN12/x86_64/efa-driver/ efa (the DKMS kernel module; stand-in, no module)
# Component versions follow EFA installer 1.41.0's list (libfabric-aws 2.1.0-1, efa 2.15.0-1,
# efa-config 1.18-1, efa-profile 1.7-1, openmpi40-aws 4.1.7-2; aws-parallelcluster-cookbook PR 2953);
# the stand-in does not claim to be any one release's bit-for-bit contents.
FI_INFO='#!/bin/bash
# stand-in fi_info (libfabric): the efa provider answers only where an EFA device exists
# (an "efa" RDMA device in /sys/class/infiniband), as the real provider does
case "${1:-}" in --version) echo "fi_info: 2.1.0amzn3.0 (stand-in)"; echo "libfabric: 2.1.0amzn3.0"; exit 0 ;; esac
prov=""; while [ $# -gt 0 ]; do case "$1" in -p|--provider) prov=$2; shift ;; esac; shift; done
found=0
for d in /sys/class/infiniband/*; do
  [ -e "$d/device/driver" ] && [ "$(basename "$(readlink -f "$d/device/driver")")" = efa ] && found=1
done
if [ "$found" = 1 ] && { [ -z "$prov" ] || [ "$prov" = efa ]; }; then
  echo "provider: efa"; echo "    fabric: efa"; echo "    type: FI_EP_RDM"; exit 0
fi
echo "fi_getinfo: -61 (No data available)" >&2; exit 1'

EFA_INSTALLER='#!/bin/bash
# Stand-in for the AWS EFA installer (efa_installer.sh): the real one'"'"'s options, checks and
# bookkeeping; its packages come from this folder.
source ./env.sh
[ -n "${EFA_INSTALLER_VERSION:-}" ] || { echo "Installer version is not defined in env.sh" >&2; exit 1; }
DIR=$(cd "$(dirname "$0")" && pwd)
INSTALLED_PKGS_FILE=/opt/amazon/efa_installed_packages
UNATTENDED=0; NO_VERIFY=0; SKIP_LIMITS=0; SKIP_KMOD=0; MINIMAL=0; UNINSTALL=0; DBG_PKGS=0
usage() {
  cat <<EOF
usage: $(basename "$0") [options]

Options:
 -d, --debug-packages	Install debug packages
 -u, --uninstall	Uninstall EFA packages
 -y, --yes		Run installer without prompting for confirmation
 -n, --no-verify	Skip EFA device verification and test
 -l, --skip-limit-conf	Skip EFA limit configuration
 -k, --skip-kmod	Skip EFA kmod installation
 -g, --enable-gdr       Enable GPUDirect RDMA support. This option is not needed as the support is enabled by default.
 -m, --minimal          Only install kernel module and rdma-core, do not install openmpi and libfabric
EOF
}
while [ $# -gt 0 ]; do
  case "$1" in
  -d|--debug-packages) DBG_PKGS=1 ;; -u|--uninstall) UNINSTALL=1 ;; -y|--yes) UNATTENDED=1 ;;
  -n|--no-verify) NO_VERIFY=1 ;; -l|--skip-limit-conf) SKIP_LIMITS=1 ;; -k|--skip-kmod) SKIP_KMOD=1 ;;
  -g|--enable-gdr) ;; -m|--minimal) MINIMAL=1 ;; -h|--help) usage; exit 0 ;;
  *) echo "Error: unknown option $1" >&2; usage >&2; exit 1 ;;
  esac; shift
done
[ "$(id -u)" = 0 ] || { echo "Error: the installer needs root" >&2; exit 1; }
. /etc/os-release
[ "$ID" = debian ] && [ "$VERSION_ID" = 12 ] || { echo "Unsupported operating system." >&2; exit 1; }
base=DEBS/DEBIAN12/x86_64
if [ "$UNINSTALL" = 1 ]; then
  [ -f "$INSTALLED_PKGS_FILE" ] || exit 0
  mapfile -t names < <(grep -v "^#" "$INSTALLED_PKGS_FILE" | tr " " "\n" | sed "s/_.*//" | grep .)
  DEBIAN_FRONTEND=noninteractive apt-get remove -y "${names[@]}" && rm -f "$INSTALLED_PKGS_FILE"; exit $?
fi
[ "$UNATTENDED" = 1 ] || { echo "Error: this stand-in never prompts: run it with -y" >&2; exit 1; }
paths=("$base"/rdma-core/*.deb)
[ "$SKIP_KMOD" = 1 ] || paths+=("$base"/efa-driver/*.deb)
[ "$MINIMAL" = 1 ] || paths+=("$base"/*.deb)
for p in "${paths[@]}"; do
  grep -Fxq "$p" package_list.txt || { echo "Error: unknown package found: $p"; echo "Please remove unknown packages from the RPMS/DEBS directory trees"; exit 1; }
done
echo "== Installing EFA packages =="
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(printf "$DIR/%s " "${paths[@]}") \
  || { echo "Error: Failed to install packages." >&2; exit 1; }
if [ "$SKIP_LIMITS" = 0 ]; then
  mkdir -p /etc/security/limits.d
  printf "* hard memlock unlimited\n* soft memlock unlimited\n" >/etc/security/limits.d/efa.conf
fi
mkdir -p /opt/amazon
{ echo "# EFA installer version: ${EFA_INSTALLER_VERSION}"; echo "# Debug packages installed: no"
  echo "# Packages installed:"; for p in "${paths[@]}"; do basename "$p" .deb; done | tr "\n" " "; echo; } >"$INSTALLED_PKGS_FILE"
if [ "$NO_VERIFY" = 0 ]; then
  echo "== Testing EFA device =="
  # the real one looks for PCI id 1d0f:efa* (lspci) and runs efa_test.sh; here: an efa RDMA device
  if ! readlink -f /sys/class/infiniband/*/device/driver 2>/dev/null | grep -q "/efa$"; then
    echo "Error: no EFA device found (lspci shows no 1d0f:efa*); on an instance without EFA use --no-verify" >&2
    exit 1
  fi
fi
echo "===================================================="
echo "EFA installation complete."
echo "===================================================="'

EV=1.40.0
E="$WORK/efa-build/aws-efa-installer"; EB="$E/DEBS/DEBIAN12/x86_64"
mkdir -p "$EB/rdma-core" "$EB/efa-driver" "$WORK/efa"
pkg libfabric-aws 2.1.0amzn3.0 "" "libfabric with the AWS efa provider" "$EB" \
  /opt/amazon/efa/bin/fi_info 0755 "$FI_INFO" /opt/amazon/efa/lib/libfabric.so.1 0644 "stand-in" \
  /etc/ld.so.conf.d/efa.conf 0644 "/opt/amazon/efa/lib"
pkg openmpi40-aws 4.1.7-2 "" "Open MPI 4 built for EFA" "$EB" /opt/amazon/openmpi/bin/mpirun 0755 '#!/bin/sh
echo "mpirun (Open MPI) 4.1.7 (stand-in)"'
pkg efa-config 1.18-1 "" "EFA configuration (udev rules, hugepages)" "$EB" \
  /etc/udev/rules.d/70-efa.rules 0644 '# stand-in: the real rule gives /dev/infiniband/uverbs* to everyone'
pkg efa-profile 1.7-1 "" "EFA environment for login shells" "$EB" /etc/profile.d/efa.sh 0644 \
  'PATH=/opt/amazon/efa/bin:/opt/amazon/openmpi/bin:$PATH'
pkg aws-ofi-nccl 1.14.0-1 "" "NCCL net plugin over libfabric (aws-ofi-nccl)" "$EB" \
  /opt/amazon/ofi-nccl/lib/libnccl-net.so 0644 "stand-in"
pkg efa 2.15.0-1 "" "EFA kernel module (DKMS)" "$EB/efa-driver" /usr/src/efa-2.15.0/dkms.conf 0644 'PACKAGE_NAME="efa"'
for n in rdma-core ibverbs-providers libibverbs1 ibverbs-utils librdmacm1 infiniband-diags libibumad3 libibmad5 libibnetdisc5; do
  # Debian 13's 64-bit time_t transition renamed some libraries (librdmacm1t64, libibnetdisc5t64)
  f=$(ls "$ROOT/debian/${n}_"*_amd64.deb "$ROOT/debian/${n}t64_"*_amd64.deb 2>/dev/null | head -1 || true)
  [ -n "$f" ] || { echo "standin-efa: $n is not in $ROOT/debian (add it to packages.txt)" >&2; exit 1; }
  cp "$f" "$EB/rdma-core/"
done
printf '%s\n' "$EFA_INSTALLER" >"$E/efa_installer.sh"; chmod 755 "$E/efa_installer.sh"
printf 'EFA_INSTALLER_VERSION=%s\n' "$EV" >"$E/env.sh"
(cd "$E" && find DEBS -name '*.deb' | sort >package_list.txt)
tar -C "$WORK/efa-build" -czf "$WORK/efa/aws-efa-installer-$EV.tar.gz" aws-efa-installer
(cd "$WORK/efa" && sha256sum "aws-efa-installer-$EV.tar.gz" >SHA256SUMS)
