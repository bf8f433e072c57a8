#!/bin/bash
# The local cluster's nodes: each one a host of its own on this machine. A node is an overlay
# copy of a cached Debian minbase rootfs (rootfs.sh: bookworm or trixie, with systemd), in its
# own network namespace on one bridge that lives in a namespace of its own, beside a local apt
# repository served on the bridge. NODES_BOOT (at `up`/`bridge`; recorded for `boot`) says how
# a node boots:
#   systemd  systemd-nspawn -b: systemd is PID 1 and runs the roles' units (the production path;
#            needs systemd-nspawn from systemd-container, no systemd on this host: --keep-unit
#            --register=no)
#   chroot   (this script's default: the AWS flavour's instances, whose user data the hypervisor
#            runs) own PID, mount and UTS namespaces with sshd as PID 1; daemons run under the
#            roles' clusterforge-svc supervisor. `clusterforge local up` boots on-prem nodes with
#            systemd unless told --boot chroot
# At `up` (recorded for `boot`), two optional additions every node gets:
#   NODES_LAYERS  read-only layers stacked over the rootfs, colon-separated, top first (e.g. the
#                 PyTorch layer of torch.sh): one copy on this machine, seen by every node
#   NODES_BINDS   SRC:DST pairs, space-separated: folders of this machine bound at DST in every
#                 node (the stand-in for a shared file system: the nodes share one kernel)
# A node named in STATE/node-images ("NAME FOLDER" lines, written before `up`) gets that folder,
# its node group's baked image (clusterforge/local/image.py), between the layers and the rootfs.
# No Docker; needs root, iproute2, util-linux.
#
#   nodes.sh up   STATE ROOTFS REPO NET PREFIX NAME=ADDR[:gpuN] ...   # NET like 10.79.0
#   nodes.sh bridge STATE ROOTFS REPO NET PREFIX   # the bridge and the repository only (no nodes)
#   nodes.sh boot STATE NAME=ADDR[:gpuN]      # one more node on a bridge that is up (AWS flavour:
#                                             # an instance the emulated EC2 launched)
#   nodes.sh kill STATE NAME                  # stop one node and delete its namespace and disk
#   nodes.sh spawn STATE PIDFILE NETNS LOG CMD...  # a daemon that outlives the caller, in NETNS,
#                                             # recorded (PIDFILE and STATE/pids) for kill/down
#   nodes.sh down STATE                       # safe to run twice, or after a crash
#   nodes.sh exec STATE NAME CMD...           # run CMD inside node NAME (its namespaces and root)
#   nodes.sh ctl  STATE CMD...                # run CMD on the bridge side (where Ansible runs)
#   nodes.sh alive STATE NAME                 # exit 0 when node NAME is running
#
# NET.1 is the bridge, the repository (port 8081) and the Ansible side. A node NAME=ADDR:gpu8
# gets eight fake /dev/nvidiaN character devices (major 195) plus /dev/nvidiactl in its private
# /dev (a booted node: in nspawn's /dev, made after boot). Everything started is recorded in
# STATE (pids, netns, hostnames) and `down` removes
# exactly that: it kills the recorded PIDs (each node's PID namespace dies with its PID 1, its
# mounts with it), deletes the recorded namespaces, rmdirs the cgroup folders the nodes' slurmds
# made and deletes the overlay layers. It never touches anything it did not record.
set -euo pipefail
cmd=${1:?usage: $0 up|down|exec|ctl|alive STATE ...}; STATE=${2:?STATE}
PORT=8081

log() { echo "nodes: $*" >&2; }

