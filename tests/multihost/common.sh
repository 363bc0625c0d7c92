# Sourced by the scenario scripts of the multi-host harness (sc_*.sh): skip rules, cluster set-up
# with guaranteed tear-down, and the checks they share.
#
# usage (in a scenario): source common.sh; mh_init BUILD_DIR [RELAY_ARGS...]
# Exit codes of a scenario: 0 pass, 1 a pass criterion failed, 77 skipped (not root, or no
# working `ip netns`), 99 the cluster could not be built (Meson reports ERROR, never "expected
# fail").
MH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# mh_init BUILD_DIR [RELAY_ARGS...]: skips or builds the cluster; tear-down runs on every exit.
mh_init() {
    MH_BUILD=$(cd "$1" && pwd) || exit 99
    shift
    if [[ $(id -u) -ne 0 ]]; then echo "SKIP: needs root"; exit 77; fi
    if ! ip netns add thmh-probe 2>/dev/null; then echo "SKIP: ip netns does not work"; exit 77; fi
    ip netns del thmh-probe
    export IMPAIR_RELAY=$MH_BUILD/tests/multihost/impair_relay
    MH_LOG=$(mktemp /tmp/thmh-log.XXXXXX)
    trap mh_cleanup EXIT
    trap 'exit 1' INT TERM
    "$MH_DIR/cluster.sh" up "$@" || { echo "FAIL: cluster set-up"; exit 99; }
    MH_T0=$(mh_now_ms)
}

# Tear-down: kills what is left in the nodes, removes namespaces, relay, mounts and the log.
mh_cleanup() {
    local rc=$?
    # In its own session: Meson's timeout sends SIGTERM and, 0.5 s later, SIGKILL to the whole
    # process group; the tear-down must outlive that.
    setsid "$MH_DIR/cluster.sh" down 2>&1 | grep -v '^impair_relay' || true
    rm -f "$MH_LOG"
    echo "scenario time: $(mh_elapsed) s"
    exit "$rc"
}

# Milliseconds since the epoch (bash's EPOCHREALTIME); mh_elapsed [T0_MS]: seconds since T0_MS
# (default: cluster up) with one decimal.
mh_now_ms() { local t=${EPOCHREALTIME/./}; echo $((t / 1000)); }
mh_elapsed() {
    local d=$(($(mh_now_ms) - ${1:-$MH_T0}))
    printf '%d.%d' $((d / 1000)) $((d % 1000 / 100))
}

# mh_relay_stats: stops the relay and prints its counter line (link down/up, loss checks).
mh_relay_stats() {
    kill -TERM "$(cat /run/thmh/relay.pid)" 2>/dev/null
    sleep 0.3
    grep 'frames in' /run/thmh/relay.log
}

# mh_leftovers: fails the scenario (exit 1) when a node's /dev/shm or /tmp holds a file or a
# process is left in a node, after GRACE seconds (default 2) of waiting for it to go.
mh_leftovers() { # GRACE_S [shm]: see cluster.sh leftovers
    local grace=${1:-2} what=${2:-} k
    for k in $(seq $((grace * 5))); do
        "$MH_DIR/cluster.sh" leftovers "$what" >/dev/null && { echo "no leftovers"; return 0; }
        sleep 0.2
    done
    "$MH_DIR/cluster.sh" leftovers "$what"
    echo "FAIL: leftovers after mpirun exited (+${grace} s)"
    exit 1
}
