"""One Postgres and one Kafka broker for scripts/compat-tier.sh's runs of several Spark
releases: each release's pytest session would otherwise start its own, and the broker's
start is a good part of a release's time on two cores.

    python scripts/compat-services.py ENV_FILE

Writes ENV_FILE once both answer: the two variables offset_journal.testing's fixtures
read (OFFSET_JOURNAL_TEST_ADMIN_URL, OFFSET_JOURNAL_TEST_BOOTSTRAP_SERVERS), one
``NAME=value`` a line. Holds them until SIGTERM or SIGINT, then stops both. Each test
makes its own database and topic (named by its process id), so the releases do not
meet in them. Exit 1 with one line on stderr when either cannot start.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any


def _stop(signum: int, frame: Any) -> None:
    raise SystemExit(0)


def main(env_file: str) -> int:
    from offset_journal.formatting import first_line
    from offset_journal.local import services

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    started: list[Any] = []
    try:
        try:
            postgres = services.start_postgres(None, docker=False)
            started.append(postgres)
            kafka = services.start_kafka(None, docker=False)
            started.append(kafka)
        except Exception as exc:  # one line for the tier's log, whatever failed
            print(f"compat-services: cannot start: {type(exc).__name__}: {first_line(exc)}",
                  file=sys.stderr)
            return 1
        written = Path(env_file + ".part")
        written.write_text(f"OFFSET_JOURNAL_TEST_ADMIN_URL={postgres.admin_url}\n"
                           f"OFFSET_JOURNAL_TEST_BOOTSTRAP_SERVERS={kafka.bootstrap_servers}\n")
        written.replace(env_file)  # whole or absent: the tier waits for it
        while True:
            signal.pause()
    finally:
        for service in reversed(started):
            service.stop()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python scripts/compat-services.py ENV_FILE", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
