#!/usr/bin/env bash
# A Docker engine that talks on loopback only: install Debian's docker.io when no
# dockerd is installed, and start dockerd when no engine answers. No bridge, no iptables
# rules, no IP forwarding: containers run on the host network (network_mode=host) and
# listen on 127.0.0.1 ports the test harness chooses.
#   scripts/docker-engine.sh          start (or find) the engine
#   scripts/docker-engine.sh stop     stop the engine this script started (by its pidfile)
# The packaged service never starts: its engine would bring a bridge, iptables rules and
# IP forwarding. An engine that already answers is used only when it has no bridge.
# (Sourced, the script only defines its functions: tests call them.)
set -euo pipefail

# Deny every service start while packages install (policy-rc.d, exit 101: invoke-rc.d
# and deb-systemd-invoke ask it); a policy-rc.d already there is kept aside and put back.
# A run killed mid-install left the host's own aside already: that one stays the kept one
# (the file in place is then this script's deny file).
hold_service_starts() {  # policy-file
    if [ -e "$1.offset-journal-kept" ]; then :
    elif [ -e "$1" ]; then mv "$1" "$1.offset-journal-kept"; fi
    printf '#!/bin/sh\n# scripts/docker-engine.sh: no service starts while it installs\nexit 101\n' \
        >"$1"
    chmod 755 "$1"
}

release_service_starts() {  # policy-file
    rm -f "$1"
    if [ -e "$1.offset-journal-kept" ]; then mv "$1.offset-journal-kept" "$1"; fi
}

# Where systemd runs, mask docker.service and docker.socket before docker.io is installed:
# neither the package's postinst nor a later boot or socket activation starts its engine.
mask_packaged_engine() {  # systemd-run-dir
    if [ -d "$1" ]; then systemctl mask docker.service docker.socket; fi
}

install_packages() {  # policy-file systemd-run-dir package...
    local policy=$1 systemd_dir=$2
    shift 2
    case " $* " in *" docker.io "*) mask_packaged_engine "$systemd_dir" ;; esac
    hold_service_starts "$policy"
    trap "release_service_starts $(printf %q "$policy")" EXIT  # also when apt-get fails
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@"
    release_service_starts "$policy"
    trap - EXIT
}

# An answering engine with a bridge network (the packaged service's default, which comes
# with its iptables rules and IP forwarding) is refused in one line.
refuse_bridged_engine() {  # reads `docker network ls --format '{{.Driver}}'`
    if grep -qx bridge; then
        echo "docker engine: the engine that answers has a bridge network (iptables rules," \
             "IP forwarding), not used: stop it (systemctl disable --now docker.service" \
             "docker.socket) and run scripts/docker-engine.sh again" >&2
        return 1
    fi
}

main() {
    local state=${OFFSET_JOURNAL_DOCKER_STATE:-$HOME/.cache/offset-journal/dockerd}
    local pidfile=$state/dockerd.pid
    mkdir -p "$state"

    if [ "${1:-start}" = stop ]; then
        if [ -s "$pidfile" ]; then
            local pid
            pid=$(cat "$pidfile")
            kill "$pid" 2>/dev/null || true
            for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        fi
        return 0
    fi

    # docker.io (the engine and its CLI) and docker-compose (1.29, for docker-compose.yml)
    local missing=()
    command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
    command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
    if [ ${#missing[@]} -gt 0 ]; then
        install_packages /usr/sbin/policy-rc.d /run/systemd/system "${missing[@]}"
    fi
    if docker info >/dev/null 2>&1; then
        docker network ls --format '{{.Driver}}' | refuse_bridged_engine
        echo "docker engine: already answering, no bridge"
        return 0
    fi
    nohup dockerd --bridge=none --iptables=false --ip6tables=false --ip-forward=false \
        --data-root "$state/data" --exec-root "$state/exec" --pidfile "$pidfile" \
        >"$state/dockerd.log" 2>&1 &
    for _ in $(seq 1 150); do
        if docker info >/dev/null 2>&1; then
            echo "docker engine: started (pid $(cat "$pidfile"), log $state/dockerd.log)"
            return 0
        fi
        sleep 0.2
    done
    echo "docker engine: dockerd did not answer within 30 s; its last lines:" >&2
    tail -n 20 "$state/dockerd.log" >&2
    return 1
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then main "$@"; fi
