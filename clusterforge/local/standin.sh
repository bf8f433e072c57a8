#!/bin/bash
# Stand-in vendor repositories for the local cluster (the real ones are unreachable offline).
#   clusterforge/local/standin.sh REPO_ROOT
# Builds packages with the vendors' names and version schemes (dpkg-deb, no compiler), and
# signed apt repositories laid out like the vendors' own:
#   REPO_ROOT/nvidia/   flat repository, like developer.download.nvidia.com/compute/cuda/repos/<distro>/x86_64/
#   REPO_ROOT/grafana/  dists/stable/main, like apt.grafana.com
#   REPO_ROOT/rocm/, REPO_ROOT/amdgpu/  like repo.radeon.com (standin-rocm.sh)
#   REPO_ROOT/efa/      the EFA installer tarball, like efa-installer.amazonaws.com (standin-efa.sh)
# each signed (InRelease) by a throw-away key published as standin-key.asc next to it, so the
# roles' key download, signed-by sources, pinning and holds run exactly as in production.
# The packages' programs are small fakes: nvidia-smi lists the /dev/nvidiaN devices, daemons
# stay in the foreground, dcgm-exporter serves a few metrics on :9400.
set -euo pipefail
ROOT=${1:?REPO_ROOT}
HERE=$(cd "$(dirname "$0")" && pwd)
stamp=$(cat "$0" "$HERE"/standin-rocm.sh "$HERE"/standin-efa.sh | sha256sum | cut -c1-12)
[ -f "$ROOT/.standin-$stamp" ] && exit 0
command -v apt-ftparchive >/dev/null || { echo "apt-ftparchive missing: apt-get install -y apt-utils" >&2; exit 2; }
WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
export GNUPGHOME="$WORK/gnupg"; install -d -m 700 "$GNUPGHOME"
gpg --batch --quiet --passphrase '' --quick-gen-key "clusterforge stand-in repositories <standin@invalid>" ed25519 sign never
KEYID=$(gpg --batch --list-keys --with-colons | awk -F: '/^fpr/ {print $10; exit}')

# pkg NAME VERSION DEPENDS DESCRIPTION [FILE:MODE:CONTENT_FUNCTION ...]
pkg() {
  local name=$1 version=$2 depends=$3 desc=$4 out=$5; shift 5
  local d="$WORK/pkg/$name-$version"; rm -rf "$d"; mkdir -p "$d/DEBIAN"
  {
    echo "Package: $name"; echo "Version: $version"; echo "Architecture: amd64"
    echo "Maintainer: clusterforge tests <standin@invalid>"
    [ -n "$depends" ] && echo "Depends: $depends"
    echo "Description: stand-in for $name ($desc)"
    echo " Built by clusterforge's tests; the real package comes from the vendor's repository."
  } >"$d/DEBIAN/control"
  while [ $# -gt 0 ]; do
    local path=$1 mode=$2 body=$3; shift 3
    mkdir -p "$d$(dirname "$path")"; printf '%s\n' "$body" >"$d$path"; chmod "$mode" "$d$path"
  done
  mkdir -p "$out"
  dpkg-deb --root-owner-group -Zgzip --build "$d" "$out/${name}_${version#*:}_amd64.deb" >/dev/null
}

SLEEPER='#!/bin/sh
# stand-in daemon: stays in the foreground until stopped
trap "exit 0" TERM INT
while :; do sleep 3600 & wait $!; done'

NVSMI='#!/bin/bash
# stand-in nvidia-smi: answers from the GPU device nodes /dev/nvidiaN, as the real one answers from
# the driver: -L, the --query-gpu fields clusterforge reads (index, pci.bus_id, name, uuid,
# ecc.errors.uncorrected.volatile.total: 0), --query-remapped-rows (none pending) and
# `nvlink --status` (18 active links per GPU, an H100 SXM through NVSwitches). A device node that
# disappears is a GPU gone; the others keep their bus ids. Anything else is refused (rc 2).
set -u
minors=()
for d in /dev/nvidia[0-9]*; do [[ $d =~ ^/dev/nvidia([0-9]+)$ && -c $d ]] && minors+=("${BASH_REMATCH[1]}"); done
[ ${#minors[@]} -gt 0 ] || { echo "No devices were found"; exit 6; }
name="NVIDIA H100 80GB HBM3"
bus() { printf "00000000:%02X:00.0" $((0x18 + 16 * $1)); }
uuid() { echo "GPU-standin-$(hostname)-$1"; }
field() {  # field NAME INDEX MINOR
  case $1 in
    index) echo "$2" ;; pci.bus_id|gpu_bus_id) bus "$3" ;; name|gpu_name) echo "$name" ;; uuid|gpu_uuid) uuid "$3" ;;
    ecc.errors.uncorrected.volatile.total) echo 0 ;;
    remapped_rows.pending|remapped_rows.failure) echo No ;;
    remapped_rows.correctable|remapped_rows.uncorrectable) echo 0 ;;
    *) echo "Field \"$1\" is not a valid field to query." >&2; exit 2 ;;
  esac
}
query() {  # query FIELDS: one csv line per GPU
  local i=0 m f line
  IFS=, read -r -a fs <<<"$1"
  for m in "${minors[@]}"; do
    line=""; for f in "${fs[@]}"; do line+="${line:+, }$(field "$f" "$i" "$m")" || exit 2; done
    echo "$line"; i=$((i + 1))
  done
}
case "${1:-}" in
  -L|"")
    i=0; for m in "${minors[@]}"; do echo "GPU $i: $name (UUID: $(uuid "$m"))"; i=$((i + 1)); done ;;
  --query-gpu=*|--query-remapped-rows=*)
    fields=${1#*=}; shift
    case "${1:-}" in --format=csv,noheader|--format=csv,noheader,nounits) ;;
      *) echo "stand-in nvidia-smi: give --format=csv,noheader[,nounits]" >&2; exit 2 ;; esac
    query "$fields" ;;
  nvlink)
    case "${2:-}" in -s|--status) ;; *) echo "stand-in nvidia-smi: nvlink ${2:-} is not supported" >&2; exit 2 ;; esac
    i=0; for m in "${minors[@]}"; do echo "GPU $i: $name (UUID: $(uuid "$m"))"
      for l in $(seq 0 17); do printf "\t Link %d: 26.562 GB/s\n" "$l"; done; i=$((i + 1)); done ;;
  *) echo "stand-in nvidia-smi: $* is not supported" >&2; exit 2 ;;
