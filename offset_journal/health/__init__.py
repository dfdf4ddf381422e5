"""A fleet's health: when retention deletes what a query has not read
(:mod:`.forecast`, pure), one check with thresholds and exit codes (:mod:`.check`,
pure), and the edge that reads the journal and the broker for them (:mod:`.edge`).

Its modules, and where it stands among the packages: docs/architecture.md.

May import: :mod:`offset_journal.restart`, :mod:`offset_journal.capture`,
:mod:`offset_journal.journal`, :mod:`offset_journal.kafka` and the shared modules.
"""
