"""Named queries: parameters are typed placeholders; web-served ones are read-only."""

import re
from pathlib import Path

import pytest

from phasemeter.store.migrate import discover
from phasemeter.store.client import is_read_only, load_sql

ROOT = Path(__file__).resolve().parents[2]
# Writes, run by CLI commands or by the worker's own ingest, never by the web port.
WRITES = {"rollup_backfill", "set_raw_ttl", "set_rollup_ttl", "rollup_delete_cells",
          "slo_backfill", "slo_delete_cells", "slo_retire", "set_slo_ttl", "record_progress",
          "slo_register"}


def named_queries() -> list[Path]:
    return sorted((ROOT / "sql").glob("*.sql"))


def test_named_queries_use_typed_parameters_only():
    paths, typed = named_queries(), 0
    assert len(paths) > 30, paths  # the CLI's, the worker's and Grafana's named queries
    for path in paths:
        text = "\n".join(ln for ln in path.read_text().splitlines() if not ln.strip().startswith("--"))
        assert "%s" not in text and "%(" not in text and "{}" not in text, path.name
        for placeholder in re.findall(r"\{([^}]*)\}", text):
            assert re.fullmatch(r"\w+:[\w(),' ]+", placeholder), (path.name, placeholder)
            typed += 1
    assert typed > len(paths), typed  # a window's two bounds at least, in most queries


def test_web_servable_queries_are_read_only():
    paths = named_queries()
    assert len(paths) > len(WRITES), paths
    for path in paths:
        if path.stem not in WRITES:
            assert is_read_only(path.read_text()), path.name
    assert not is_read_only("INSERT INTO t SELECT 1")
    assert not is_read_only("SELECT 1; DROP TABLE t")


def test_migrations_are_numbered_and_contiguous_from_one():
    versions = [m.version for m in discover()]
    assert versions[0] == 1 and versions == sorted(set(versions))


def test_variants_are_chosen_by_bound_parameters_in_the_sql():
    """--abandoned / --prefill reach the SQL as typed params, never as spliced text."""
    for name in ("bands_exact", "bands_rebucket", "latency", "latency_rebucket"):
        text = "\n".join(_code(name))
        assert "{abandoned:String} = 'include'" in text and "throwIf(NOT has(['include', 'exclude']" in text, name
        if name.startswith("bands"):
            assert "if({prefill:String} = 'total', prefill_tps," in text, name
            assert "if({prefill:String} = 'uncached', prefill_tps_uncached," in text, name
            assert "input_tokens / (ttft_s - queue_s)" in text, name
    for name in ("bands_rollup", "latency_rollup"):
        # The rollup definitions are parameterized views (one definition for
        # the CLI and Grafana); the sql/ file only selects from its view.
        [view] = (ROOT / "schema").glob(f"*_{name}_view.sql")
        text = view.read_text()
        assert "sum(abandoned_n) AS abandoned" in text and "{abandoned" not in text and "{prefill" not in text
        thin = (ROOT / "sql" / f"{name}.sql").read_text()
        assert f"FROM {name}_view(" in thin and "generations_minute" not in thin, name
    modules = sorted((ROOT / "phasemeter" / "analytics").glob("*.py"))
    assert len(modules) > 5, modules  # the analytics package is pure Python, its SQL in sql/
    for module in modules:
        code = module.read_text()
        assert not re.search(r"\b(SELECT|FROM generations|WHERE)\b", code), module.name


def test_summary_counts_abandoned_by_phase():
    text = (ROOT / "sql" / "summary.sql").read_text()
    for col in ("abandoned", "abandoned_prefill", "abandoned_decode", "not_ok", "last_ts"):
        assert f"AS {col}" in text, col


# The exact queries are parameterized views (one definition for the CLI and the
# Grafana panels' bands_view / latency_view); their sql/ files select from them.
# The stored-bucket and the re-bucketing files read one view each (edges = [] or not).
EXACT_VIEWS = {"bands_exact": ("0028_bucket_views_and_slo_view.sql", "bands_exact_buckets_view"),
               "bands_rebucket": ("0028_bucket_views_and_slo_view.sql", "bands_exact_buckets_view"),
               "latency": ("0028_bucket_views_and_slo_view.sql", "latency_exact_buckets_view"),
               "latency_rebucket": ("0028_bucket_views_and_slo_view.sql", "latency_exact_buckets_view"),
               "slo_exact": ("0026_slo_view.sql", "slo_exact_view")}


