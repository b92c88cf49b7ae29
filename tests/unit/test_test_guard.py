"""The suite's own rules, held over every file in tests/ (tests/guard.py says
what each rule recognises): no test that checks nothing, no skip that CI
would not see (tests/requires.py), no fixed bound on a measured duration,
no zip that drops what one side has more of, no loop of assertions over
items nothing says are there.
A justified exception goes in ALLOWED with its reason; an entry that no
longer matches anything fails too, so the list cannot rot."""

from __future__ import annotations

from pathlib import Path

import pytest
from guard import findings

ROOT = Path(__file__).resolve().parents[2]

# (file, enclosing function, rule) -> why it is right as it is.
ALLOWED = {
    ("tests/unit/store/test_store_open.py", "test_good_store_urls_pass", "no-assert"):
        "the check is that check_dsn does not raise; the refusals are asserted beside it",
    ("tests/unit/store/test_store_open.py", "test_a_relative_data_dir_still_makes_an_absolute_embedded_store",
     "no-assert"):
        "the check is that check_dsn does not raise for a relative data dir",
    ("tests/integration/test_slo.py", "test_burn_rate_alerts_route_to_the_burning_phase", "clock-bound"):
        "`began` is a time in the scripted data (event timestamps), not a measured one",
    # empty-loop: a loop over items that may rightly be none, its count asserted another way.
    ("tests/unit/analytics/test_analytics_tiers.py", "check: for cell", "empty-loop"):
        "a window may read no cell of a tier; that every minute is read once is asserted before it",
    ("tests/unit/integrations/test_otlp_decode_fuzz.py", "check: for e", "empty-loop"):
        "a fuzzed request may map to no event; events + rejected + ignored == spans is asserted before it",
    ("tests/unit/integrations/test_otlp_decode_fuzz.py", "test_any_json_document_is_a_bad_request_or_mapped: for e",
     "empty-loop"):
        "any JSON document: most map to no event; the check is that each one mapped is valid",
    ("tests/unit/integrations/test_otlp_decode_fuzz.py", "test_mutated_protobuf_is_a_bad_request_or_mapped: for e",
     "empty-loop"):
        "a mutated request may map to no event; the check is that each one mapped is valid",
    ("tests/unit/integrations/test_otlp_map.py", "test_any_attribute_values_map_reject_or_ignore: for e",
     "empty-loop"):
        "random attribute values may reject every span; events + rejected + ignored == spans is asserted before it",
    ("tests/unit/producers/test_envelopes.py",
     "test_every_event_once_each_group_in_order_each_envelope_bounded: for part, body, n", "empty-loop"):
        "no entries pack into no envelope; that each entry is in exactly one is asserted before it (sorted(seen))",
    ("tests/unit/render/test_charts.py", "test_header_lines_fit_the_width_and_never_overlap: for upper, lower",
     "empty-loop"):
        "the pairs of neighbouring boxes, of which there are three at least (asserted before it)",
    ("tests/unit/stream_jobs/test_schema_v2.py", "test_emitter_never_sends_an_empty_label: for _, value",
     "empty-loop"):
        "an emitter that refuses the empty label sends nothing, which passes; what it does send must be accepted",
    ("tests/integration/test_asgi_uvicorn.py", "test_stream_reaches_the_client_unbuffered_and_is_timed: for part",
     "empty-loop"):
        "the streamed body read as it comes; after the loop it is asserted whole (six data lines, then [DONE])",
    ("tests/integration/test_pipeline.py",
     "test_a_backlog_of_envelopes_is_decoded_a_batch_ahead_and_stored_once_exactly: for r", "empty-loop"):
        "stored_once_after_restart asserts the stored request ids are the 12,000 sent, each once",
}


def sources() -> dict[str, str]:
    return {p.relative_to(ROOT).as_posix(): p.read_text() for p in sorted((ROOT / "tests").rglob("*.py"))}


def test_the_guard_reads_the_whole_suite():
    found = sources()
    assert len(found) > 90 and "tests/unit/test_test_guard.py" in found and "tests/conftest.py" in found


@pytest.fixture(scope="module")
def suite_findings():
    """The whole suite's findings, read once for the tests below (a read takes ~6 s of CPU)."""
    return findings(sources())


def test_every_test_file_keeps_the_rules(suite_findings):
    broken = [f for f in suite_findings if f.key not in ALLOWED]
    assert not broken, "\n".join(f"{f.path}:{f.line} {f.where} [{f.rule}] {f.text}" for f in broken)