# A recorded PID is signalled only while it is still the process that was recorded: one that
# ended long ago may have handed its PID to an unrelated process (pid_max is 32768 on these
# machines, and a busy one wraps it within a CI run), for example a process of another local
# cluster running beside this one. So each PID is recorded with its start time (field 22 of
# /proc/PID/stat, clock ticks since boot) in STATE/pids.start, and `kill`/`down` signal a PID
# only when that start time still matches. A PID recorded before start times were kept has no
# entry and is signalled as before.
starttime() { # PID: its start time, or nothing when there is no such process (or it has ended: a zombie)
  local s f
  s=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  s=${s##*) }  # the command name (field 2) may hold blanks and parentheses
  read -r -a f <<<"$s"
  [ "${f[0]:-}" = Z ] || echo "${f[19]:-}"
}
record_pid() { # PID: its start time into STATE/pids.start
  echo "$1 $(starttime "$1")" >>"$STATE/pids.start"
}
# Recorded before it exists (write-ahead): `up` killed at any instant (a closed terminal, an OOM
# kill) leaves nothing that `down` does not know of. A namespace's name is written before `ip
# netns add`; a started process writes its own PID (self_record, in the child before it execs)
# before it leaves the caller's process group, so the parent's `$!` is never the only record.
# `down` tolerates a name recorded but never made.
self_record() { # in a child started with `&`: its own PID into STATE/pids and STATE/pids.start
  echo "$BASHPID" >>"$STATE/pids"; record_pid "$BASHPID"
}
ours() { # PID: true while PID is the process recorded under it
  local want
  want=$(awk -v p="$1" '$1 == p { s = $2; n = 1 } END { if (n) print (s == "" ? "-" : s) }' \
    "$STATE/pids.start" 2>/dev/null || true)
  [ -n "$want" ] || return 0  # not recorded with a start time (an older state folder)
  [ "$(starttime "$1")" = "$want" ]
}
load_net() { # NET and PREFIX of a cluster that is up
  [ -f "$STATE/net.env" ] || { echo "no local cluster in $STATE (nothing is up)" >&2; exit 3; }
  # shellcheck disable=SC1091
  . "$STATE/net.env"
}

down() {
  [ -d "$STATE" ] || return 0
  if [ -f "$STATE/pids" ]; then
    # newest first; each node's PID is the `unshare` whose child is the node's PID 1
    mapfile -t recorded < <(tac "$STATE/pids")
    pids=()
    for pid in "${recorded[@]}"; do ours "$pid" && pids+=("$pid"); done
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    # all of them at once, 30 s at most (a booted node powers off: its systemd stops every
    # unit, ~1.5 s each on an idle machine, more on a busy one), then SIGKILL
    for _ in $(seq 300); do
      alive=0; for pid in "${pids[@]}"; do [ -n "$(starttime "$pid")" ] && ours "$pid" && alive=1; done
      [ $alive = 0 ] && break; sleep 0.1
    done
    for pid in "${pids[@]}"; do ! ours "$pid" || kill -KILL "$pid" 2>/dev/null || true; done
    # a booted node's systemd outlives a SIGKILLed nspawn: kill it, and its PID namespace with it
    for f in "$STATE"/nodes/*/pid1; do [ ! -f "$f" ] || kill_pid1 "$(cat "$f")"; done
    rm -f "$STATE/pids" "$STATE/pids.start"
  fi
  if [ -f "$STATE/netns" ]; then
    while read -r ns; do ip netns del "$ns" 2>/dev/null || true; done <"$STATE/netns"
    rm -f "$STATE/netns"
  fi
  if [ -f "$STATE/hostnames" ]; then
    # the cgroups the nodes' slurmds made (/sys is the machine's: Slurm names them slurm_<node>)
    while read -r h; do
      for c in /sys/fs/cgroup/*/slurm_"$h"; do
        [ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null || true
      done
    done <"$STATE/hostnames"
    rm -f "$STATE/hostnames"
  fi
  # the overlay layers (their mounts lived in the nodes' own mount namespaces, gone by now)
  rm -rf "$STATE/nodes" "$STATE/net.env" "$STATE/inventory.txt" "$STATE/node-images"
}

kill_pid1() { # PID: a booted node's systemd, if that PID still is the one recorded (never a reused PID)
  [ "$(cat "/proc/$1/comm" 2>/dev/null)" = systemd ] && ours "$1" && kill -KILL "$1" 2>/dev/null || true
}

node_pid1() { # pid of node NAME's PID 1 (systemd, or sshd in a chroot node), via its recorded pids
  local f="$STATE/nodes/$1/pid" u p
  [ -f "$f" ] || { echo "no node $1 in $STATE" >&2; return 3; }
  u=$(cat "$f")
  if [ -f "$STATE/nodes/$1/pid1" ]; then  # systemd-nspawn: the container's systemd, its child
    p=$(cat "$STATE/nodes/$1/pid1")
    [ "$(ps -o ppid= -p "$p" 2>/dev/null | tr -d ' ')" = "$u" ] && echo "$p"
    return 0
  fi
  pgrep -P "$u" | head -1
}

case "$cmd" in
down) down; exit 0 ;;
exec)
  name=${3:?NAME}; shift 3
  p=$(node_pid1 "$name") || exit 3
  [ -n "$p" ] || { echo "node $name is not running" >&2; exit 3; }
  # a booted node's processes also share its IPC namespace (nspawn makes one)
  [ -f "$STATE/nodes/$name/pid1" ] && exec nsenter -t "$p" -n -p -m -u -i -r -w "$@"
  exec nsenter -t "$p" -n -p -m -u -r -w "$@"
  ;;
