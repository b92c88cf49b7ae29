"""What the sender thread does with a batch it took from the queue: encode
each event and hand it to the producer, one keyed message per event or in
envelopes (envelopes.py), and count each one sent or failed when Kafka
answers. Runs only in the sender thread; kafka-python calls back from its
own I/O thread.
"""

from __future__ import annotations

import time

from .encode import EVENT_FIELDS, encode
from .phases import encode_phase

_YIELD_EVERY = 32  # events encoded+sent between voluntary GIL releases (~0.3 ms)
_GEN_LEN = len(EVENT_FIELDS)  # phase tuples (phases.py) have other lengths


class Delivery:
    """Sender's sending; a subclass gives `_ch` (the Channel), `_producer`,
    `_topic`, `_gateway`, `_envelope_size` and `warn` (a Throttled log)."""

    __slots__ = ()

    def _send(self, batch) -> None:
        if self._envelope_size > 1:
            self._send_envelopes(batch)
            return
        producer, topic, gateway, settle = self._producer, self._topic, self._gateway, self._ch.settle
        for i, item in enumerate(batch, 1):
            if not i % _YIELD_EVERY:
                time.sleep(0)  # hand the GIL back now rather than at the 5 ms forced switch
            try:
                key, value = encode(item, gateway) if len(item) == _GEN_LEN else encode_phase(item, gateway)
                future = producer.send(topic, key=key, value=value)
            except Exception as exc:  # encoding error, closed producer, metadata timeout ...
                settle(False)
                self.warn.warning("phasemeter emitter: send failed (%s)", type(exc).__name__)
                continue
            future.add_callback(self._on_ok)
            future.add_errback(self._on_error)

    def _send_envelopes(self, batch) -> None:
        """Many events per Kafka message (envelopes.py): what was queued,
        in envelopes of up to `envelope_size`; phase events keep the
        partition their key gives them, so one request's phases stay in
        one partition and in order."""
        from .envelopes import pack  # imports kafka: this thread has it already

        settle, gateway, entries = self._ch.settle, self._gateway, []
        for item in batch:
            try:
                if len(item) == _GEN_LEN:
                    entries.append((encode(item, gateway)[1], item[-1] is not None, None))
                else:
                    key, value = encode_phase(item, gateway)
                    entries.append((value, True, key))
            except Exception as exc:
                settle(False)
                self.warn.warning("phasemeter emitter: encode failed (%s)", type(exc).__name__)
        if not entries:
            return
        try:
            keyed = any(e[2] is not None for e in entries)
            partitions = sorted(self._producer.partitions_for(self._topic)) if keyed else None
        except Exception as exc:  # metadata timeout: as a failed send would be
            settle(False, len(entries))
            self.warn.warning("phasemeter emitter: no partitions for %s (%s)", self._topic, type(exc).__name__)
            return
        for partition, body, n in pack(entries, self._envelope_size, partitions):
            time.sleep(0)  # give the GIL back between envelopes
            try:
                future = self._producer.send(self._topic, key=None, value=body, partition=partition)
            except Exception as exc:
                settle(False, n)
                self.warn.warning("phasemeter emitter: send failed (%s)", type(exc).__name__)
                continue
            future.add_callback(lambda _md, n=n: settle(True, n))
            future.add_errback(lambda exc, n=n: self._on_error(exc, n))

    def _on_ok(self, _metadata) -> None:
        self._ch.settle(True)

    def _on_error(self, exc: BaseException, n: int = 1) -> None:
        self._ch.settle(False, n)
        self.warn.warning("phasemeter emitter: delivery failed (%s)", type(exc).__name__)
