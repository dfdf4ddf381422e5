"""Which Kafka cluster a plan is for (pure): offsets are positions in one cluster's
logs. When the journal knows which cluster its run read (``query_runs.kafka_cluster_id``)
and the plan's bootstrap servers answer with another id, the journaled offsets mean
nothing there: the plan refuses (:func:`refuse_other_cluster`), unless it is told the
other cluster is an MM2 replica of the journaled one (``translate_from``: then
:mod:`.translate` moves the offsets). A person who has checked that the cluster is the
one the run read, whatever the journal says, overrules the refusal (``accepted``:
--accept-cluster ID), as a decision recorded with the plan.
"""

from __future__ import annotations

from ...errors import RestartError
from .._findings import Findings
from .._inputs import ClusterFacts


def refuse_other_cluster(facts: ClusterFacts | None, translate_from: str | None,
                         by_time: bool = False, accepted: str | None = None, *,
                         translatable: bool = True) -> None:
    """RestartError when the plan's cluster is not the one the journal's run read and
    no translation is asked for (a record-time plan looks its offsets up on the cluster
    itself, so it may), when a translation is asked on the same cluster, or when the
    plan's batches come from runs on different clusters. ``accepted`` (--accept-cluster
    ID) overrules the first and the last: a writer role can fill a run's empty cluster
    id with any value. ``translatable``: the refusal may suggest a translation."""
    if accepted is not None:
        _check_accepted(facts, accepted)
        return
    if facts is None or facts.journaled is None:
        return
    mixed = sorted({(run, cid) for run, cid in facts.others
                    if cid is not None and cid != facts.journaled})
    if mixed:
        run, other = mixed[0]
        raise RestartError(
            f"the plan reads batches of runs on different Kafka clusters (run "
            f"{facts.run_id}: {facts.journaled}, run {run}: {other}): their offsets do not "
            "continue each other; plan from one cluster's batches (--batch, --as-of)")
    if facts.now is None:
        return
    if translate_from is None and facts.now != facts.journaled and not by_time:
        fix = ("on a MirrorMaker 2 replica, translate them: --translate-from ALIAS; "
               if translatable else "")
        raise RestartError(
            f"the Kafka cluster at {facts.servers} is cluster {facts.now}, but run "
            f"{facts.run_id} read cluster {facts.journaled}: its offsets do not apply "
            f"there ({fix}if it is the cluster the run read and the journal's id is wrong, "
            f"overrule the check: --accept-cluster {facts.now})")
    if translate_from is not None and facts.now == facts.journaled:
        raise RestartError(
            f"--translate-from {translate_from}: the Kafka cluster at {facts.servers} is "
            f"cluster {facts.now}, the one run {facts.run_id} read; there is nothing to "
            "translate (give the replica's bootstrap servers, or drop --translate-from)")


def _foreign(facts: ClusterFacts) -> list[tuple[str, str]]:
    """The runs the plan reads whose journaled cluster is not the plan's cluster."""
    return sorted({(run, cid) for run, cid in ((facts.run_id, facts.journaled), *facts.others)
                   if cid is not None and cid != facts.now})


def _check_accepted(facts: ClusterFacts | None, accepted: str) -> None:
    """--accept-cluster ID names the cluster the plan is for, and only where the journal
    says another: an overrule is a decision, recorded, so it must be one."""
    flag = f"--accept-cluster {accepted}"
    if facts is None or facts.now is None:
        where = f"at {facts.servers} " if facts is not None else ""
        raise RestartError(f"{flag}: the Kafka cluster {where}does not say its id: there is "
                           "no cluster check to overrule (drop --accept-cluster)")
    if accepted != facts.now:
        raise RestartError(f"{flag}: the Kafka cluster at {facts.servers} is cluster "
                           f"{facts.now}: accept only the cluster the plan is for, after "
                           "checking that the journal's runs read it")
    if not _foreign(facts):
        raise RestartError(f"{flag}: the journal does not say run {facts.run_id} read "
                           f"another cluster than {facts.now}: there is nothing to overrule "
                           "(drop --accept-cluster)")


def cluster_findings(facts: ClusterFacts | None, translate_from: str | None = None,
                     accepted: str | None = None) -> Findings:
    """A note on which cluster the plan is for, or that it cannot be checked; a warning
    when a record-time plan runs on another cluster than the journal's, or when the
    check was overruled (``accepted``)."""
    found = Findings()
    if facts is None:
        return found
    if accepted is not None:
        runs = ", ".join(f"run {run}: {cid}" for run, cid in _foreign(facts))
        found.warnings.append(
            f"the journal says the plan's batches were read on another Kafka cluster than "
            f"cluster {facts.now} at {facts.servers} ({runs}); overruled as asked "
            f"(--accept-cluster {accepted}), recorded as this plan's decision: the "
            "journal's offsets are used there as they are")
    elif facts.now is None:
        found.notes.append(
            f"the Kafka cluster at {facts.servers} does not say its id: the plan cannot "
            f"check that it is the cluster run {facts.run_id} read")
    elif facts.journaled is None:  # every journal from before 0012: a note, not a warning
        found.notes.append(
            f"the journal does not know which Kafka cluster run {facts.run_id} read (its "
            "listener had no kafka_bootstrap_servers): the plan cannot check that its "
            f"offsets belong to cluster {facts.now} at {facts.servers}")
    elif facts.journaled == facts.now:
        found.notes.append(f"Kafka cluster {facts.now}: the one run {facts.run_id} read")
    elif translate_from is not None:
        found.notes.append(
            f"Kafka cluster {facts.now} at {facts.servers}: a MirrorMaker 2 replica of "
            f"cluster {facts.journaled}, which run {facts.run_id} read (--translate-from "
            f"{translate_from}): the journal's offsets are translated to the replica's")
    else:
        found.warnings.append(
            f"cluster {facts.now} is not the cluster {facts.journaled} run {facts.run_id} "
            "read: the record times are looked up here, but the journaled batches listed as "
            "read again are counted in the other cluster's offsets")
    return found
