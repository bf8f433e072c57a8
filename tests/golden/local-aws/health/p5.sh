#!/bin/bash
# clusterforge-healthcheck for node group p5 of cluster local-aws (Slurm 22.05).
# Rendered by clusterforge from the spec's health_checks and this group's hardware profile.
#
#   clusterforge-healthcheck            slurm.conf's HealthCheckProgram: slurmd runs it every
#                                       300 s and when it starts, and kills it after 60 s
#   clusterforge-healthcheck prolog     the fast checks before each job (slurm.conf Prolog folder)
#   clusterforge-healthcheck epilog     the fast checks after each job, then dcgmi diag -r 1
#   clusterforge-healthcheck --dry-run  every check once, printed; changes nothing
#
# Drains only what it must, and only its own:
# - a check drains the node after failing 2 run(s) in a row (counted in /run/clusterforge-healthcheck/failures);
#   the prolog and epilog try 2 time(s), 2 s apart, before they drain;
# - the drain reason is "clusterforge-healthcheck: <what failed and its value>";
# - a node whose drain reason starts with "clusterforge-healthcheck:" is resumed (scontrol update
#   State=RESUME) when every check passes again; a node with any other reason (an operator's
#   drain, Slurm's own) is never drained, resumed or given another reason by this program.
# Every run appends a line to /run/clusterforge-healthcheck/log.
# CLUSTERFORGE_HC_ROOT, _STATE and _RETRY_PAUSE move /dev, /sys, /proc, the spool, the state folder
# and the pause for tests (tests/test_healthcheck.py); slurmd sets none of them.
# shellcheck disable=SC2317  # the check_* functions are called by name ("check_$c")
set -u
PATH=${PATH:+$PATH:}/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
R=${CLUSTERFORGE_HC_ROOT:-}
STATE=${CLUSTERFORGE_HC_STATE:-/run/clusterforge-healthcheck}
PAUSE=${CLUSTERFORGE_HC_RETRY_PAUSE:-2}
PREFIX="clusterforge-healthcheck:"
FAILURES=2
mode=${1:-periodic}
case $mode in
  periodic | prolog | epilog) ;;
  --dry-run) mode=dry-run ;;
  *) echo "usage: $0 [prolog|epilog|--dry-run]" >&2; exit 2 ;;
esac
node=${SLURMD_NODENAME:-$(hostname -s)}

# ------------------------------------------------------------------------------------ checks
# Each prints what it found wrong (one line, the drain reason's value) and returns 1, or returns 0.

# nvidia-smi ARGS: its output; or, returning 1, why it gave none (a hung driver shows up as a
# timeout; nvidia-smi prints its own errors on stdout)
smi() {
  local out rc
  out=$(timeout 20 nvidia-smi "$@" 2>/dev/null)
  rc=$?
  if [ "$rc" -eq 124 ]; then
    echo "nvidia-smi did not answer within 20 s"
    return 1
  elif [ "$rc" -ne 0 ]; then
    echo "nvidia-smi failed (rc $rc: $(printf '%s\n' "$out" | head -n 1 | cut -c1-100))"
    return 1
  fi
  printf '%s\n' "$out"
}

# 8 nvidia GPU(s): every device file, and nvidia-smi listing each GPU.
check_gpu_count() {
  local want=8 have=0 missing="" dev
  for dev in /dev/nvidia0 /dev/nvidia1 /dev/nvidia2 /dev/nvidia3 /dev/nvidia4 /dev/nvidia5 /dev/nvidia6 /dev/nvidia7; do
    if [ -c "$R$dev" ]; then have=$((have + 1)); else missing="$missing $dev"; fi
  done
  if [ "$have" -ne "$want" ]; then
    echo "gpu count $have of $want (${missing# } missing)"
    return 1
  fi
  local out listed
  if ! out=$(smi --query-gpu=index,pci.bus_id --format=csv,noheader); then
    echo "$out"
    return 1
  fi
  listed=$(printf '%s\n' "$out" | grep -c '[^[:space:]]')
  if [ "$listed" -ne "$want" ]; then
    echo "gpu count $listed of $want (nvidia-smi lists $listed)"
    return 1
  fi
  return 0
}

# Xid events since boot whose resolution is a GPU reset or a reboot (48 64 74 79 95 119 120 143), from the
# kernel log (dmesg, else the journal's kernel messages); an unreadable log drains nothing.
check_xid() {
  local log hit
  if ! log=$(timeout 20 dmesg 2>/dev/null); then
    log=$(timeout 20 journalctl -k -b -q -o cat --no-pager 2>/dev/null) || return 0
  fi
  # "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
  hit=$(printf '%s\n' "$log" | sed -n -E 's/.*NVRM: Xid \((PCI:)?([^)]*)\): ([0-9]+).*/\3 \2/p' |
    awk '{ split("48 64 74 79 95 119 120 143", c, " "); for (i in c) if ($1 == c[i]) { print; exit } }')
  if [ -n "$hit" ]; then
    echo "xid ${hit% *} on gpu ${hit#* } since boot"
    return 1
  fi
  return 0
}

