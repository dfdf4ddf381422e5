#!/usr/bin/env bash
# The compatibility tier: the tests marked `compat` (the listener on a real broker through
# Spark's connector, a restart from the journal exactly once, the audit, the checkpoint
# commands, savepoints and the restore where the Spark has them, each refusal's one line)
# on each Spark release given, each in its own cached venv (scripts/spark-venv.sh):
#   scripts/compat-tier.sh 3.5.1                 # one release
#   scripts/compat-tier.sh 3.5.7 4.0.0 4.1.1     # several: one broker, one Postgres
#   scripts/compat-tier.sh 4.0.0 -- -x -k audit  # pytest arguments after --
# In one pytest process per release (-n 0): one SparkSession serves the whole tier, which
# on two cores is quicker than two workers starting one each. Given several releases, one
# Postgres and one broker serve them all (scripts/compat-services.py, on .venv's Python),
# unless OFFSET_JOURNAL_TEST_ADMIN_URL / OFFSET_JOURNAL_TEST_BOOTSTRAP_SERVERS name
# servers already. Only the files holding a `compat` test are collected (collecting all
# of tests/ costs more than some of the tests). One line per release on stdout (passed
# or failed, the venv's time, the tests' time); exit 1 when any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
versions=()
while [ $# -gt 0 ]; do
    if [ "$1" = "--" ]; then shift; break; fi
    versions+=("$1")
    shift
done
if [ ${#versions[@]} -eq 0 ]; then
    echo "usage: scripts/compat-tier.sh VERSION... [-- PYTEST-ARGS...] (e.g. 3.5.7 4.0.0 4.1.1)" >&2
    exit 2
fi
mapfile -t files < <(grep -rl --include="test_*.py" "mark\.compat" tests | sort)

services=
env_file=
stop_services() {
    if [ -n "$services" ]; then kill -TERM "$services" 2>/dev/null; wait "$services"; fi
    if [ -n "$env_file" ]; then rm -f "$env_file" "$env_file.part"; fi
}
trap stop_services EXIT
if [ ${#versions[@]} -gt 1 ] && [ -x .venv/bin/python ] \
        && [ -z "${OFFSET_JOURNAL_TEST_ADMIN_URL:-}${OFFSET_JOURNAL_TEST_BOOTSTRAP_SERVERS:-}" ]; then
    start=$SECONDS
    env_file=$(mktemp)
    rm -f "$env_file"
    .venv/bin/python scripts/compat-services.py "$env_file" &
    services=$!
    # bounded: a broker that cannot start says so and exits (local/kafka.py)
    while [ ! -s "$env_file" ] && kill -0 "$services" 2>/dev/null; do sleep 1; done
    if [ -s "$env_file" ]; then
        set -a
        # shellcheck disable=SC1090
        . "$env_file"
        set +a
        echo "compat-tier: one Postgres and one broker for all releases ($((SECONDS - start)) s)" >&2
    else
        wait "$services"
        services=
        echo "compat-tier: each release starts its own Postgres and broker" >&2
    fi
fi

failed=0
summary=()
for version in "${versions[@]}"; do
    start=$SECONDS
    # made (or brought up to date) first, so that its time is told apart from the tests'
    if ! scripts/spark-venv.sh "$version" >/dev/null; then
        summary+=("compat-tier: $version: FAILED: no venv (the line above says why)")
        failed=1
        continue
    fi
    venv=$((SECONDS - start))
    start=$SECONDS
    echo "compat-tier: $version: running the tier" >&2
    if scripts/spark-venv.sh --python "$version" -m pytest -q -n 0 -m compat "${files[@]}" "$@"; then
        result=passed
    else
        result=FAILED
        failed=1
    fi
    summary+=("compat-tier: $version: $result (venv ${venv} s, tests $((SECONDS - start)) s)")
done
printf '%s\n' "${summary[@]}"
exit $failed