alive) p=$(node_pid1 "${3:?NAME}" 2>/dev/null) && [ -n "$p" ]; exit $? ;;
ctl) load_net; shift 2; exec ip netns exec "$PREFIX-br" "$@" ;;
kill)
  # one node (an instance the emulated EC2 terminated): its recorded PIDs, namespace and disk
  name=${3:?NAME}; d="$STATE/nodes/$name"
  [ -d "$d" ] || { echo "no node $name in $STATE" >&2; exit 3; }
  for f in "$d"/pid "$d"/pid.*; do
    [ -f "$f" ] || continue; pid=$(cat "$f")
    if ours "$pid"; then
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 300); do { [ -n "$(starttime "$pid")" ] && ours "$pid"; } || break; sleep 0.1; done
      ! ours "$pid" || kill -KILL "$pid" 2>/dev/null || true
    fi
    [ "$f" != "$d/pid" ] || [ ! -f "$d/pid1" ] || kill_pid1 "$(cat "$d/pid1")"
    # forget it, so that `down` never signals a PID the kernel has handed to someone else since
    grep -v -x "$pid" "$STATE/pids" >"$STATE/pids.new" || true; mv "$STATE/pids.new" "$STATE/pids"
  done
  if [ -f "$d/netns" ]; then
    ns=$(cat "$d/netns"); ip netns del "$ns" 2>/dev/null || true
    grep -v -x "$ns" "$STATE/netns" >"$STATE/netns.new" || true; mv "$STATE/netns.new" "$STATE/netns"
  fi
  for c in /sys/fs/cgroup/*/slurm_"$(cat "$d/slurm-name" 2>/dev/null || echo "$name")"; do
    [ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
  rm -rf "$d"; exit 0 ;;
spawn)
  # setsid: its own session, so it survives the CLI that asked for it; output to a file, not a
  # pipe that dies with the caller
  pidfile=${3:?PIDFILE}; ns=${4:?NETNS}; logf=${5:?LOG}; shift 5
  # nsenter --net, not `ip netns exec`: that one also gives the daemon a mount namespace with a
  # fresh /sys, without the cgroup mounts that the nodes the hypervisor boots need for slurmd
  # (setsid execs in place: a background child of this script is no process-group leader)
  ( self_record; exec setsid nsenter --net="/run/netns/$ns" "$@" ) </dev/null >>"$logf" 2>&1 &
  echo $! >"$pidfile"; exit 0 ;;
up|bridge|boot) ;;
*) echo "unknown command $cmd" >&2; exit 2 ;;
esac

lowerdirs() { # NAME: the overlay's lower folders, top first: the layers, the node's image (if any), the rootfs
  local img
  # STATE/node-images: "NAME FOLDER" per node that boots on a baked image (clusterforge/local/image.py)
  img=$(awk -v n="$1" '$1 == n { print $2 }' "$STATE/node-images" 2>/dev/null || true)
  [ -z "$img" ] || [ -f "$img/.complete" ] || { log "image $img of $1 is not complete"; return 1; }
  echo "${LAYERS:+$LAYERS:}${img:+$img:}$ROOTFS"
}

inotify_room() { # make room for one more booted node's inotify instances (raise the limit, never lower it)
  # A booted node's systemd, dbus-daemon and getty hold about 7 inotify instances, all root's (84
  # for a 12-node cluster here). The kernel's default limit is 128 per user, so without this the
  # 19th node or so cannot boot its systemd and its sshd never comes up (a 24-node cluster failed
  # at its 23rd node). Kept at 32 free or more.
  local max used
  max=$(cat /proc/sys/fs/inotify/max_user_instances)
  used=$(find /proc/[0-9]*/fd -lname 'anon_inode:inotify' 2>/dev/null | wc -l) || true  # processes come and go
  if [ $((max - used)) -lt 32 ]; then
    sysctl -q -w fs.inotify.max_user_instances=$((used + 128)) \
      || { log "fs.inotify.max_user_instances is $max with $used in use: raise it (sysctl -w fs.inotify.max_user_instances=1024)"; return 1; }
    log "raised fs.inotify.max_user_instances from $max to $((used + 128)) ($used in use; a booted node holds about 7)"
  fi
}