esac'

EXPORTER='#!/usr/bin/env python3
"""stand-in dcgm-exporter: Prometheus metrics for each /dev/nvidiaN on :9400/metrics

Read at every scrape, like the real exporter reads DCGM: a device node that disappears (a GPU
fallen off the bus) drops its series. DCGM_FI_DEV_XID_ERRORS is 0 unless a test writes a code
into /run/dcgm-standin/xid-<gpu> (the fault a real GPU reports through the driver)."""
import glob, http.server, re, socket
host = socket.gethostname()
def xid(g):
    try:
        return int(open(f"/run/dcgm-standin/xid-{g}").read().strip() or 0)
    except (OSError, ValueError):
        return 0
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        # /dev/nvidiaN only: not nvidiactl, nvidia-uvm or a renamed node like nvidia3.gone
        gpus = sorted(int(m[1]) for p in glob.glob("/dev/nvidia*") if (m := re.fullmatch(r"/dev/nvidia(\d+)", p)))
        lab = lambda g: f"gpu=\"{g}\",UUID=\"GPU-standin-{host}-{g}\",Hostname=\"{host}\",modelName=\"NVIDIA H100 80GB HBM3\""
        body = "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
        body += "".join(f"DCGM_FI_DEV_GPU_TEMP{{{lab(g)}}} 31\n" for g in gpus)
        body += "# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.\n# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n"
        body += "".join(f"DCGM_FI_DEV_XID_ERRORS{{{lab(g)}}} {xid(g)}\n" for g in gpus)
        self.send_response(200); self.send_header("Content-Type", "text/plain; version=0.0.4"); self.end_headers()
        self.wfile.write(body.encode())
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("", 9400), H).serve_forever()'

GRAFANA='#!/usr/bin/env python3
"""stand-in grafana-server: answers /api/health on :3000 and lists provisioned dashboards"""
import glob, http.server, json
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/api/health":
            body = {"database": "ok", "version": "standin"}
        else:
            body = {"dashboards": sorted(glob.glob("/var/lib/grafana/dashboards/**/*.json", recursive=True))}
        self.send_response(200); self.send_header("Content-Type", "application/json"); self.end_headers()
        self.wfile.write(json.dumps(body).encode())
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("", 3000), H).serve_forever()'

# systemd units with the vendors' unit names (the roles start them when the node runs systemd)
unit() { # DESCRIPTION EXECSTART
  printf '[Unit]\nDescription=%s (stand-in)\n\n[Service]\nExecStart=%s\n\n[Install]\nWantedBy=multi-user.target' "$1" "$2"
}
U=/lib/systemd/system
N="$WORK/nvidia"
for v in 570.124.06-0ubuntu1 570.133.20-0ubuntu1; do
  pkg nvidia-driver-570-server-open "$v" "" "NVIDIA datacenter driver, open kernel modules" "$N" \
    /usr/bin/nvidia-smi 0755 "$NVSMI" /usr/bin/nvidia-persistenced 0755 "$SLEEPER" \
    "$U/nvidia-persistenced.service" 0644 "$(unit "NVIDIA Persistence Daemon" /usr/bin/nvidia-persistenced)"
  pkg nvidia-fabricmanager-570 "${v%%-*}-1" "nvidia-driver-570-server-open (= $v)" "NVSwitch fabric manager" "$N" \
    /usr/bin/nv-fabricmanager 0755 "$SLEEPER" /usr/share/nvidia/nvswitch/fabricmanager.cfg 0644 "LOG_LEVEL=4" \
    "$U/nvidia-fabricmanager.service" 0644 "$(unit "NVIDIA fabric manager service" /usr/bin/nv-fabricmanager)"
  pkg libnvidia-nscq-570 "${v%%-*}-1" "" "NVSwitch configuration and query library" "$N"
