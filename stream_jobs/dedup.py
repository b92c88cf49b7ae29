"""The duplicate rule of a batch, pure.

A row is dropped when an earlier row of its scope has its request_id, or when the store holds that request_id from
the scope's topics within the scope's time range (widened by 2 ms, as the store keeps ts to the millisecond). The
joined topic's records and the rows joined in the batch are one scope: a generation is stored via the joined topic
or ingest's own join, and after a crash may come back the other way (docs/phases.md), so it is dropped and counted.
Each other topic is a scope of its own, where a dropped row is a duplicate delivery (a gateway's, or a span exported
twice), dead-lettered.

The decode answers for a store that holds none of the batch's request_ids, ahead of the batch's turn
(batch_decode.py): the rule is Python over every row, and in the batch's turn it held the GIL against the decode
of the next batch (docs/performance/worker.md). In its turn the batch asks the store (pipeline.py), and only if the
store holds any, or the batch re-reads rows it holds, is the rule applied again, to what the store answered.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Scope:
    topic: str | None  # the joined topic for the joined scope
    rows: range | list[int]  # its rows in the batch, in order
    ids: list[str]  # their request_ids
    unique: list[str]  # the distinct ones, what the store is asked about
    lo: float  # the time range the store is asked about (epoch s)
    hi: float


@dataclass
class Answer:
    dropped: set[int] = field(default_factory=set)  # rows
    letters: list[tuple[int, str]] = field(default_factory=list)  # (row, request_id) of each duplicate delivery
    rejoined: int = 0  # generations joined both ways, dropped


def scopes(gens, message: np.ndarray, joined: np.ndarray, topics: list[str], joined_topic: str | None,
           dropped: set[int] = frozenset()) -> list[Scope]:
    """The rows of `gens` but `dropped` by scope: the joined topic's, then each topic's in the batch's order (`topics`:
    each message's, `message`: each row's, `joined`: each row's joined in the batch). None is empty."""
    if len(set(topics)) == 1 and not dropped and not joined.any():  # the common batch, of one topic
        parts = [(topics[0], range(len(message)))]
    else:
        # Each row's scope as a number (the joined scope's 0, a dropped row's -1): comparing an object array of
        # topic names took 6.5 ms of a mixed batch of 90,000 rows, these 2 ms.
        names = list(dict.fromkeys((joined_topic, *topics)))
        number = {topic: k for k, topic in enumerate(names)}
        of_row = (np.array([number[t] for t in topics], dtype=np.int32)[message] if len(message)
                  else np.zeros(0, dtype=np.int32))
        of_row[joined] = 0
        of_row[list(dropped)] = -1
        parts = [(topic, np.flatnonzero(of_row == k).tolist()) for k, topic in enumerate(names)]
    out = []
    for topic, rows in parts:
        if not len(rows):
            continue
        if type(rows) is range:  # sliced: numpy made an index array of a range first, ~3.5 ms on 90,000 rows
            ids, ts = gens.request_ids[rows.start:rows.stop], gens.ts[rows.start:rows.stop]
        else:
            ids, ts = [gens.request_ids[i] for i in rows], gens.ts[rows]
        out.append(Scope(topic, rows, ids, list(dict.fromkeys(ids)), float(ts.min()) - 0.002, float(ts.max()) + 0.002))
    return out


def answer(scopes: list[Scope], stored: list[set[str]], joined_topic: str | None) -> Answer:
    """The rows to drop, given each scope's request_ids the store holds (`stored`)."""
    out = Answer()
    for scope, seen in zip(scopes, stored):
        if not seen and len(scope.unique) == len(scope.ids):
            continue
        seen = set(seen)
        for j, rid in enumerate(scope.ids):
            if rid not in seen:
                seen.add(rid)
                continue
            out.dropped.add(scope.rows[j])
            if scope.topic == joined_topic:
                out.rejoined += 1
            else:
                out.letters.append((scope.rows[j], rid))
    return out