def _code(name: str) -> list[str]:
    """A query's code lines: the sql/ file's, or for an exact query its view's body."""
    if name in EXACT_VIEWS:
        file, view = EXACT_VIEWS[name]
        thin = (ROOT / "sql" / f"{name}.sql").read_text()
        assert f"FROM {view}(" in thin and "generations" not in thin.replace("_view", ""), name
        text = (ROOT / "schema" / file).read_text()
        text = text.split(f"CREATE VIEW IF NOT EXISTS {view} AS\n", 1)[1].split(";\n", 1)[0]
    else:
        text = (ROOT / "sql" / f"{name}.sql").read_text()
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("--")]


def test_the_stored_and_the_rebucketed_bucket_read_one_definition():
    """One view per shape serves the stored input bucket (edges = []) and the
    buckets recomputed from input_tokens; the sql/ files and the public
    stored-bucket views only select from it, so nothing can drift."""
    label = ("if(empty({edges:Array(UInt32)}), input_bucket, arrayElement({labels:Array(String)}, "
             "arrayCount(e -> e <= input_tokens, {edges:Array(UInt32)}))) AS bucket,")
    having = ("HAVING empty({edges:Array(UInt32)}) OR empty({buckets:Array(String)}) "
              "OR has({buckets:Array(String)}, bucket)")
    empty = "edges = CAST([], 'Array(UInt32)'), labels = CAST([], 'Array(String)')"
    migration = (ROOT / "schema" / "0028_bucket_views_and_slo_view.sql").read_text()
    for stored, rebucket, view, public in (("bands_exact", "bands_rebucket", "bands_exact_buckets_view",
                                            "bands_exact_view"),
                                           ("latency", "latency_rebucket", "latency_exact_buckets_view",
                                            "latency_exact_view")):
        body = "\n".join(_code(stored))
        assert body == "\n".join(_code(rebucket)), (stored, rebucket)  # the same view's body
        assert " ".join(body.split()).count(" ".join(label.split())) == 1 and having in body, view
        assert "FROM generations" in body and body.count("FROM generations") == 1, view
        assert empty in (ROOT / "sql" / f"{stored}.sql").read_text(), stored
        thin = (ROOT / "sql" / f"{rebucket}.sql").read_text()
        assert "edges = {edges:Array(UInt32)}, labels = {labels:Array(String)}" in thin, rebucket
        wrapper = migration.split(f"CREATE OR REPLACE VIEW {public} AS\n", 1)[1].split(";\n", 1)[0]
        assert f"FROM {view}(" in wrapper and empty in wrapper and "generations" not in wrapper, public


@pytest.mark.parametrize("exact,pool,inner", [
    ("bands_exact", "bands_pool_view", "ts, model, {}status, ttft_s, decode_tps,"),
    ("latency", "latency_pool_view", "SELECT ts, model, {}status, ttft_s, tpot_s, queue_s,")])
def test_each_pool_view_is_the_one_exact_definition_with_only_the_pool_and_the_transfer_added(exact, pool, inner):
    """The per-pool views (schema/0027) are views of their own so that the
    exact queries keep no unused key. `--by` reads the stored bucket only, so
    each is the one exact definition (0028's buckets view) at edges = [] with
    nothing but the pool key, its bound choice and (latency) the KV transfer's
    columns added: a change to what a band or a latency is that is not made
    to the pool view too fails here."""
    import difflib

    [file] = (ROOT / "schema").glob("*_pd_columns.sql")
    text = file.read_text().split(f"CREATE VIEW IF NOT EXISTS {pool} AS\n", 1)[1].split(";\n", 1)[0]
    lines = [ln.strip().replace("pool, ", "").replace(", kv_transfer_s,", ",")
             for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("--")]
    added = [ln for ln in lines if "{by:String}" in ln or "kv_transfer" in ln or "AS pool" in ln or ln == "pool,"
             or ln.startswith("'by: expected")]
    assert len(added) == (5 if exact == "bands_exact" else 8), added
    kept = [ln for ln in lines if ln not in added]
    # What edges = [] makes of the buckets view: the stored input_bucket, filtered in WHERE.
    stored = sorted([
        "- t, model, toLowCardinality(bucket) AS input_bucket, n,", "+ t, model, input_bucket, n,",
        "- bucket,", "+ input_bucket,",
        "- " + inner.format(""), "+ " + inner.format("input_bucket, "),
        "- if(empty({edges:Array(UInt32)}), input_bucket,",
        "- arrayElement({labels:Array(String)}, arrayCount(e -> e <= input_tokens, {edges:Array(UInt32)})))",
        "- AS bucket,",
        "- AND (NOT empty({edges:Array(UInt32)}) OR empty({buckets:Array(String)})",
        "- OR has({buckets:Array(String)}, input_bucket))",
        "+ AND (empty({buckets:Array(String)}) OR has({buckets:Array(String)}, input_bucket))",
        "- GROUP BY t, model, bucket", "+ GROUP BY t, model, input_bucket",
        "- HAVING empty({edges:Array(UInt32)}) OR empty({buckets:Array(String)}) "
        "OR has({buckets:Array(String)}, bucket)"])
    changed = sorted(ln for ln in difflib.ndiff(_code(exact), kept) if ln[:2] in ("- ", "+ "))
    assert changed == stored, (pool, changed)


