#!/usr/bin/env bash
# Build the test images here, from Debian packages and Maven Central (no container
# registry needed), once per content hash:
#   offset-journal/debian:bookworm-<hash>   debootstrap --variant=minbase bookworm, imported
#   offset-journal/postgres:15-<hash>       docker/postgres on it (Debian's postgresql-15)
#   offset-journal/kafka:<version>-<hash>   docker/kafka on it (Debian's JRE + broker jars)
# each also tagged :local, the names the pytest plugin and docker-compose.yml use by
# default. An image whose hash tag exists is reused; the rootfs tarball is cached in
# ${OFFSET_JOURNAL_IMAGE_CACHE:-~/.cache/offset-journal/images}.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${OFFSET_JOURNAL_IMAGE_CACHE:-$HOME/.cache/offset-journal/images}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
PY=${PYTHON:-python3}
mkdir -p "$CACHE"

hash_of() { cat "$@" | sha256sum | cut -c1-12; }
have() { docker image inspect "$1" >/dev/null 2>&1; }
say() { echo "build-images: $*"; }

# Base: the debootstrap command is its content.
BOOTSTRAP="debootstrap --variant=minbase bookworm $MIRROR"
base_hash=$(echo "$BOOTSTRAP" | sha256sum | cut -c1-12)
BASE=offset-journal/debian:bookworm-$base_hash
if ! have "$BASE"; then
    tarball=$CACHE/debian-bookworm-$base_hash.tar
    if [ ! -s "$tarball" ]; then
        command -v debootstrap >/dev/null || {
            apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap; }
        root=$(mktemp -d "$CACHE/rootfs.XXXX")
        say "debootstrap into $root"
        debootstrap --variant=minbase bookworm "$root" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 \
            || { tail -n 20 "$CACHE/debootstrap.log" >&2; exit 1; }
        rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
        tar -C "$root" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
        rm -rf "$root"
    fi
    say "import $BASE"
    docker import "$tarball" "$BASE" >/dev/null
fi

build() {  # name tag context
    local name=$1 tag=$2 ctx=$3
    if have "$tag"; then
        say "$tag cached"
    else
        say "build $tag"
        docker build -q --network host --build-arg "BASE=$BASE" -t "$tag" "$ctx" >/dev/null
    fi
    docker tag "$tag" "offset-journal/$name:local"
}

pg_hash=$( (echo "$BASE"; hash_of docker/postgres/*) | sha256sum | cut -c1-12)
build postgres "offset-journal/postgres:15-$pg_hash" docker/postgres

# Kafka: the broker jars offset_journal.local.jars resolves (Maven Central), copied into a
# build context of their own; their names and the docker/kafka files are the hash.
mapfile -t jars < <("$PY" -m offset_journal.cli jars kafka-broker --format list)
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir "$ctx/libs"
cp docker/kafka/* "$ctx/"
cp "${jars[@]}" "$ctx/libs/"
version=$(basename "$(dirname "${jars[0]}")" | sed -E 's/^kafka-broker-([^-]+)-.*/\1/')
k_hash=$( (echo "$BASE"; hash_of docker/kafka/*; printf '%s\n' "${jars[@]##*/}") \
    | sha256sum | cut -c1-12)
build kafka "offset-journal/kafka:$version-$k_hash" "$ctx"
say "ready: offset-journal/postgres:local offset-journal/kafka:local"