boot_systemd() { # NAME NETNS DIR GPUS: systemd as PID 1 in systemd-nspawn, on the node's netns
  local name=$1 ns=$2 d=$3 gpus=$4 r=$3/root nspawn p1="" c b binds=()
  inotify_room
  for b in $BINDS; do binds+=("--bind=$b"); done
  # the overlay is mounted in a mount namespace of its own that nspawn then runs in (the mount
  # dies with it); the host keys are made before boot: ssh.service's `sshd -t` needs them.
  # --keep-unit --register=no: this host runs no systemd (no bus, no machined). The arguments
  # after the directory go to the container's systemd: on this cgroup v1 host, systemd 256+ (trixie)
  # boots only with SYSTEMD_CGROUP_ENABLE_LEGACY_FORCE=1 on its "kernel" command line, which in
  # a container is PID 1's own argv (older systemd ignores it). --resolv-conf=off keeps the node's
  # own resolv.conf (nameserver 127.0.0.1, which boot_node writes: a lookup /etc/hosts cannot answer is
  # refused at once); nspawn's default copies this host's, whose nameserver the node cannot reach,
  # so every such lookup waited out glibc's 2 x 5 s (slurmctld's and slurmd's start looks up
  # 0.0.0.0's name: each restart took 10 s, and so did the first fact gathering)
  ( self_record; exec setsid unshare --mount --propagation private bash -c '
    set -e; lower=$1; d=$2; r=$d/root; shift 2
    mount -t overlay overlay -o "lowerdir=$lower,upperdir=$d/upper,workdir=$d/work" "$r"
    ssh-keygen -A -f "$r" >/dev/null
    exec systemd-nspawn "$@"
  ' _ "$LOWER" "$d" -b -D "$r" --keep-unit --register=no --network-namespace-path="/run/netns/$ns" \
    -M "$name" --hostname="$name" --console=read-only --quiet --resolv-conf=off "${binds[@]}" \
    systemd.unified_cgroup_hierarchy=0 SYSTEMD_CGROUP_ENABLE_LEGACY_FORCE=1 ) \
    </dev/null >"$d/boot.log" 2>&1 &
  nspawn=$!
  echo "$nspawn" >"$d/pid"
  for _ in $(seq 300); do  # the container's systemd: nspawn's child (30 s at most)
    p1=$(pgrep -P "$nspawn" | head -1 || true)
    [ -n "$p1" ] && [ "$(cat "/proc/$p1/comm" 2>/dev/null)" = systemd ] && break
    kill -0 "$nspawn" 2>/dev/null || break; p1=""; sleep 0.1
  done
  [ -n "$p1" ] || { log "systemd-nspawn for $name did not start systemd"; cat "$d/boot.log" >&2; return 1; }
  echo "$p1" >"$d/pid1"; record_pid "$p1"
  # fake GPUs: character devices (major 195) made in the container's own /dev (nspawn's tmpfs),
  # so that they are plain device files the node can move (the health-check fault test does)
  # (mknod, then chmod: bookworm's `mknod -m` sets the mode through /proc/self, which is not
  # this process's in the container's mount namespace)
  if [ "$gpus" != 0 ]; then
    nsenter -t "$p1" -m sh -c 'g=0; while [ "$g" -lt "$1" ]; do mknod "/dev/nvidia$g" c 195 "$g"; g=$((g + 1)); done
      mknod /dev/nvidiactl c 195 255; chmod 666 /dev/nvidia*' _ "$gpus"
  fi
  # nspawn mounts the cgroup v1 controllers read-only; slurmd's cgroup plugins (proctrack,
  # task, devices confinement) write there, so they are remounted rw from outside
  for c in /sys/fs/cgroup/*; do
    c=${c##*/}; [ "$c" = systemd ] || [ "$c" = unified ] && continue
    nsenter -t "$p1" -m sh -c "mountpoint -q /sys/fs/cgroup/$c && mount -o remount,bind,rw /sys/fs/cgroup/$c" \
      2>/dev/null || true
  done
}

