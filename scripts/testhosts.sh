#!/bin/bash
# Local test hosts for the Ansible roles: one Debian 12 rootfs copy per host, sshd in its own
# network, PID, mount and UTS namespaces (chroot), all on one bridge, plus a local apt repository
# served on the bridge. No systemd, no Docker; needs root, debootstrap, iproute2.
#
#   scripts/testhosts.sh up   STATE_DIR REPO_DIR NAME=ADDR[:gpuN] ...   # prints nothing on success
#   scripts/testhosts.sh down STATE_DIR
#   scripts/testhosts.sh exec STATE_DIR NAME CMD...                     # run CMD inside a host
#   scripts/testhosts.sh ctl  STATE_DIR CMD...                          # run CMD on the bridge side
#
# Addresses must be in 10.81.0.0/24 (10.81.0.1 is the bridge, the repository and the Ansible side).
# A host NAME=ADDR:gpu8 gets eight fake /dev/nvidiaN character devices (major 195) in its private
# /dev. Everything started is recorded in STATE_DIR (pids, namespaces) and `down` removes exactly
# that: it kills the recorded PIDs (each host's PID namespace dies with its init), deletes the
# recorded namespaces and rmdirs the cgroup folders of the hosts' slurmds.
set -euo pipefail
cmd=${1:?usage: $0 up|down|exec|ctl STATE_DIR ...}; STATE=${2:?STATE_DIR}
PREFIX=cf81; NET=10.81.0; BRNS=$PREFIX-br; PORT=8081
HERE=$(cd "$(dirname "$0")" && pwd)

log() { echo "testhosts: $*" >&2; }

