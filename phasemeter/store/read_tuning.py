"""How the rollup's reads are shared out across threads: one policy for a
reader that sends it with its query (phasemeter.query.runner) and for the
worker's SQL interface, which applies it server-side to every query it runs
(phasemeter.store.sql_engine), as a server's profile would.

A rollup read is small in bytes: the 30-day answer at 3-hour steps reads
9,600 sketch states, a day of minute cells 28,800, both under the size from
which ClickHouse splits a read across threads by default (163,840 rows or
24 MiB), so they ran on one core while merging and finalizing the states is
nearly all of their cost. Split from the first row, they use every core the
query may: over the 100M-row benchmark store, in-process at max_threads=2
and load ~4, the 30-day band query 152 -> 123 ms and 289 -> 189 ms
(medians of 12 alternated runs), the same bytes; inside a running worker,
alternated on one engine, 147 -> 119 ms and 166 -> 131 ms (20 and 12 runs,
load ~1.8); the 1-day, 1-minute read
unchanged at that load (456 -> 466 ms, 6 runs), 402 -> 319 ms at lower load
(docs/performance/queries.md). These settings only decide which thread
reads which rows: no answer changes with them
(tests/integration/test_rollup_read_threads.py).
"""

from __future__ import annotations

SPLIT_SMALL_READS = {"merge_tree_min_rows_for_concurrent_read": 1,
                     "merge_tree_min_bytes_for_concurrent_read": 1}