boot_node() { # NAME=ADDR[:gpuN]: one node on the bridge (its namespaces, disk, sshd as PID 1)
  local spec=$1 name rest addr gpus i ns d u
  name=${spec%%=*}; rest=${spec#*=}; addr=${rest%%:*}; gpus=0
  case "$rest" in *:gpu*) gpus=${rest##*:gpu} ;; esac
  case "$addr" in "$NET".*) ;; *) echo "$addr is outside $NET.0/24" >&2; return 2 ;; esac
  [ ! -e "$STATE/nodes/$name" ] || { echo "node $name exists already in $STATE" >&2; return 2; }
  LOWER=$(lowerdirs "$name") || return 1  # what the node's overlay stacks (boot_systemd reads it too)
  # a counter, not the node count: names of killed nodes' links and namespaces are never reused
  # (under a lock: the AWS flavour's hypervisor boots instances side by side)
  exec 9>>"$STATE/seq.lock"; flock 9
  i=$(( $(cat "$STATE/seq" 2>/dev/null || echo 0) + 1 )); echo "$i" >"$STATE/seq"
  flock -u 9; exec 9>&-
  ns=$PREFIX-n$i; d="$STATE/nodes/$name"
  echo "$name" >>"$STATE/hostnames"
  # the node's disk: an overlay over the cached rootfs; what the node changes lands in upper/
  mkdir -p "$d/upper" "$d/work" "$d/root"
  u=$d/upper
  # an image customisation (AWS flavour: the emulated endpoints), copied in before boot
  [ -z "${NODE_IMAGE_EXTRA:-}" ] || cp -a "$NODE_IMAGE_EXTRA/." "$u/"
  install -d -m 700 "$u/root" "$u/root/.ssh"
  install -m 600 "$STATE/id_ed25519.pub" "$u/root/.ssh/authorized_keys"
  install -d -m 755 "$u/etc/apt" "$u/usr/sbin" "$u/etc/ssh"
  # the image's apt mirror is the local repository (as an air-gapped site's mirror would be)
  printf 'deb [trusted=yes] http://%s.1:%s/debian ./\n' "$NET" "$PORT" >"$u/etc/apt/sources.list"
  # like container images: package scripts do not start daemons (the roles do)
  printf '#!/bin/sh\nexit 101\n' >"$u/usr/sbin/policy-rc.d"; chmod 755 "$u/usr/sbin/policy-rc.d"
  # and like container images: dpkg skips fsync and documentation (a node's disk is throw-away,
  # and six nodes unpacking at once on a small machine otherwise wait on the disk for minutes)
  install -d -m 755 "$u/etc/dpkg/dpkg.cfg.d"
  printf 'force-unsafe-io\n' >"$u/etc/dpkg/dpkg.cfg.d/clusterforge-local-unsafe-io"
  printf 'path-exclude /usr/share/doc/*\npath-exclude /usr/share/man/*\npath-exclude /usr/share/locale/*\n' \
    >"$u/etc/dpkg/dpkg.cfg.d/clusterforge-local-nodoc"
  printf 'nameserver 127.0.0.1\n' >"$u/etc/resolv.conf"
  printf "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n" >"$u/etc/hosts"
  echo "$name" >"$u/etc/hostname"
  # an identity of its own, as a host installed from an image gets at first boot (the rootfs's, or
  # a baked image's, would be every node's: journald, systemd's DHCP DUID and hashes keyed by it)
  tr -d '-' </proc/sys/kernel/random/uuid >"$u/etc/machine-id"
  # network: a veth from the bridge into the node's namespace
  echo "$ns" >>"$STATE/netns"; echo "$ns" >"$d/netns"; ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip link add "${PREFIX}v$i" type veth peer name eth0 netns "$ns"
  ip link set "${PREFIX}v$i" netns "$BRNS"
  ip -n "$BRNS" link set "${PREFIX}v$i" master br0 up
  ip -n "$ns" addr add "$addr/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" route add default via "$NET.1"
  if [ "${BOOT:-chroot}" = systemd ]; then
    boot_systemd "$name" "$ns" "$d" "$gpus"
  else
    # boot: new PID/mount/UTS namespaces; sshd is PID 1 (it reaps orphans); --kill-child takes the
    # whole PID namespace down when the recorded unshare process is killed
    ( self_record; exec nsenter --net="/run/netns/$ns" unshare --pid --fork --kill-child --mount --uts --propagation private \
      bash -c '
        set -e; lower=$1; d=$2; gpus=$3; hostname "$4"; binds=$5; r=$d/root
        mount -t overlay overlay -o "lowerdir=$lower,upperdir=$d/upper,workdir=$d/work" "$r"
        for b in $binds; do mkdir -p "$r${b#*:}"; mount --bind "${b%%:*}" "$r${b#*:}"; done
        mount -t proc proc "$r/proc"
        mount --rbind /sys "$r/sys"; mount --make-rslave "$r/sys"
        mount -t tmpfs -o mode=755 tmpfs "$r/dev"
        for dv in null:1:3 zero:1:5 full:1:7 random:1:8 urandom:1:9 tty:5:0; do
          IFS=: read -r n ma mi <<<"$dv"; mknod -m 666 "$r/dev/$n" c "$ma" "$mi"; done
        mkdir "$r/dev/pts" "$r/dev/shm"; mount -t tmpfs -o mode=1777 tmpfs "$r/dev/shm"
        mount -t devpts -o newinstance,ptmxmode=0666 devpts "$r/dev/pts"; ln -s pts/ptmx "$r/dev/ptmx"
        ln -s /proc/self/fd "$r/dev/fd"
        for g in $(seq 0 $((gpus - 1))); do mknod -m 666 "$r/dev/nvidia$g" c 195 "$g"; done
        [ "$gpus" = 0 ] || mknod -m 666 "$r/dev/nvidiactl" c 195 255
        mount -t tmpfs -o mode=755 tmpfs "$r/run"; mkdir -p "$r/run/sshd"
        mount -t tmpfs -o mode=1777 tmpfs "$r/tmp"
        chroot "$r" ssh-keygen -A >/dev/null
        exec chroot "$r" /usr/sbin/sshd -D -e -o UseDNS=no
      ' _ "$LOWER" "$d" "$gpus" "$name" "$BINDS" ) >"$d/sshd.log" 2>&1 &
    echo $! >"$d/pid"
  fi
  echo "$name $addr $gpus" >>"$STATE/inventory.txt"
  wait_sshd "$name" "$addr"
}