# Memory a GPU must be reset for: pending row remaps, a row remap that failed, and uncorrectable ECC errors since
# the driver loaded.
check_gpu_memory() {
  local out idx bus n pending failed
  if ! out=$(smi --query-gpu=index,pci.bus_id,ecc.errors.uncorrected.volatile.total --format=csv,noheader,nounits); then
    echo "$out"
    return 1
  fi
  while IFS=', ' read -r idx bus n; do
    case $n in '' | *[!0-9]*) continue ;; esac  # [N/A]: ECC off or not reported
    if [ "$n" -gt 0 ]; then
      echo "gpu $idx ($bus) $n uncorrectable ECC error(s) since the driver loaded"
      return 1
    fi
  done <<<"$out"
  if ! out=$(smi --query-remapped-rows=gpu_bus_id,remapped_rows.pending,remapped_rows.failure --format=csv,noheader); then
    echo "$out"
    return 1
  fi
  while IFS=', ' read -r bus pending failed; do
    case $failed in Yes | yes | 1 | true) echo "gpu $bus row remap failed (replace the GPU)"; return 1 ;; esac
    case $pending in Yes | yes | 1 | true) echo "gpu $bus row remap pending (reset the GPU)"; return 1 ;; esac
  done <<<"$out"
  return 0
}

# NVLink: through the NVSwitches each GPU has 18 links, every one active ("Link N: 26.562 GB/s";
# a link down reads "<inactive>").
check_nvlink() {
  local out bad
  if ! out=$(smi nvlink --status); then
    echo "$out"
    return 1
  fi
  bad=$(printf '%s\n' "$out" | awk -v want=18 '
    function done_gpu() { if (gpu != "" && up < want) { printf "nvlink gpu %s %d of %d links active", gpu, up, want; found = 1; exit } }
    /^GPU [0-9]+:/ { done_gpu(); gpu = $2; sub(":", "", gpu); up = 0; next }
    /Link [0-9]+: [0-9.]+ GB\/s/ { up++ }
    END { if (!found) done_gpu() }')
  if [ -n "$bad" ]; then
    echo "$bad"
    return 1
  fi
  return 0
}

# Slurm's spool (SlurmdSpoolDir): job scripts and step state need room.
check_spool() {
  local spool="/var/spool/slurmd" free
  spool=${spool//%n/$node}
  free=$(df -Pk "$R$spool" 2>/dev/null | awk 'NR == 2 { print int($4 / 1024) }')
  if [ -z "$free" ]; then
    echo "slurm spool $spool missing"
    return 1
  fi
  if [ "$free" -lt 1024 ]; then
    echo "slurm spool $spool $free MiB free, below 1024 MiB"
    return 1
  fi
  return 0
}

# DCGM's diagnostic, level 1, on every GPU: after each job, and while the node is drained for it
# (how it returns).
check_dcgm_diag() {
  local out
  if ! out=$(timeout 40 dcgmi diag -r 1 2>&1); then
    # the first failing test of dcgmi's table ("| Memory | Fail - GPU 3: ... |")
    echo "dcgm diag level 1 failed ($(printf '%s\n' "$out" | grep -m 1 -i 'fail' |
      sed -E 's/[| ]+/ /g; s/^ //; s/ $//' | cut -c1-80))"
    return 1
  fi
  return 0
}

# The checks of each mode, in order (the first failing one names the drain).
checks_periodic="gpu_count xid gpu_memory nvlink spool"
checks_prolog="gpu_count spool"
checks_epilog="gpu_count spool dcgm_diag"
checks_all="gpu_count xid gpu_memory nvlink spool dcgm_diag"

# ------------------------------------------------------------------------------- the rules

say() {
  mkdir -p "$STATE" 2>/dev/null
  printf '%s %s by=%s %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$mode" "$(cat "/proc/$PPID/comm" 2>/dev/null)" "$*" \
    >>"$STATE/log" 2>/dev/null
  echo "clusterforge-healthcheck: $*" >&2
}

# The node's state and drain reason as slurmctld has them ("   State=IDLE+DRAIN ThreadsPerCore=..."
# and "   Reason=<text> [root@2025-01-01T00:00:00]"); returns 1 when slurmctld does not answer.
node_state=""
node_reason=""
read_node() {
  local out
  node_state=""
  node_reason=""
  out=$(timeout 15 scontrol show node "$node" 2>/dev/null) || return 1
  node_state=$(printf '%s\n' "$out" | sed -n -E 's/^ *State=([^ ]*).*/\1/p' | head -n 1)
  node_reason=$(printf '%s\n' "$out" | sed -n -E 's/^ *Reason=//p' | head -n 1 | sed -E 's/ \[[^]]*\]$//')
  [ -n "$node_state" ]
}