def test_every_allowed_exception_still_exists(suite_findings):
    keys = {f.key for f in suite_findings}
    assert len(ALLOWED) > 0
    stale = [k for k in ALLOWED if k not in keys]
    assert not stale, f"allow-list entries that match nothing any more: {stale}"


# Planted examples: source strings, parsed by the guard like any test file.
HELPERS = '''
def wait_for(pred):
    if not pred():
        raise AssertionError("timed out")

def check_rows(rows):
    assert rows

def through_another(rows):
    check_rows(rows)
'''


@pytest.mark.parametrize("body, rule", [
    ("def test_nothing():\n    x = 1 + 1\n", "no-assert"),
    ("def test_calls_only_a_non_asserting_function():\n    print('done')\n", "no-assert"),
    ("class TestThing:\n    def test_method(self):\n        self.x = 1\n", "no-assert"),
    ("import pytest\ndef test_it():\n    pytest.skip('no chromium')\n    assert 1\n", "skip"),
    ("import pytest\n@pytest.mark.skipif(True, reason='x')\ndef test_it():\n    assert 1\n", "skip"),
    ("import pytest\nmod = pytest.importorskip('chdb')\n", "skip"),
    ("def test_it(worst):\n    assert worst < 0.05\n", "clock-bound"),
    ("import time\ndef test_it(t0):\n    assert time.monotonic() - t0 < 2\n", "clock-bound"),
    ("LIMIT = 0.05\ndef test_it(elapsed):\n    assert elapsed <= LIMIT\n", "clock-bound"),
    ("def test_it(ev, script):\n    assert ev['ttft_s'] <= script.ttft_s + 0.03\n", "clock-bound"),
    ("def test_it(took):\n    assert 0.1 <= took < 0.2\n", "clock-bound"),
    ("def test_it(gaps):\n    assert 2 > max(gaps)\n", "clock-bound"),
    ("from pytest import skip\ndef test_it():\n    skip('no go')\n    assert 1\n", "skip"),
    ("def test_it(a, b):\n    assert all(x == y for x, y in zip(a, b))\n", "zip-strict"),
    ("integration:def test_it():\n    meter = Meter('x:1', producer_factory=lambda **kw: None)\n    assert meter\n",
     "kafka-fake"),
    ("integration:class MemoryProducer:\n    def send(self, topic, value=None):\n        pass\n", "kafka-fake"),
    ("def test_it(rows):\n    for r in rows:\n        assert r > 0\n", "empty-loop"),
    ("def check(rows):\n    for r in rows:\n        assert r > 0\n", "empty-loop"),  # an asserting helper
    ("def test_it(rows):\n    for r in rows:\n        assert r\n    assert len(rows) == 3\n", "empty-loop"),  # after
    ("def test_it(rows, other):\n    assert other\n    for r in rows:\n        assert r\n", "empty-loop"),
    ("def test_it(rows):\n    assert len(rows) >= 0\n    for r in rows:\n        assert r\n", "empty-loop"),
    ("def test_it(rows):\n    assert len(rows) < 5\n    for r in rows:\n        assert r\n", "empty-loop"),
    ("def test_it(rows):\n    assert all(rows)\n    for r in rows:\n        assert r > 0\n", "empty-loop"),
    ("def test_it(rows):\n    assert rows\n    for r in rows:\n        for c in r.cells:\n            assert c\n",
     "empty-loop"),  # each row's cells may be none
    ("def test_it(rows):\n    assert rows\n    for a, b in zip(rows[:-1], rows[1:], strict=True):\n"
     "        assert a < b\n", "empty-loop"),  # a slice may be empty
    ("def test_it(rows):\n    n = 1\n    for r in rows:\n        assert r\n        n += 1\n    assert n > 0\n",
     "empty-loop"),  # a tally that does not start empty
    ("def test_it(n):\n    for i in range(n):\n        assert i >= 0\n", "empty-loop"),
    ("import pytest\ndef test_it(rows):\n    for r in rows:\n        with pytest.raises(ValueError):\n"
     "            int(r)\n", "empty-loop"),
])
def test_the_guard_fails_on_a_planted_example(body, rule):
    folder, _, body = body.partition(":") if body.startswith("integration:") else ("unit", "", body)
    path = f"tests/{folder}/test_planted.py"
    got = findings({path: body, "tests/helpers.py": HELPERS})
    assert len(got) == 1, got
    assert (got[0].path, got[0].rule) == (path, rule)


