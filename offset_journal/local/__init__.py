"""Local services for tests, the demo and benchmarks: a real Kafka broker (:mod:`.kafka`),
Postgres and its standbys (:mod:`.services`, :mod:`.standby`), PgBouncer
(:mod:`.pgbouncer`), MirrorMaker 2 (:mod:`.mirror`), a latency proxy
(:mod:`.delay_proxy`) and the JVM parts from Maven Central (:mod:`.jars`). Everything
listens on loopback.

Its modules, and where it stands among the packages: docs/architecture.md.

May import: :mod:`offset_journal.capture`, :mod:`offset_journal.journal`,
:mod:`offset_journal.kafka` and the shared modules.
"""
