#!/usr/bin/env bash
# Makes this machine's Docker able to run kind nodes, and undoes exactly what it did.
#
#   e2e/kind/docker-host.sh up     # start dockerd if it is not running; fit privileged containers
#   e2e/kind/docker-host.sh down   # stop dockerd if an `up` started it; remove what `up` changed
#
# The state lives in the per-user cache, so nested ups (CI's, then the kind suite's) are undone by
# the one `down` at the end; a dockerd an earlier `up` started and no `down` followed is stopped too.
#
# What `up` may change on the host, each said on stderr when it happens:
# - starts dockerd (detached, logging to $state/dockerd.log) when `docker info` fails;
# - when this host's capability bounding set lacks a capability the kernel knows (some VMs drop
#   CAP_SYS_RESOURCE), Docker cannot start privileged containers, and kind's nodes are
#   privileged: the runc wrapper `capfit` (e2e/kind/capfit) becomes Docker's default runtime,
#   as a dockerd flag when we start it, else through /etc/docker/daemon.json and a reload;
# - a running dockerd sets the iptables FORWARD policy to DROP and turns on bridge netfilter;
#   the real-cluster suite accepts its own bridge's traffic, so nothing is undone there.
# Needs root, the docker.io package (dockerd) and go (to build capfit once, cached).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${HAMI_DCU_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hami-dcu}
state=$cache/kind/host
capfit=/usr/local/lib/hami-dcu/capfit  # fixed path: the runtime of every container while set
daemon_json=/etc/docker/daemon.json
mkdir -p "$state"

say() { echo "docker-host: $*" >&2; }

bounding_set_is_short() {
    local last mask
    last=$(cat /proc/sys/kernel/cap_last_cap)
    mask=$((16#$(awk '/^CapBnd:/ {print $2}' /proc/self/status)))
    [ "$mask" -ne $(((1 << (last + 1)) - 1)) ]
}

install_capfit() {
    local built="$cache/kind/bin/capfit-$(sha256sum "$here/capfit/main.go" | cut -c1-12)"
    if [ ! -x "$built" ]; then
        mkdir -p "$(dirname "$built")"
        (cd "$here/capfit" && CGO_ENABLED=0 go build -trimpath -o "$built" .)
    fi
    if ! cmp -s "$built" "$capfit"; then
        mkdir -p "$(dirname "$capfit")"
        install -m 0755 "$built" "$capfit"
    fi
}

docker_up() { docker info >/dev/null 2>&1; }

wait_for_docker() {
    local i
    for i in $(seq 1 60); do
        docker_up && return 0
        sleep 1
    done
    say "dockerd did not answer within 60 s; its log: $state/dockerd.log"
    tail -20 "$state/dockerd.log" >&2 || true
    return 1
}

up() {
    local fit=no
    if bounding_set_is_short; then
        fit=yes
        install_capfit
    fi
    if ! docker_up; then
        command -v dockerd >/dev/null || { say "dockerd is not installed (apt-get install docker.io)"; exit 1; }
        local flags=()
        if [ "$fit" = yes ]; then
            say "the capability bounding set is short: dockerd starts with capfit as its default runtime"
            flags=(--add-runtime "capfit=$capfit" --default-runtime capfit)
        fi
        say "starting dockerd (log: $state/dockerd.log); it sets the FORWARD policy to DROP"
        setsid dockerd "${flags[@]}" >"$state/dockerd.log" 2>&1 </dev/null &
        echo $! >"$state/dockerd.pid"
        wait_for_docker
    elif [ "$fit" = yes ] && ! docker info --format '{{.DefaultRuntime}}' | grep -qx capfit; then
        [ -e "$daemon_json" ] && [ ! -e "$state/daemon.json.orig" ] && cp "$daemon_json" "$state/daemon.json.orig"
        [ -e "$daemon_json" ] || touch "$state/daemon.json.created"
        say "the running dockerd gets capfit as its default runtime ($daemon_json, reloaded with SIGHUP)"
        mkdir -p "$(dirname "$daemon_json")"
        python3 - "$daemon_json" "$capfit" <<'PY'
import json, sys
path, capfit = sys.argv[1], sys.argv[2]
try:
    config = json.load(open(path))
except (FileNotFoundError, ValueError):
    config = {}
config.setdefault("runtimes", {})["capfit"] = {"path": capfit}
config["default-runtime"] = "capfit"
json.dump(config, open(path, "w"), indent=2)
PY
        pkill -HUP -x dockerd
        sleep 1
    fi
}

down() {
    if [ -e "$state/dockerd.pid" ]; then
        local pid
        pid=$(cat "$state/dockerd.pid")
        say "stopping the dockerd that \`up\` started (pid $pid)"
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
        rm -f "$state/dockerd.pid"
    fi
    if [ -e "$state/daemon.json.orig" ] || [ -e "$state/daemon.json.created" ]; then
        say "restoring $daemon_json; the reload sets the default runtime back to runc first"
        python3 - "$daemon_json" <<'PY'
import json, sys
path = sys.argv[1]
config = json.load(open(path))
config["default-runtime"] = "runc"
json.dump(config, open(path, "w"), indent=2)
PY
        pkill -HUP -x dockerd 2>/dev/null || true
        sleep 1
        if [ -e "$state/daemon.json.orig" ]; then
            mv "$state/daemon.json.orig" "$daemon_json"
        else
            rm -f "$daemon_json" "$state/daemon.json.created"
        fi
        pkill -HUP -x dockerd 2>/dev/null || true
    fi
}

case "${1:-}" in
up) up ;;
down) down ;;
*) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