wait_sshd() { # NAME ADDR: bounded wait for the node's sshd
  local ok=0
  for _ in $(seq 600); do
    if ip netns exec "$BRNS" timeout 2 bash -c "exec 3<>/dev/tcp/$2/22" 2>/dev/null; then ok=1; break; fi
    sleep 0.1
  done
  # a booted node's own log is nspawn's boot.log (systemd's console); a chroot node's is sshd.log
  [ $ok = 1 ] || { log "sshd on $1 ($2) did not come up"; tail -n 30 "$STATE/nodes/$1/boot.log" "$STATE/nodes/$1/sshd.log" 2>/dev/null >&2 || true; return 1; }
}

if [ "$cmd" = boot ]; then
  load_net; BRNS=$PREFIX-br; ROOTFS=$(cat "$STATE/rootfs")
  LAYERS=$(cat "$STATE/layers" 2>/dev/null || true); BINDS=$(cat "$STATE/binds" 2>/dev/null || true)
  boot_node "${3:?NAME=ADDR[:gpuN]}"
  exit 0
fi

ROOTFS=${3:?ROOTFS}; REPO=${4:?REPO}; NET=${5:?NET}; PREFIX=${6:?PREFIX}; shift 6
[ "$cmd" = bridge ] || [ $# -gt 0 ] || { echo "no nodes given" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces, mounts, chroot)" >&2; exit 2; }
[ -f "$ROOTFS/.complete" ] || { echo "$ROOTFS is not a complete rootfs" >&2; exit 2; }
if [ -f "$STATE/net.env" ]; then echo "a local cluster is already up in $STATE: run down first" >&2; exit 2; fi
BRNS=$PREFIX-br
if ip netns list | grep -q -E "^$PREFIX-"; then
  held=$(ip netns list | awk '{print $1}' | grep -E "^$PREFIX-" | tr '\n' ' ')
  echo "network namespaces $PREFIX-* exist already ($held): another local cluster is up on $NET.0/24" \
    "(take it down with \`clusterforge local down --state <its state folder>\`, or give --net another /24)," \
    "or a run killed before its teardown left them (then \`ip netns del\` each)" >&2; exit 2
fi
mkdir -p "$STATE/nodes"; chmod 755 "$STATE"
BOOT=${NODES_BOOT:-chroot}
case "$BOOT" in systemd) command -v systemd-nspawn >/dev/null \
  || { echo "systemd-nspawn is missing: apt-get install -y systemd-container" >&2; exit 2; } ;;
