#!/usr/bin/env bash
# The listener's cost per batch on each Spark release, side by side from one run:
# bench/callback_handoff.py (time inside onQueryProgress, database healthy, against an
# empty callback) and bench/stream_overhead.py (a file-source stream's rows/s with and
# without the listener), each in that release's venv (scripts/spark-venv.sh; the release
# of .venv runs there).
#   scripts/bench-per-spark.sh 3.5.7 4.0.0 4.1.1 4.2.0
#   BENCH_ROUNDS=12 BENCH_FILES=40 BENCH_EVENTS=2000 scripts/bench-per-spark.sh 3.5.7 4.2.0
# Prints each script's own tables per release (with the load average before and after),
# then one table of the figures side by side. The releases run one after the other, so
# their figures are comparable only as far as the load stayed the same: it is printed.
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: scripts/bench-per-spark.sh VERSION... (e.g. 3.5.7 4.0.0 4.1.1 4.2.0)" >&2; exit 2; }
rounds=${BENCH_ROUNDS:-3}
files=${BENCH_FILES:-10}
events=${BENCH_EVENTS:-300}
main=$(.venv/bin/python -c "import pyspark; print(pyspark.__version__)" 2>/dev/null || true)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
load() { cut -d' ' -f1 /proc/loadavg; }

python_for() {  # the command that runs Python with PySpark $1
    if [ "$1" = "$main" ]; then echo ".venv/bin/python"; else echo "scripts/spark-venv.sh --python $1"; fi
}

failed=0
for version in "$@"; do
    if [ "$version" != "$main" ] && ! scripts/spark-venv.sh "$version" >/dev/null; then
        failed=1
        continue
    fi
    py=$(python_for "$version")
    before=$(load)
    echo "## PySpark $version (load average $before at the start)"
    $py bench/callback_handoff.py --events "$events" --rounds "$rounds" \
        --scenarios none,healthy 2>"$out/$version.handoff.err" | tee "$out/$version.handoff" \
        || { failed=1; tail -n 3 "$out/$version.handoff.err" >&2; }
    $py bench/stream_overhead.py --rounds "$rounds" --files "$files" \
        2>"$out/$version.stream.err" | tee "$out/$version.stream" \
        || { failed=1; tail -n 3 "$out/$version.stream.err" >&2; }
    echo "$before -> $(load)" >"$out/$version.load"
    echo
done

# the rows the two scripts print: | healthy | calls | p50 | p99 | ...,
# | no listener | runs | batches | rows/s median | ..., and the ratio's row
cell() { grep -m1 "^| $2 |" "$1" 2>/dev/null | awk -F'|' -v c="$3" '{gsub(/^ +| +$/, "", $c); print $c}'; }
echo "## Side by side"
echo
echo "| PySpark | callback p99 us, healthy (empty callback) | rows/s without | rows/s with | with / without, median (p25-p75) | load average |"
echo "|---|---|---|---|---|---|"
for version in "$@"; do
    h=$out/$version.handoff s=$out/$version.stream
    echo "| $version | $(cell "$h" healthy 5) ($(cell "$h" none 5)) | $(cell "$s" "no listener" 5) | $(cell "$s" "journal listener" 5) | $(cell "$s" "journal listener / no listener" 3) ($(cell "$s" "journal listener / no listener" 4)) | $(cat "$out/$version.load" 2>/dev/null) |"
done
exit $failed
