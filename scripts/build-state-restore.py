#!/usr/bin/env python3
"""Rebuild offset-journal's shipped state-restore helper jar for one Spark minor.

    .venv/bin/python scripts/build-state-restore.py            # the venv's PySpark (4.2)
    ~/.cache/offset-journal/venvs/spark-4.3.0/bin/python scripts/build-state-restore.py
    python scripts/build-state-restore.py --spark-jars "$SPARK_HOME/jars"

Compiles jvm/state-restore (src/main/java and src/spark-<minor>/java) with javac against
the jars of that Spark and writes offset_journal/_jars/state-restore-spark<minor>.jar,
its manifest naming the sources' SHA-256 (see offset_journal/local/helper_jar.py).
A developer's step, after a change to the helper's sources: commit the jar with them;
tests/state/test_state_helper.py fails while the two disagree. Prints the jar's path.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from offset_journal.errors import OffsetJournalError  # noqa: E402
from offset_journal.local.helper_jar import SHIPPED_DIR, build  # noqa: E402
from offset_journal.local.jars import spark_jars_dir  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spark-jars", type=Path, default=None,
                        help="a Spark's jars directory (default: the installed PySpark's, "
                             "or $SPARK_HOME/jars)")
    parser.add_argument("--out", type=Path, default=SHIPPED_DIR,
                        help=f"where the jar goes (default {SHIPPED_DIR})")
    args = parser.parse_args()
    try:
        jar = build(args.spark_jars or spark_jars_dir(), args.out)
    except OffsetJournalError as exc:
        print(f"build-state-restore: error: {exc}", file=sys.stderr)
        return 1
    print(jar)
    return 0


if __name__ == "__main__":
    sys.exit(main())
