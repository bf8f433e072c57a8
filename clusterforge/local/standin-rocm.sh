# Sourced by standin.sh (uses its pkg, WORK and KEYID): stand-in ROCm repositories laid out like
# repo.radeon.com, which the rocm role adds as
#   deb [signed-by=...] <rocm_repo_url>        jammy main   # https://repo.radeon.com/rocm/apt/<ver>
#   deb [signed-by=...] <rocm_amdgpu_repo_url> jammy main   # https://repo.radeon.com/amdgpu/<ver>/ubuntu
# Packages keep AMD's names and version scheme (<upstream>.<60300>-<build>~22.04; amdgpu-dkms with
# its epoch). `rocm` here depends on the runtime pieces a Slurm GPU node uses (rocm-hip-runtime,
# rocm-smi-lib, rccl), not on AMD's whole SDK. Their programs are fakes: rocm-smi lists the
# /dev/dri/renderD* nodes the local layer made (clusterforge/local/standin_hw.py).
# Release files say Origin: repo.radeon.com, so the role's rocm-pin-600 (AMD's install guide)
# applies to them as it does to AMD's.
for rv in 6.3; do
  RB="6.3.0.60300-39~22.04"; OPT=/opt/rocm-6.3.0
  RP="$WORK/rocm/apt/$rv/pool/main"; AP="$WORK/amdgpu/$rv/ubuntu/pool/main"
  ROCMSMI='#!/bin/bash
# stand-in rocm-smi: one line per AMD GPU render node (/dev/dri/renderD128...); nothing else
i=0
for d in /dev/dri/renderD*; do [ -c "$d" ] || continue
  printf "GPU[%d]\t\t: Card series: \t\tAMD Instinct MI300X (stand-in %s)\n" "$i" "$d"; i=$((i+1)); done
[ $i -gt 0 ] || { echo "WARNING: No AMD GPUs specified"; exit 2; }'
  pkg rocm-core "$RB" "" "ROCm core (version file)" "$RP" "$OPT/.info/version" 0644 "6.3.0-39"
  pkg rocm-smi-lib "7.4.0.60300-39~22.04" "rocm-core" "ROCm System Management Interface" "$RP" \
    "$OPT/bin/rocm-smi" 0755 "$ROCMSMI"
  pkg hip-runtime-amd "6.3.42131.60300-39~22.04" "rocm-core" "HIP runtime for AMD GPUs" "$RP" \
    "$OPT/lib/libamdhip64.so.6" 0644 "stand-in"
  pkg rocm-hip-runtime "$RB" "hip-runtime-amd, rocm-core" "ROCm HIP runtime meta package" "$RP"
  pkg rccl "2.21.5.60300-39~22.04" "rocm-core" "ROCm Communication Collectives Library" "$RP" \
    "$OPT/lib/librccl.so.1" 0644 "stand-in"
  pkg rocm "$RB" "rocm-hip-runtime, rocm-smi-lib, rccl" "ROCm meta package (runtime subset)" "$RP"
  pkg amdgpu-dkms "1:6.10.5.60300-2084815.22.04" "" "amdgpu kernel driver sources for DKMS" "$AP" \
    /usr/src/amdgpu-6.10.5-2084815.22.04/dkms.conf 0644 'PACKAGE_NAME="amdgpu"
# stand-in: no module is built (a local node shares the machine'"'"'s kernel)'
  for base in "$WORK/rocm/apt/$rv" "$WORK/amdgpu/$rv/ubuntu"; do
    mkdir -p "$base/dists/jammy/main/binary-amd64"
    (cd "$base" && apt-ftparchive packages pool > dists/jammy/main/binary-amd64/Packages \
      && gzip -9kf dists/jammy/main/binary-amd64/Packages \
      && apt-ftparchive -o APT::FTPArchive::Release::Origin=repo.radeon.com -o APT::FTPArchive::Release::Suite=jammy \
           -o APT::FTPArchive::Release::Codename=jammy -o APT::FTPArchive::Release::Components=main \
           -o APT::FTPArchive::Release::Architectures=amd64 release dists/jammy > dists/jammy/Release \
      && gpg --batch --yes --local-user "$KEYID" --clearsign -o dists/jammy/InRelease dists/jammy/Release)
  done
done
# AMD publishes one key for both repositories at https://repo.radeon.com/rocm/rocm.gpg.key
gpg --batch --armor --export "$KEYID" > "$WORK/rocm/rocm.gpg.key"
