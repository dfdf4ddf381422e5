#!/usr/bin/env bash
# One venv per Spark release, outside the repository and cached, for running the suite (or
# a part of it) on that Spark:
#   scripts/spark-venv.sh 3.5.1 4.0.0 4.1.1      # makes them; prints each one's directory
#   scripts/spark-venv.sh --python 3.5.1 -m pytest -q -n 0 tests/jobs/test_e2e.py
# `--python VERSION ARGS...` runs that venv's Python with ARGS, holding the venv for the
# run: another checkout asking for the same release waits until the run ends instead of
# reinstalling it underneath (scripts/compat-tier.sh runs the compatibility tier so).
# Each venv holds a checkout installed editable with its `test` extra and
# pyspark[connect]==X.Y.Z. It is made once and reused while its stamp (pyproject.toml and
# the PySpark) is unchanged: another checkout only moves the editable install to itself
# (seconds); another pyproject.toml installs into it again (a minute or so once PySpark
# is there). On failure: one line per version on stderr (pip's own output is kept
# in the venv's install.log), and exit 1.
# The cache lives in ${OFFSET_JOURNAL_VENVS:-~/.cache/offset-journal/venvs}.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
ROOT=${OFFSET_JOURNAL_VENVS:-$HOME/.cache/offset-journal/venvs}
PY=${PYTHON:-python3}
usage() {
    echo "usage: scripts/spark-venv.sh VERSION... (e.g. 3.5.1 4.0.0 4.1.1 4.2.0)," \
         "or scripts/spark-venv.sh --python VERSION ARGS..." >&2
    exit 2
}
run=
if [ "${1:-}" = "--python" ]; then
    run=1
    shift
    [ $# -ge 1 ] || usage
fi
[ $# -ge 1 ] || usage
mkdir -p "$ROOT"

stamp_of() {  # what the venv's packages come from: the PySpark and pyproject.toml
    { echo "pyspark[connect]==$1"; cat pyproject.toml; } | sha256sum | cut -c1-16
}

current() {  # the venv of $1 is installed for this checkout as it is now
    local venv=$ROOT/spark-$1
    [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.stamp" 2>/dev/null)" = "$(stamp_of "$1")" ] \
        && [ "$(cat "$venv/.checkout" 2>/dev/null)" = "$REPO" ]
}

# Install (or bring up to date) the venv of $1; the caller holds its lock (fd 9)
# exclusively. One line on stderr when it fails.
install() {
    local version=$1 venv=$ROOT/spark-$1
    # the connect extra brings protobuf, which PySpark's transformWithState needs
    local spark="pyspark[connect]==$version"
    current "$version" && return 0
    # Another checkout with the same pyproject.toml (a fresh clone in CI): only the
    # editable install moves, in seconds; pip's full check of every package is a minute
    # on two loaded cores.
    if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.stamp" 2>/dev/null)" = "$(stamp_of "$version")" ]; then
        rm -f "$venv/.checkout"
        if "$venv/bin/pip" install -q --no-deps -e "$REPO" >"$venv/install.log" 2>&1; then
            echo "$REPO" >"$venv/.checkout"
            return 0
        fi
    fi
    rm -f "$venv/.stamp" "$venv/.checkout"
    if { [ -x "$venv/bin/python" ] || "$PY" -m venv "$venv"; } >"$ROOT/spark-$version.log" 2>&1 \
        && "$venv/bin/pip" install -q -e "$REPO[test]" "$spark" \
            >"$venv/install.log" 2>&1; then
        stamp_of "$version" >"$venv/.stamp"
        echo "$REPO" >"$venv/.checkout"
        return 0
    fi
    local reason
    reason=$(grep -m1 -E "^ERROR" "$venv/install.log" 2>/dev/null || tail -n1 "$ROOT/spark-$version.log")
    echo "spark-venv: $version: install failed: ${reason:-see $venv/install.log}" >&2
    return 1
}

# The lock of $1's venv, exclusively on fd 9 (installs), saying so when someone holds it.
lock_exclusive() {
    exec 9>"$ROOT/.spark-$1.lock"
    if ! flock -n -x 9; then
        echo "spark-venv: $1: in use by another run or install; waiting for it" >&2
        flock -x 9
    fi
}

valid() {
    if [[ $1 =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then return 0; fi
    echo "spark-venv: $1: not a Spark release (expected X.Y.Z, such as 3.5.1)" >&2
    return 1
}

if [ -n "$run" ]; then
    version=$1
    shift
    valid "$version" || exit 1
    # Installed for this checkout, then held shared for the run. Turning the exclusive
    # lock into a shared one is not atomic: another checkout may install in between, so
    # the stamp is checked again under the shared lock.
    for _ in 1 2 3; do
        lock_exclusive "$version"
        install "$version" || exit 1
        flock -s 9
        if current "$version"; then
            exec "$ROOT/spark-$version/bin/python" "$@"  # fd 9 (the shared lock) goes along
        fi
        exec 9>&-
    done
    echo "spark-venv: $version: another checkout keeps installing its own; try again" >&2
    exit 1
fi

failed=0
for version in "$@"; do
    valid "$version" || { failed=1; continue; }
    if current "$version"; then
        echo "$ROOT/spark-$version"
        continue
    fi
    lock_exclusive "$version"
    if install "$version"; then
        echo "$ROOT/spark-$version"
    else
        failed=1
    fi
    exec 9>&-
done
exit $failed
