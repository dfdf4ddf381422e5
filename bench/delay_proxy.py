"""The latency proxy the benchmarks run by path: :mod:`offset_journal.local.delay_proxy`
(there so that the failover tests and benches can hold a standby behind with it).

    .venv/bin/python bench/delay_proxy.py --listen 6543 --target /tmp/x/.s.PGSQL.5432 --rtt-ms 50
"""

from offset_journal.local.delay_proxy import run

if __name__ == "__main__":
    run()
