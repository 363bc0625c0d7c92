#!/usr/bin/env bash
# Runs a command "on" a node of the multi-host test cluster (cluster.sh): inside the node's
# network namespace, in a new UTS and mount namespace with the node's host name, the node's own
# /dev/shm bind-mounted, and TMPDIR pointing at the node's own temporary directory (Open MPI's
# session directories go there). /tmp itself is left alone: the repository or build tree may live
# under it (CI checkouts do). Used as mpirun's rsh agent (--mca plm_rsh_agent), and to start
# mpirun itself on node 0.
#
# usage: node_exec.sh NODE COMMAND [ARGS...]    NODE: thmh-n0, thmh-n1 or thmh-n2
# Like ssh, the words of COMMAND are joined and run by a shell (mpirun passes "VAR=..; orted ..").
# Every process started on one node shares that node's /dev/shm and TMPDIR (the per-node
# directories under /run/thmh), so node-local shared memory works between them.
set -euo pipefail
node=${1:?node}
shift
[[ -d /run/thmh/$node/shm && -e /run/netns/$node ]] || { echo "node_exec.sh: no node $node" >&2; exit 255; }
exec ip netns exec "$node" unshare --uts --mount --propagation private \
    /bin/bash -c 'hostname "$1" && mount --bind "/run/thmh/$1/shm" /dev/shm &&
                  export TMPDIR="/run/thmh/$1/tmp" && shift && exec /bin/bash -c "$*"' \
    node_exec "$node" "$@"