# 0: the node's reason is this program's; 1: it has none; 2: someone else's (never touched)
reason_owner() {
  case $node_reason in
    "$PREFIX"*) return 0 ;;
    "") return 1 ;;
    *) return 2 ;;
  esac
}

# drain VALUE: drain the node with this program's reason, read back just before (so a drain an
# operator set meanwhile is kept); 1 when the node could not be drained
drain() {
  if ! read_node; then
    say "failing: $1; slurmctld did not answer, not drained"
    return 1
  fi
  reason_owner
  case $? in
    0) say "still failing: $1; drained since: ${node_reason#"$PREFIX" }"; return 0 ;;
    2) say "failing: $1; left alone, drained by someone else: $node_reason"; return 0 ;;
  esac
  if timeout 15 scontrol update NodeName="$node" State=DRAIN Reason="$PREFIX $1" >/dev/null 2>&1; then
    say "drain: $1"
    return 0
  fi
  say "failing: $1; scontrol could not drain the node"
  return 1
}

# every check passed: resume the node if this program drained it
resume_if_ours() {
  if ! read_node; then
    say "pass"
    return 0
  fi
  reason_owner
  case $? in
    1) say "pass"; return 0 ;;
    2) say "pass; left alone, drained by someone else: $node_reason"; return 0 ;;
  esac
  case $node_state in
    *DRAIN* | *FAIL*) ;;
    *) say "pass"; return 0 ;;
  esac
  if timeout 15 scontrol update NodeName="$node" State=RESUME >/dev/null 2>&1; then
    say "pass; resume (was drained for: ${node_reason#"$PREFIX" })"
  else
    say "pass; scontrol could not resume the node"
  fi
}

# run_checks "NAMES": 0 when all pass, else 1 with the first failure in failed_name/failed_value
failed_name=""
failed_value=""
run_checks() {
  local c out
  failed_name=""
  failed_value=""
  for c in $1; do
    if ! out=$("check_$c"); then
      failed_name=$c
      failed_value=${out:-$c failed}
      return 1
    fi
  done
  return 0
}

case $mode in
  dry-run)
    rc=0
    for c in $checks_all; do
      if out=$("check_$c"); then echo "pass $c"; else echo "FAIL $c: $out"; rc=1; fi
    done
    exit $rc
    ;;
  prolog | epilog)
    if [ "$mode" = prolog ]; then list=$checks_prolog; else list=$checks_epilog; fi
    try=1
    while ! run_checks "$list"; do
      if [ "$try" -ge "$FAILURES" ]; then
        if drain "$failed_value${SLURM_JOB_ID:+ ($mode of job $SLURM_JOB_ID)}" && [ "$mode" = epilog ]; then
          exit 0  # drained with this program's reason; a failing epilog would only add Slurm's own
        fi
        exit 1  # the prolog fails the job: slurmd requeues it, slurmctld keeps the drain reason set here
      fi
      say "attempt $try of $FAILURES failed: $failed_value"
      try=$((try + 1))
      sleep "$PAUSE"
    done
    exit 0
    ;;
esac

# periodic: one run at a time (slurmctld asks again after the interval even if this one is slow)
mkdir -p "$STATE" || exit 1
exec 9>"$STATE/lock"
flock -n 9 || exit 0
if [ "$(wc -l <"$STATE/log" 2>/dev/null || echo 0)" -gt 2000 ]; then
  tail -n 1000 "$STATE/log" >"$STATE/log.new" && mv -f "$STATE/log.new" "$STATE/log"
fi
list=$checks_periodic
case $checks_all in
  *dcgm_diag*)
    # drained by the epilog's diagnostic: only a passing diagnostic returns the node
    if read_node && reason_owner; then
      case $node_reason in *"dcgm diag"*) list="$list dcgm_diag" ;; esac
    fi
    ;;
esac
: >"$STATE/failures.new"
summary=""
for c in $list; do
  out=$("check_$c") && continue
  out=${out:-$c failed}
  n=$(awk -v c="$c" '$1 == c { print $2 }' "$STATE/failures" 2>/dev/null)
  n=$((${n:-0} + 1))
  printf '%s %s %s\n' "$c" "$n" "$out" >>"$STATE/failures.new"
  summary="$summary $c $n of $FAILURES: $out;"
  if [ -z "$failed_name" ] && [ "$n" -ge "$FAILURES" ]; then
    failed_name=$c
    failed_value=$out
  fi
done
mv -f "$STATE/failures.new" "$STATE/failures"
if [ -z "$summary" ]; then
  resume_if_ours
  exit 0
fi
if [ -n "$failed_name" ]; then
  drain "$failed_value"
else
  say "failing, not draining yet:$summary"
fi
exit 1
