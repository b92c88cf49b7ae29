"""No stored value reaches a terminal raw: every text output (tables, CSV,
the SLO and alert tables) escapes control characters by one rule
(phasemeter.textgrid.printable); HTML escapes by HTML's and JSON's rules."""

from __future__ import annotations

import csv
import io
import re
import unicodedata

import numpy as np
import pandas as pd
from hypothesis import given, settings, strategies as st

from phasemeter.query.queries import BAND_COLUMNS
from phasemeter.render.table import to_table
from phasemeter.textgrid import grid, printable

# What a hostile sender put in labels: clear the screen, set the title (OSC,
# ended by BEL and by ST), NUL, CR/LF, an 8-bit CSI.
HOSTILE = ["evil\x1b[2J\x1b[H", "t\x1b]0;pwned\x07x", "t\x1b]2;x\x1b\\y", "nul\x00l", "cr\rlf\nx", "csi\x9b31m"]
# Raw control bytes other than the line breaks between lines of output.
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def _frame(models):
    rows = []
    for i, m in enumerate(models):
        row = {c: 1.0 for c in BAND_COLUMNS}
        row.update(t=pd.Timestamp("2026-11-29 10:00"), model=m, input_bucket=f"b\x1b[{i}m", n=3,
                   prefill_n=3, decode_n=3)
        rows.append(row)
    return pd.DataFrame(rows, columns=BAND_COLUMNS)


def test_printable_escapes_every_control_character_and_nothing_else():
    assert printable("evil\x1b[2J") == "evil\\x1b[2J"
    assert printable("a\x00b\rc\nd\te\x7f\x9b") == "a\\x00b\\x0dc\\x0ad\\x09e\\x7f\\x9b"
    for fine in ("gpt-oss-120b", "llama/70B…é", "模型", "a\\x1b", ""):
        assert printable(fine) == fine


@settings(max_examples=500)
@given(st.text())
def test_printable_leaves_no_control_character(text):
    out = printable(text)
    assert not any(unicodedata.category(ch) == "Cc" for ch in out)
    if not any(unicodedata.category(ch) == "Cc" for ch in text):
        assert out == text


def test_bands_table_prints_hostile_labels_escaped_and_aligned():
    text = to_table(_frame(HOSTILE), wide=True)
    assert RAW.search(text) is None, repr(text)
    body = [line for line in text.splitlines() if line.startswith("2026-11-29")]
    assert len(body) == len(HOSTILE)
    for line, label in zip(body, HOSTILE, strict=True):
        assert printable(label) in line
    assert len({line.index("  3") for line in body}) == 1  # the n column lines up


def test_bands_csv_stays_valid_csv_with_escaped_labels():
    from phasemeter.render.table import to_csv

    text = to_csv(_frame(HOSTILE))
    assert RAW.search(text) is None, repr(text)
    lines = text.splitlines()
    assert len(lines) == len(HOSTILE) + 1  # one line per row: no field spans lines
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == len(HOSTILE)
    assert [r["model"] for r in rows] == [printable(m) for m in HOSTILE]


def test_csv_of_object_columns_pandas_writes_is_escaped_too():
    from phasemeter.render.csv_text import to_csv

    text = to_csv(pd.DataFrame({"o": [1, "x\x1b[2J"], "f": np.float32([1, 2])}))  # pandas' path
    assert RAW.search(text) is None and "x\\x1b[2J" in text


def test_grid_and_slo_and_alert_tables_escape_cells():
    lines = grid(["model", "n"], [[m, "1"] for m in HOSTILE], right={1})
    assert len(lines) == len(HOSTILE) + 2
    assert all(RAW.search(line) is None and "\n" not in line for line in lines)
    assert len({len(line) for line in lines[2:]}) == 1  # aligned after escaping


def test_html_chart_escapes_hostile_labels(tmp_path):
    from phasemeter.render.html import render_bands_html

    models = HOSTILE + ["</script><script>alert(1)</script>", "<img src=x onerror=alert(1)>"]
    clean = render_bands_html(_frame(["m"] * len(models)), tmp_path / "clean.html").read_text()
    doc = render_bands_html(_frame(models), tmp_path / "x.html").read_text()
    assert RAW.search(doc) is None
    assert doc.count("</script") == clean.count("</script")  # no label closes a script element
    # Labels travel as JSON inside the data script, drawn by bands.js through esc();
    # outside the scripts the document holds no label.
    outside = re.sub(r"<script[^>]*>.*?</script>", "", doc, flags=re.S)
    assert "<img" not in outside and "alert(1)" not in outside
    assert "function esc(s)" in doc and '"<": "&lt;"' in doc


def test_slo_table_and_csv_escape_labels():
    from phasemeter.alerts.slo_rules import load_slos
    from phasemeter.render.slo_table import render
    from phasemeter.stream_jobs.buckets import PRESETS, labels

    slo = load_slos("example", labels(PRESETS["default"])).slos[0]
    meta = {"count_failed": True, "step_s": None, "slo": slo.name, "objectives": "ttft_s<=2", "start": "a",
            "end": "b", "path": "exact", "reason": "r",
            "period": {"seconds": 86400, "end": "b", "path": "exact",
                       "models": [{"model": m, "budget_left": 0.5, "burn_rate": 0.5, "n": 1} for m in HOSTILE]}}
    rows = [{"model": m, "input_bucket": "b\x1b[0m", "n": 1, "attainment": 0.5, "target": 0.9} for m in HOSTILE]
    for fmt in ("table", "csv"):
        text = render(rows, fmt, meta, slo)
        assert RAW.search(text) is None, (fmt, text)
        assert all(printable(m) in text for m in HOSTILE)
    assert len(render(rows, "csv", meta, slo).splitlines()) == len(rows) + 1


def test_svg_chart_holds_no_raw_control_character(tmp_path):
    """An SVG is text (and XML 1.0 forbids most control characters): panel
    titles name the labels escaped."""
    from phasemeter.render.png import render_bands_png

    doc = render_bands_png(_frame(HOSTILE), tmp_path / "x.svg").read_text()
    assert RAW.search(doc) is None
    assert printable(HOSTILE[0]) in doc


def test_cli_error_messages_escape_what_they_quote(capsys):
    """An error may list stored values (`--model x: no generations of it in this
    window; the models are ...`): the one line the CLI prints is escaped too."""
    import argparse

    from phasemeter.cli.main import guarded
    from phasemeter.store.client import StoreError
    from phasemeter.timeparse import ArgError

    args = argparse.Namespace(command="query")
    for exc, rc in ((ArgError("--model x: the models are evil\x1b[2J (3), t\x1b]0;pwned\x07"), 2),
                    (StoreError("store said: nul\x00 cr\r"), 1)):
        def run(exc=exc):
            raise exc
        assert guarded(args, run) == rc
        err = capsys.readouterr().err
        assert err.endswith("\n") and err.count("\n") == 1 and RAW.search(err) is None, repr(err)


def test_the_bulk_pattern_is_the_same_set_as_printable():
    """csv_text finds values to escape with CONTROL_CLASS (in Arrow's RE2):
    the same characters printable escapes, Unicode's Cc, and no others."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from phasemeter.textgrid import CONTROL_CLASS

    chars = [chr(c) for c in range(0x3000) if not 0xD800 <= c < 0xE000]
    assert len(chars) == 0x3000
    found = pc.match_substring_regex(pa.array(chars), CONTROL_CLASS).to_pylist()
    assert found == [unicodedata.category(ch) == "Cc" for ch in chars]
    assert [printable(ch) != ch for ch in chars] == found
