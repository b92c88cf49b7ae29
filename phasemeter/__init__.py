"""phasemeter: prefill and decode throughput as percentile bands.

Kept import-free on purpose: gateways import `phasemeter.producers` and must
not pay for (or need) the worker's dependencies.
"""

__version__ = "0.1.0"