done
# a newer branch in the same repository: the pin keeps hosts on 570
pkg nvidia-driver-575-server-open 575.51.03-0ubuntu1 "" "NVIDIA datacenter driver (newer branch)" "$N"
pkg cuda-toolkit-12-8 12.8.1-1 "" "CUDA toolkit 12.8" "$N" /usr/local/cuda-12.8/bin/nvcc 0755 '#!/bin/sh
echo "Cuda compilation tools, release 12.8, V12.8.93 (stand-in)"'
for nv in 2.26.2 2.27.3; do
  pkg libnccl2 "$nv-1+cuda12.8" "" "NCCL $nv runtime" "$N"
  pkg libnccl-dev "$nv-1+cuda12.8" "libnccl2 (= $nv-1+cuda12.8)" "NCCL $nv headers" "$N"
done
pkg datacenter-gpu-manager-4-core 1:4.1.1-1 "" "DCGM core" "$N" /usr/bin/nv-hostengine 0755 "$SLEEPER" \
  "$U/nvidia-dcgm.service" 0644 "$(unit "NVIDIA DCGM service" "/usr/bin/nv-hostengine -n")" \
  /usr/bin/dcgmi 0755 '#!/bin/sh
echo "dcgmi stand-in: $*"'
pkg datacenter-gpu-manager-4-cuda12 1:4.1.1-1 "datacenter-gpu-manager-4-core (= 1:4.1.1-1)" "DCGM for CUDA 12" "$N"
pkg datacenter-gpu-manager-exporter 4.1.1-4.0.4-1 "python3" "DCGM exporter" "$N" /usr/bin/dcgm-exporter 0755 "$EXPORTER" \
  "$U/nvidia-dcgm-exporter.service" 0644 "$(unit "NVIDIA DCGM exporter" /usr/bin/dcgm-exporter)" \
  /etc/dcgm-exporter/default-counters.csv 0644 "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).
DCGM_FI_DEV_XID_ERRORS, gauge, Value of the last XID error encountered."
(cd "$N" && apt-ftparchive packages . > Packages && gzip -9kf Packages \
  && apt-ftparchive -o APT::FTPArchive::Release::Origin=standin-nvidia release . > Release \
  && gpg --batch --yes --local-user "$KEYID" --clearsign -o InRelease Release)
gpg --batch --armor --export "$KEYID" > "$N/standin-key.asc"

G="$WORK/grafana"; GP="$G/pool/main"
pkg grafana 11.5.2 "python3" "Grafana" "$GP" /usr/sbin/grafana-server 0755 "$GRAFANA" \
  "$U/grafana-server.service" 0644 "$(unit "Grafana instance" /usr/sbin/grafana-server)"
mkdir -p "$G/dists/stable/main/binary-amd64"
(cd "$G" && apt-ftparchive packages pool > dists/stable/main/binary-amd64/Packages \
  && gzip -9kf dists/stable/main/binary-amd64/Packages \
  && apt-ftparchive -o APT::FTPArchive::Release::Origin=standin-grafana -o APT::FTPArchive::Release::Suite=stable \
       -o APT::FTPArchive::Release::Codename=stable -o APT::FTPArchive::Release::Components=main \
       -o APT::FTPArchive::Release::Architectures=amd64 release dists/stable > dists/stable/Release \
  && gpg --batch --yes --local-user "$KEYID" --clearsign -o dists/stable/InRelease dists/stable/Release)
gpg --batch --armor --export "$KEYID" > "$G/standin-key.asc"

# ROCm (repo.radeon.com's layout): rocm/apt/<ver>/ and amdgpu/<ver>/ubuntu/, suite jammy, Origin
# repo.radeon.com (the role's rocm-pin-600 matches on it), one key published as AMD's rocm.gpg.key
. "$HERE/standin-rocm.sh"  # sourced: uses pkg, WORK and KEYID from here
# EFA: the installer tarball (efa-installer.amazonaws.com's name and layout) and its SHA256SUMS
. "$HERE/standin-efa.sh"   # sourced: uses pkg, WORK and ROOT/debian (the real rdma-core .debs)

rm -rf "$ROOT/nvidia" "$ROOT/grafana" "$ROOT/rocm" "$ROOT/amdgpu" "$ROOT/efa"
mv "$N" "$ROOT/nvidia"; mv "$G" "$ROOT/grafana"
mv "$WORK/rocm" "$ROOT/rocm"; mv "$WORK/amdgpu" "$ROOT/amdgpu"; mv "$WORK/efa" "$ROOT/efa"
rm -f "$ROOT"/.standin-*; touch "$ROOT/.standin-$stamp"
