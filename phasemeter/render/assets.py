"""The live page's files (phasemeter/render/live/), shipped as package data.

Read through importlib.resources so an installed wheel serves the same bytes
as a checkout; only names in ASSETS can be asked for, so a URL can never
reach another file.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

ASSETS = {"index.html": "text/html", "live.js": "application/javascript", "bands.js": "application/javascript",
          "pools.js": "application/javascript", "live.css": "text/css"}


@lru_cache(maxsize=None)
def asset(name: str) -> bytes:
    """Bytes of one shipped file; KeyError for anything else."""
    if name not in ASSETS:
        raise KeyError(name)
    return resources.files("phasemeter.render").joinpath("live", name).read_bytes()


def page_weight() -> dict:
    """Bytes of every file the page loads, plain and gzipped (what the docs quote)."""
    import gzip

    plain = {n: len(asset(n)) for n in ASSETS}
    zipped = {n: len(gzip.compress(asset(n), 9)) for n in ASSETS}
    return {"files": plain, "total": sum(plain.values()), "gzip": zipped, "gzip_total": sum(zipped.values())}