def _judge_call(text: str) -> str:
    """The argument list of the SLO judge in a SQL text, whitespace-free."""
    code = "\n".join(ln for ln in text.splitlines() if not ln.strip().startswith("--"))
    m = re.search(r"phasemeter_slo_judge_v1\((.*?)\)\)", re.sub(r"\s+", "", code))
    assert m, "no judge call"
    return m.group(1)


def test_every_slo_count_uses_the_one_judge_with_the_same_arguments():
    """What "met" means is schema/0012; the view and the exact queries pass it
    the same row columns in the same order, the queries the same bound limits."""
    from phasemeter.alerts.slo_rules import OBJECTIVES, SLO_COUNTS

    exact = _judge_call("\n".join(_code("slo_exact")))
    assert _judge_call((ROOT / "sql" / "slo_windows.sql").read_text()) == exact
    [view] = (ROOT / "schema").glob("*_slo_minute.sql")
    in_view = _judge_call(view.read_text())
    row_cols = "status,ttft_s,prefill_tps,tpot_s,decode_tps,e2e_s"
    limits = [c for _, _, c in OBJECTIVES.values()] + ["count_failed"]
    assert exact.startswith(row_cols + ",") and in_view.startswith(",".join(f"g.{c}" for c in row_cols.split(",")))
    assert re.findall(r"\{(\w+):", exact) == limits
    assert in_view.split(",")[6:] == [f"d.{c}" for c in limits]
    [fn] = (ROOT / "schema").glob("*_slo_judge_function.sql")
    flags = re.search(r"if\(status IN.*?\[toUInt8\(0\)(.*?)\]", fn.read_text(), re.S).group(1)
    assert flags.count(",") + 1 == len(SLO_COUNTS)  # one flag per named count


@pytest.mark.parametrize("frame", ["sql/stall_window.sql", "schema/*_transfer_window_view.sql"])
def test_the_stall_and_transfer_frames_split_windows_as_the_alert_frame_does(frame):
    def parts(text):
        code = re.sub(r"\s+", " ", "\n".join(ln for ln in text.splitlines() if not ln.strip().startswith("--")))
        return re.search(r"multiIf\(.*?\) AS part", code).group(0)

    [view] = (ROOT / "schema").glob("*_alert_window_view.sql")
    [path] = ROOT.glob(frame)
    assert parts(path.read_text()) == parts(view.read_text())


def test_the_transfer_frame_is_its_view_only():
    """sql/transfer_window.sql selects from transfer_window_view (schema/0030),
    which the Grafana transfer rule reads too: no copy of its body."""
    code = "\n".join(ln for ln in (ROOT / "sql" / "transfer_window.sql").read_text().splitlines()
                     if not ln.strip().startswith("--"))
    assert "FROM transfer_window_view(" in code and "generations" not in code and "quantile" not in code


def test_no_named_read_changes_a_setting_in_its_text():
    """A reader may go through the worker's SQL interface, which runs every
    query read-only as it is: a SETTINGS clause there is refused. Tuning is
    the runner's (phasemeter.query.runner.QUERY_SETTINGS), sent where the
    target allows it; the rollup's band and latency reads share one policy."""
    from phasemeter.query.runner import QUERY_SETTINGS, SPLIT_SMALL_READS

    paths = named_queries()
    assert len(paths) > 30, paths
    for path in paths:
        if path.stem not in WRITES:
            assert not re.search(r"\bSETTINGS\b", "\n".join(_code(path.stem))), path.name
    assert QUERY_SETTINGS == {"bands_rollup": SPLIT_SMALL_READS, "latency_rollup": SPLIT_SMALL_READS}


def test_the_all_tier_check_reads_every_tier_at_its_own_grain():
    # The tables and grains are written out in the SQL (a table name cannot be
    # a bound list): they must stay those of phasemeter.store.rollup.TIERS.
    from phasemeter.store.rollup import TIERS

    code = " ".join(_code("rollup_tier_mismatches"))
    assert f"WITH [{', '.join(str(t.grain_s) for t in TIERS)}] AS grains" in code
    branches = re.findall(r"SELECT (\d+)(?: AS grain_s)?, model, input_bucket, minute, n FROM (\w+)", code)
    assert branches == [(str(t.grain_s), t.table) for t in TIERS]
