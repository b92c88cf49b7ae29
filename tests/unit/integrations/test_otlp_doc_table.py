"""docs/ingest/otlp.md's mapping table equals the code's: the table in the
doc is the one otlp_names renders, and every attribute it lists is one the
mapping reads, in the order it lists them."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_otlp_map import GENAI, VLLM, one

from phasemeter.integrations.otlp_names import SOURCES, table

DOC = Path(__file__).resolve().parents[3] / "docs" / "ingest" / "otlp.md"


def doc_rows() -> list[str]:
    lines = DOC.read_text().splitlines()
    start = lines.index(table().splitlines()[0]) if table().splitlines()[0] in lines else None
    assert start is not None, "docs/ingest/otlp.md has no mapping table with the generated header"
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def test_the_doc_table_is_the_generated_one():
    want = table().splitlines()
    got = doc_rows()
    assert len(got) == len(want) == len(SOURCES) + 2
    for g, w in zip(got, want, strict=True):
        assert g == w


# One base span per field, without any of the field's own attributes, so a
# single attribute from the table decides the value.
def _without(base: dict, names) -> dict:
    return {k: v for k, v in base.items() if k not in names}


@pytest.mark.parametrize("source", [s for s in SOURCES if s.field in (
    "e2e_s", "ttft_s", "queue_s", "input_tokens", "output_tokens", "cached_input_tokens")],
    ids=lambda s: s.field)
def test_every_listed_attribute_is_read_in_the_listed_order(source):
    value = {"input_tokens": 1000, "output_tokens": 7, "cached_input_tokens": 100,
             "queue_s": 0.1}.get(source.field, 0.25)
    base = _without(VLLM if source.field in ("e2e_s", "queue_s") else GENAI, source.names)
    assert len(source.names) >= 1
    for name in source.names:
        assert one({**base, name: value})[source.field] == value, name
    # the first listed wins over every later one
    other = value + 1 if isinstance(value, int) else value / 2
    attrs = {**base, **{n: other for n in source.names[1:]}, source.names[0]: value}
    assert one(attrs)[source.field] == value


@pytest.mark.parametrize("field", ["model", "request_id", "finish_reason"])
def test_label_sources_in_the_listed_order(field):
    [source] = [s for s in SOURCES if s.field == field]
    base = _without(GENAI, source.names)
    assert len(source.names) >= 1
    for name in source.names:
        assert one({**base, name: "x-1"})[field] == "x-1", name
    assert one({**base, **{n: "later" for n in source.names[1:]}, source.names[0]: "first"})[field] == "first"


def test_replica_sources_in_the_listed_order():
    [source] = [s for s in SOURCES if s.field == "replica"]
    names = [n.split("`")[1] for n in source.names]
    assert len(names) == 3
    for name in names:
        assert one(VLLM, resource={name: "gpu-1"})["replica"] == "gpu-1", name
    assert one(VLLM, resource={n: f"r-{i}" for i, n in enumerate(names)})["replica"] == "r-0"
