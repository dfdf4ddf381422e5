#!/usr/bin/env bash
# One venv per Spark release, outside the repository and cached, for running the suite (or
# a part of it) on that Spark:
#   scripts/spark-venv.sh 3.5.1 4.0.0 4.1.1      # prints each venv's directory, one a line
#   ~/.cache/offset-journal/venvs/spark-3.5.1/bin/python -m pytest -q -n 0 tests/test_e2e.py
# Each holds this checkout installed editable with its `test` extra and
# pyspark[connect]==X.Y.Z. A venv is made once and reused while its stamp (the checkout's
# path, pyproject.toml and what is installed) is unchanged; a changed stamp reinstalls
# into it. On failure: one line per version on stderr (pip's own output is kept in the
# venv's install.log), and exit 1.
# The cache lives in ${OFFSET_JOURNAL_VENVS:-~/.cache/offset-journal/venvs}.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
ROOT=${OFFSET_JOURNAL_VENVS:-$HOME/.cache/offset-journal/venvs}
PY=${PYTHON:-python3}
if [ $# -eq 0 ]; then
    echo "usage: scripts/spark-venv.sh VERSION... (e.g. 3.5.1 4.0.0 4.1.1 4.2.0)" >&2
    exit 2
fi
mkdir -p "$ROOT"
failed=0
for version in "$@"; do
    if ! [[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
        echo "spark-venv: $version: not a Spark release (expected X.Y.Z, such as 3.5.1)" >&2
        failed=1
        continue
    fi
    venv=$ROOT/spark-$version
    # the connect extra brings protobuf, which PySpark's transformWithState needs
    spark="pyspark[connect]==$version"
    stamp=$( { echo "$REPO"; echo "$spark"; cat pyproject.toml; } | sha256sum | cut -c1-16)
    if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.stamp" 2>/dev/null)" = "$stamp" ]; then
        echo "$venv"
        continue
    fi
    # One installer per venv at a time (two CI steps, two terminals).
    exec 9>"$ROOT/.spark-$version.lock"
    flock 9
    if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.stamp" 2>/dev/null)" = "$stamp" ]; then
        echo "$venv"
        exec 9>&-
        continue
    fi
    rm -f "$venv/.stamp"
    if { [ -x "$venv/bin/python" ] || "$PY" -m venv "$venv"; } >"$ROOT/spark-$version.log" 2>&1 \
        && "$venv/bin/pip" install -q -e "$REPO[test]" "$spark" \
            >"$venv/install.log" 2>&1; then
        echo "$stamp" >"$venv/.stamp"
        echo "$venv"
    else
        reason=$(grep -m1 -E "^ERROR" "$venv/install.log" 2>/dev/null || tail -n1 "$ROOT/spark-$version.log")
        echo "spark-venv: $version: install failed: ${reason:-see $venv/install.log}" >&2
        failed=1
    fi
    exec 9>&-
done
exit $failed