down() {
  [ -d "$STATE" ] || return 0
  if [ -f "$STATE/pids" ]; then
    # newest first; each host PID is the `unshare` whose child is the host's PID 1
    tac "$STATE/pids" | while read -r pid; do kill -TERM "$pid" 2>/dev/null || true; done
    while read -r pid; do
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
    done <"$STATE/pids"
    rm -f "$STATE/pids"
  fi
  if [ -f "$STATE/netns" ]; then
    while read -r ns; do ip netns del "$ns" 2>/dev/null || true; done <"$STATE/netns"
    rm -f "$STATE/netns"
  fi
  if [ -f "$STATE/hostnames" ]; then
    # the cgroups the hosts' slurmds made (Debian's Slurm names them slurm_<node>)
    while read -r h; do
      for c in /sys/fs/cgroup/*/slurm_"$h"; do
        [ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null || true
      done
    done <"$STATE/hostnames"
  fi
}

host_pid1() { # pid of host NAME's init (sshd), via its recorded unshare pid
  local u; u=$(cat "$STATE/hosts/$1.pid"); pgrep -P "$u" | head -1
}

case "$cmd" in
down) down; exit 0 ;;
exec)
  name=${3:?NAME}; shift 3
  p=$(host_pid1 "$name")
  exec nsenter -t "$p" -n -p -m -u -r -w "$@"
  ;;
ctl) shift 2; exec ip netns exec "$BRNS" "$@" ;;
up) ;;
*) echo "unknown command $cmd" >&2; exit 2 ;;
esac

REPO=${3:?REPO_DIR}; shift 3
[ $# -gt 0 ] || { echo "no hosts given" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "needs root" >&2; exit 2; }
mkdir -p "$STATE/hosts"; chmod 755 "$STATE"
: >"$STATE/pids"; : >"$STATE/netns"; : >"$STATE/hostnames"
trap 'rc=$?; [ $rc = 0 ] || { log "up failed (rc=$rc), tearing down"; down; }' EXIT

ROOTFS=$("$HERE/testhost-rootfs.sh")

# SSH key of the Ansible side
[ -f "$STATE/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C clusterforge-test -f "$STATE/id_ed25519"

# the bridge namespace: bridge, the repository server, the Ansible side
ip netns add "$BRNS"; echo "$BRNS" >>"$STATE/netns"
ip -n "$BRNS" link set lo up
ip -n "$BRNS" link add br0 type bridge
ip -n "$BRNS" addr add "$NET.1/24" dev br0
ip -n "$BRNS" link set br0 up
ip netns exec "$BRNS" python3 -m http.server "$PORT" --bind "$NET.1" --directory "$REPO" \
  >"$STATE/repo-http.log" 2>&1 &
echo $! >>"$STATE/pids"

hosts_file="$STATE/etc-hosts"
printf '127.0.0.1 localhost\n' >"$hosts_file"
i=0
for spec in "$@"; do
  name=${spec%%=*}; rest=${spec#*=}; addr=${rest%%:*}; gpus=0
  case "$rest" in *:gpu*) gpus=${rest##*:gpu} ;; esac
  case "$addr" in "$NET".*) ;; *) echo "$addr is outside $NET.0/24" >&2; exit 2 ;; esac
  i=$((i + 1)); ns=$PREFIX-h$i; root="$STATE/hosts/$name"
  echo "$name" >>"$STATE/hostnames"
  # the host's disk: a copy of the cached minbase rootfs
  rm -rf "$root"; cp -a "$ROOTFS" "$root"; chmod 755 "$root"
  install -d -m 700 "$root/root/.ssh"
  install -m 600 "$STATE/id_ed25519.pub" "$root/root/.ssh/authorized_keys"
  chroot "$root" ssh-keygen -A >/dev/null
  # the image's apt mirror is the local repository (as an air-gapped site's mirror would be)
  printf 'deb [trusted=yes] http://%s.1:%s/debian ./\n' "$NET" "$PORT" >"$root/etc/apt/sources.list"
  rm -f "$root/etc/apt/sources.list.d/"*
  # like container images: package scripts do not start daemons (the roles do)
  printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"; chmod 755 "$root/usr/sbin/policy-rc.d"
  printf 'nameserver 127.0.0.1\n' >"$root/etc/resolv.conf"
  echo "$name" >"$root/etc/hostname"
  # network: a veth from the bridge into the host's namespace
  ip netns add "$ns"; echo "$ns" >>"$STATE/netns"
  ip -n "$ns" link set lo up
  ip link add "${PREFIX}v$i" type veth peer name eth0 netns "$ns"
  ip link set "${PREFIX}v$i" netns "$BRNS"
  ip -n "$BRNS" link set "${PREFIX}v$i" master br0 up
  ip -n "$ns" addr add "$addr/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" route add default via "$NET.1"
  printf '%s %s\n' "$addr" "$name" >>"$hosts_file"
  # boot: new PID/mount/UTS namespaces; sshd is PID 1 (it reaps orphans); --kill-child takes the
  # whole PID namespace down when the recorded unshare process is killed
  nsenter --net="/run/netns/$ns" unshare --pid --fork --kill-child --mount --uts --propagation private \
    bash -c '
      set -e; r=$1; gpus=$2; hostname "$3"
      mount -t proc proc "$r/proc"
      mount --rbind /sys "$r/sys"; mount --make-rslave "$r/sys"
      mount -t tmpfs -o mode=755 tmpfs "$r/dev"
      for d in null:1:3 zero:1:5 full:1:7 random:1:8 urandom:1:9 tty:5:0; do
        IFS=: read -r n ma mi <<<"$d"; mknod -m 666 "$r/dev/$n" c "$ma" "$mi"; done
      mkdir "$r/dev/pts" "$r/dev/shm"; mount -t tmpfs -o mode=1777 tmpfs "$r/dev/shm"
      mount -t devpts -o newinstance,ptmxmode=0666 devpts "$r/dev/pts"; ln -s pts/ptmx "$r/dev/ptmx"
      ln -s /proc/self/fd "$r/dev/fd"
      for g in $(seq 0 $((gpus - 1))); do mknod -m 666 "$r/dev/nvidia$g" c 195 "$g"; done
      [ "$gpus" = 0 ] || mknod -m 666 "$r/dev/nvidiactl" c 195 255
      mount -t tmpfs -o mode=755 tmpfs "$r/run"; mkdir -p "$r/run/sshd"
      exec chroot "$r" /usr/sbin/sshd -D -e -o UseDNS=no
    ' _ "$root" "$gpus" "$name" >"$STATE/hosts/$name.sshd.log" 2>&1 &
  echo $! >"$STATE/hosts/$name.pid"; echo $! >>"$STATE/pids"
  echo "$name $addr $gpus" >>"$STATE/inventory.txt"
done

# wait (bounded) for every sshd to answer
for spec in "$@"; do
  name=${spec%%=*}; rest=${spec#*=}; addr=${rest%%:*}
  ok=0
  for _ in $(seq 100); do
    if ip netns exec "$BRNS" timeout 2 bash -c "exec 3<>/dev/tcp/$addr/22" 2>/dev/null; then ok=1; break; fi
    sleep 0.1
  done
  [ $ok = 1 ] || { log "sshd on $name ($addr) did not come up"; cat "$STATE/hosts/$name.sshd.log" >&2; exit 1; }
done
for _ in $(seq 50); do
  ip netns exec "$BRNS" timeout 2 bash -c "exec 3<>/dev/tcp/$NET.1/$PORT" 2>/dev/null && break; sleep 0.1
done
