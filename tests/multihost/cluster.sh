#!/usr/bin/env bash
# Builds and removes the multi-host test cluster: three "nodes" as network namespaces on this
# machine, each with its own host name (see node_exec.sh), /etc/hosts, /dev/shm and TMPDIR.
#
#   thmh-n0 (10.77.0.1) --veth--+
#   thmh-n1 (10.77.0.2) --veth--+-- br0 in namespace thmh-sw
#   thmh-n2 (10.77.0.3) --TAP== impair_relay ==TAP--+
#
# Node 2 sits behind impair_relay (loss, delay, reordering, link down), since this kernel has
# no netem. Every node's interface is eth0, so UCX_NET_DEVICES=eth0 fits all of them.
#
# usage: cluster.sh up [RELAY_ARGS...]   e.g. cluster.sh up -l 5   (needs $IMPAIR_RELAY)
#        cluster.sh down                 kill every process in the nodes, remove everything
#        cluster.sh link down|up         switch node 2's link (SIGUSR1/SIGUSR2 to the relay)
#        cluster.sh leftovers            list files in the nodes' /dev/shm and /tmp and processes
#                                        in the nodes; exit 1 if there is any
#        cluster.sh scrub                kill every process in the nodes and empty their /dev/shm
#                                        and /tmp (the cluster stays up)
# Needs root. State lives in /run/thmh (a tmpfs, removed by `down`), /run/netns/thmh-* and
# /etc/netns/thmh-* (per-node /etc/hosts, bind-mounted by `ip netns exec`).
set -uo pipefail

NODES=(thmh-n0 thmh-n1 thmh-n2)
SW=thmh-sw
ROOT=/run/thmh

die() { echo "cluster.sh: $*" >&2; exit 1; }
ns() { local n=$1; shift; ip netns exec "$n" "$@"; }

# reach NODE IP: true when a TCP connect from NODE to IP port 9 is refused (reachable).
reach() {
    local k
    for k in $(seq 25); do
        [[ $(ns "$1" timeout 5 bash -c "exec 3<>/dev/tcp/$2/9" 2>&1) == *refused* ]] && return 0
        sleep 0.2
    done
    return 1
}

up() {
    [[ -x ${IMPAIR_RELAY:-} ]] || die "IMPAIR_RELAY must name the impair_relay binary"
    down 2>/dev/null # whatever a killed earlier run left behind
    set -e
    mkdir -p "$ROOT"
    mount -t tmpfs -o size=4g,mode=0755 thmh "$ROOT"
    ip netns add "$SW"
    ns "$SW" ip link add br0 type bridge
    ns "$SW" ip link set br0 up
    ns "$SW" ip link set lo up
    local i n hosts=''
    for i in 0 1 2; do hosts+="10.77.0.$((i + 1)) ${NODES[i]}"$'\n'; done
    for i in 0 1 2; do
        n=${NODES[i]}
        ip netns add "$n"
        mkdir -p "/etc/netns/$n" "$ROOT/$n/shm" "$ROOT/$n/tmp"
        chmod 1777 "$ROOT/$n/shm" "$ROOT/$n/tmp"
        printf '127.0.0.1 localhost\n%s' "$hosts" >"/etc/netns/$n/hosts"
        ns "$n" ip link set lo up
        if ((i < 2)); then
            ip link add "thmh-v$i" type veth peer name eth0 netns "$n"
            ip link set "thmh-v$i" netns "$SW"
            ns "$SW" ip link set "thmh-v$i" master br0 up
        else
            ns "$n" ip tuntap add dev eth0 mode tap
            ns "$SW" ip tuntap add dev "thmh-t$i" mode tap
            ns "$SW" ip link set "thmh-t$i" master br0 up
        fi
        ns "$n" ip addr add "10.77.0.$((i + 1))/24" dev eth0
        ns "$n" ip link set eth0 up
    done
    "$IMPAIR_RELAY" -a "/run/netns/${NODES[2]}:eth0" -b "/run/netns/$SW:thmh-t2" \
        -p "$ROOT/relay.pid" "$@" </dev/null >/dev/null 2>"$ROOT/relay.log" &
    set +e
    for i in $(seq 50); do [[ -s $ROOT/relay.pid ]] && break; sleep 0.1; done
    [[ -s $ROOT/relay.pid ]] || die "impair_relay did not start: $(cat "$ROOT/relay.log")"
    # Every node must reach every other one (node 2 through the relay): a TCP connect to a
    # closed port is refused at once when the peer is reachable (no ping needed).
    for i in 0 1 2; do
        for j in 0 1 2; do
            ((i == j)) || reach "${NODES[i]}" "10.77.0.$((j + 1))" ||
                die "${NODES[i]} cannot reach 10.77.0.$((j + 1))"
        done
    done
    echo "cluster.sh: up: ${NODES[*]} (relay: $*)"
}

down() {
    local n pids
    for n in "${NODES[@]}"; do
        [[ -e /run/netns/$n ]] || continue
        pids=$(ip netns pids "$n" 2>/dev/null)
        [[ -n $pids ]] && kill -9 $pids 2>/dev/null
    done
    if [[ -s $ROOT/relay.pid ]]; then
        kill -TERM "$(cat "$ROOT/relay.pid")" 2>/dev/null && sleep 0.2
        cat "$ROOT/relay.log" >&2
    fi
    for n in "${NODES[@]}" "$SW"; do
        [[ -e /run/netns/$n ]] && ip netns del "$n"
        rm -rf "/etc/netns/$n"
    done
    rmdir /etc/netns 2>/dev/null
    # Veth ends go with their namespace; the bind mounts of node_exec.sh die with its processes.
    mountpoint -q "$ROOT" && { umount "$ROOT" || umount -l "$ROOT"; }
    rmdir "$ROOT" 2>/dev/null
    return 0
}

link() {
    local pid
    pid=$(cat "$ROOT/relay.pid" 2>/dev/null) || die "no relay"
    case $1 in
    down) kill -USR1 "$pid" ;;
    up) kill -USR2 "$pid" ;;
    *) die "link down|up" ;;
    esac
}

leftovers() { # [shm]: /dev/shm and processes only (not TMPDIR, where a killed mpirun leaves
               # its session directory)
    local n bad=0 f p dirs
    for n in "${NODES[@]}"; do
        dirs=("$ROOT/$n/shm")
        [[ ${1:-} == shm ]] || dirs+=("$ROOT/$n/tmp")
        f=$(find "${dirs[@]}" -mindepth 1 2>/dev/null)
        [[ -n $f ]] && { echo "left in $n: $f"; bad=1; }
        p=$(ip netns pids "$n" 2>/dev/null)
        [[ -n $p ]] && { echo "processes left in $n: $(ps -o pid=,comm= -p ${p//$'\n'/,})"; bad=1; }
    done
    return $bad
}

scrub() {
    local n p
    for n in "${NODES[@]}"; do
        p=$(ip netns pids "$n" 2>/dev/null)
        [[ -n $p ]] && kill -9 $p 2>/dev/null
    done
    sleep 0.3
    for n in "${NODES[@]}"; do
        find "$ROOT/$n/shm" "$ROOT/$n/tmp" -mindepth 1 -delete 2>/dev/null
    done
    return 0
}

[[ $(id -u) -eq 0 ]] || die "needs root"
cmd=${1:-}
shift || true
case $cmd in
up) up "$@" ;;
down) down ;;
link) link "${1:-}" ;;
leftovers) leftovers "${1:-}" ;;
scrub) scrub ;;
*) sed -n '2,21p' "$0"; exit 2 ;;
esac
