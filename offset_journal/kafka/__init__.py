"""Kafka: what the journal asks a cluster (:mod:`.admin`, confluent-kafka; a topic's
retention configs: :mod:`.configs`) and what MirrorMaker 2's offset syncs say
(:mod:`.mirror`, pure).

Importing this package loads no client: :mod:`.admin` imports confluent-kafka itself.

Its modules, and where it stands among the packages: docs/architecture.md.

May import: the shared modules only.
"""
