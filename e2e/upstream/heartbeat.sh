# Sourced by the cached build scripts (build-kwok.sh, build-hami.sh): runs a long build in the
# background and says every minute ($HAMI_DCU_BUILD_HEARTBEAT seconds) that it is still at it, so
# a cold build is never a silent quarter of an hour. Needs `say` and `elapsed` from the script.
#
#   build_with_heartbeat "kwok v0.8.0" go build ...
build_with_heartbeat() {
    local what=$1 pid
    shift
    "$@" &
    pid=$!
    while :; do
        for _ in $(seq 1 "${HAMI_DCU_BUILD_HEARTBEAT:-60}"); do
            kill -0 "$pid" 2>/dev/null || break 2
            sleep 1
        done
        say "still building $what ($(elapsed) so far)"
    done
    wait "$pid" || { say "building $what failed after $(elapsed)"; return 1; }
}
