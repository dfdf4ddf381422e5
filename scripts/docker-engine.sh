#!/usr/bin/env bash
# A Docker engine that talks on loopback only: install Debian's docker.io when no
# dockerd is installed, and start dockerd when no engine answers. No bridge, no iptables
# rules, no IP forwarding: containers run on the host network (network_mode=host) and
# listen on 127.0.0.1 ports the test harness chooses.
#   scripts/docker-engine.sh          start (or find) the engine
#   scripts/docker-engine.sh stop     stop the engine this script started (by its pidfile)
set -euo pipefail
STATE=${OFFSET_JOURNAL_DOCKER_STATE:-$HOME/.cache/offset-journal/dockerd}
PIDFILE=$STATE/dockerd.pid
mkdir -p "$STATE"

if [ "${1:-start}" = stop ]; then
    if [ -s "$PIDFILE" ]; then
        pid=$(cat "$PIDFILE")
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    fi
    exit 0
fi

# docker.io (the engine and its CLI) and docker-compose (1.29, for docker-compose.yml)
missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
fi
if docker info >/dev/null 2>&1; then
    echo "docker engine: already answering"
    exit 0
fi
nohup dockerd --bridge=none --iptables=false --ip6tables=false --ip-forward=false \
    --data-root "$STATE/data" --exec-root "$STATE/exec" --pidfile "$PIDFILE" \
    >"$STATE/dockerd.log" 2>&1 &
for _ in $(seq 1 150); do
    if docker info >/dev/null 2>&1; then
        echo "docker engine: started (pid $(cat "$PIDFILE"), log $STATE/dockerd.log)"
        exit 0
    fi
    sleep 0.2
done
echo "docker engine: dockerd did not answer within 30 s; its last lines:" >&2
tail -n 20 "$STATE/dockerd.log" >&2
exit 1