@pytest.mark.parametrize("body", [
    "def test_asserts():\n    assert 1 + 1 == 2\n",
    "import pytest\ndef test_raises():\n    with pytest.raises(ValueError):\n        int('x')\n",
    "def test_hands_to_a_helper():\n    wait_for(lambda: True)\n",
    "def test_hands_to_a_helper_of_a_helper(rows):\n    through_another(rows)\n",
    "def test_method_call_of_a_helper(w):\n    w.check_rows([1])\n",
    "from requires import require_tool\ndef test_browser():\n    assert require_tool('chromium')\n",
    "def test_lower_bound_from_the_script(took):\n    assert took >= 0.2\n",
    "def test_upper_bound_from_the_callers_clock(took, watched):\n    assert 0.2 <= took <= watched\n",
    "def test_equality_on_scripted_values(ev):\n    assert ev['ttft_s'] == 0.5\n",
    "def helper_not_a_test():\n    x = 1\n",
    "def test_strict_zip(a, b):\n    assert all(x == y for x, y in zip(a, b, strict=True))\n",
    "class MemoryProducer:\n    pass\n",  # in tests/unit: where a fake belongs
    "import pytest\ndef test_it():\n    with pytest.raises(pytest.skip.Exception):\n        pass\n",
    "def test_a_ratio(meta):\n    assert 150 <= 3600 / meta['step_s'] <= 400\n",
    "import m\ndef test_a_constant():\n    assert 0 < m.STOP_GRACE_S < 1.0\n",
    "def test_count_first(rows):\n    assert len(rows) == 3\n    for r in rows:\n        assert r > 0\n",
    "def test_non_empty_first(rows):\n    assert rows and rows[0]\n    for i, r in enumerate(sorted(rows)):\n"
    "        assert r\n",
    "def test_set_of_a_field(rows):\n    assert {r.model for r in rows} == {'a', 'b'}\n    for r in rows:\n"
    "        assert r.n\n",
    "def test_unpacked(rows):\n    (only,) = rows\n    for r in rows:\n        assert r is only\n",
    "def test_subset(rows):\n    assert {'a'} <= set(rows) and 'b' in rows.keys()\n    for k, v in rows.items():\n"
    "        assert v\n",
    "def test_literal():\n    for x in (1, 2):\n        assert x\n    for x in range(3):\n        assert x >= 0\n",
    "CASES = [1, 2]\nN = 3\ndef test_constants():\n    for x in CASES:\n        assert x\n"
    "    for i in range(N + 1):\n        assert i >= 0\n",
    "def test_local_literal():\n    cases = ['a', 'b']\n    for c in cases + more():\n        assert c\n",
    "import pytest\n@pytest.mark.parametrize('xs', [[1], [2, 3]])\ndef test_param(xs):\n    for x in xs:\n"
    "        assert x\n",
    "def test_strict_zip_one_side(a, b):\n    assert len(a) == 2\n    for x, y in zip(a, b, strict=True):\n"
    "        assert x == y\n",
    "def test_tally_after(stream):\n    n, seen = 0, set()\n    for r in stream():\n        assert r\n"
    "        n += 1\n        seen.add(r)\n    assert n > 100\n",
    "def test_collected_after(stream):\n    seen = []\n    for r in stream():\n        assert r\n"
    "        seen.append(r)\n    assert {'x'} <= set(seen)\n",
    "def test_loop_without_checks(rows):\n    for r in rows:\n        print(r)\n    assert 1\n",
])
def test_the_guard_passes_what_keeps_the_rules(body):
    assert findings({"tests/unit/test_planted.py": body, "tests/helpers.py": HELPERS}) == []


def test_skipping_is_allowed_only_in_the_one_place_that_decides():
    body = "import pytest\ndef missing(reason):\n    pytest.skip(reason)\n"
    assert findings({"tests/requires.py": body}) == []
    (elsewhere,) = findings({"tests/cdp.py": body})
    assert elsewhere.rule == "skip"


def test_no_two_test_modules_share_a_name():
    # tests/ has no packages: pytest imports each test module by its file
    # name alone, and a second module of one name fails the collection of
    # the whole suite (only when both are collected, as `make test` does).
    names: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        names.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert len(names) > 100
    assert {n: ps for n, ps in names.items() if len(ps) > 1} == {}
