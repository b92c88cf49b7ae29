"""/health's consumer lag: high-water mark minus the next offset admitted,
per owned ingest partition; unknown (None), not 0, when nothing is known."""

from __future__ import annotations

from collections import namedtuple
from types import SimpleNamespace

from phasemeter.stream_jobs.sequence import Sequencer
from phasemeter.stream_jobs.web import consumer_lag

TP = namedtuple("TP", "topic partition")


class Consumer:
    def __init__(self, owned, high):
        self.owned, self.high = owned, high

    def assignment(self):
        return set(self.owned)

    def highwater(self, tp):
        if tp not in self.high:
            raise KeyError(tp)  # not fetched yet
        return self.high[tp]


def pipeline(next_offsets):
    sequencer = Sequencer()
    sequencer.load(next_offsets)
    return SimpleNamespace(topics=("raw", "raw.joined"), sequencer=sequencer)


def test_lag_is_high_water_minus_next_offset_on_owned_ingest_partitions():
    owned = [TP("raw", 0), TP("raw", 1), TP("raw.joined", 0), TP("raw.phases", 0), TP("raw", 2)]
    app = SimpleNamespace(consumer=Consumer(owned, {TP("raw", 0): 120, TP("raw", 1): 50, TP("raw.joined", 0): 7,
                                                    TP("raw.phases", 0): 999}))
    got = consumer_lag(app, pipeline({("raw", 0): 100, ("raw", 1): 50, ("raw.joined", 0): 3, ("raw", 2): 0,
                                      ("raw.phases", 0): 0}))
    # raw/2 has no high-water mark yet: left out, not counted as 0; phases are the join's, not ingest's
    assert got == {"lag": 24, "lag_by_partition": {"raw/0": 20, "raw/1": 0, "raw.joined/0": 4}}


def test_unknown_before_the_consumer_or_any_position_exists():
    class NotStarted:
        @property
        def consumer(self):
            raise RuntimeError("no consumer yet")
    assert consumer_lag(NotStarted(), pipeline({})) == {"lag": None, "lag_by_partition": {}}
    app = SimpleNamespace(consumer=Consumer([TP("raw", 0)], {TP("raw", 0): 10}))
    assert consumer_lag(app, pipeline({})) == {"lag": None, "lag_by_partition": {}}