chroot) ;; *) echo "NODES_BOOT=$BOOT: give systemd or chroot" >&2; exit 2 ;; esac
LAYERS=${NODES_LAYERS:-}; BINDS=${NODES_BINDS:-}
for l in ${LAYERS//:/ }; do [ -f "$l/.complete" ] || { echo "layer $l is not complete (torch.sh builds it)" >&2; exit 2; }; done
for b in $BINDS; do
  case "$b" in /*:/*) [ -d "${b%%:*}" ] || { echo "bind source ${b%%:*} is not a folder" >&2; exit 2; } ;;
  *) echo "NODES_BINDS: $b is not SRC:DST with absolute paths" >&2; exit 2 ;; esac
done
printf 'NET=%s\nPREFIX=%s\nBOOT=%s\n' "$NET" "$PREFIX" "$BOOT" >"$STATE/net.env"; echo "$ROOTFS" >"$STATE/rootfs"
echo "$LAYERS" >"$STATE/layers"; echo "$BINDS" >"$STATE/binds"
: >"$STATE/pids"; : >"$STATE/pids.start"; : >"$STATE/netns"; : >"$STATE/hostnames"; : >"$STATE/inventory.txt"
trap 'rc=$?; [ $rc = 0 ] || { log "up failed (rc=$rc), tearing down"; down; }' EXIT

# SSH key of the Ansible side
[ -f "$STATE/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C "clusterforge-local" -f "$STATE/id_ed25519"

# the bridge namespace: bridge, the repository server, the Ansible side
echo "$BRNS" >>"$STATE/netns"; ip netns add "$BRNS"
ip -n "$BRNS" link set lo up
ip -n "$BRNS" link add br0 type bridge
ip -n "$BRNS" addr add "$NET.1/24" dev br0
ip -n "$BRNS" link set br0 up
( self_record; exec ip netns exec "$BRNS" python3 -m http.server "$PORT" --bind "$NET.1" --directory "$REPO" ) \
  >"$STATE/repo-http.log" 2>&1 &

for _ in $(seq 100); do
  ip netns exec "$BRNS" timeout 2 bash -c "exec 3<>/dev/tcp/$NET.1/$PORT" 2>/dev/null && break; sleep 0.1
done
for spec in "$@"; do boot_node "$spec"; done
