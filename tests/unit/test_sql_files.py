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
EXACT_VIEWS = {"bands_exact": ("0024_bands_view.sql", "bands_exact_view"),
               "latency": ("0025_latency_view.sql", "latency_exact_view"),
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


@pytest.mark.parametrize("exact,pool", [("bands_exact", "bands_pool_view"), ("latency", "latency_pool_view")])
def test_each_pool_view_is_its_exact_view_with_only_the_pool_and_the_transfer_added(exact, pool):
    """The per-pool views (schema/0027) are views of their own so that the
    exact views keep no unused key: nothing but the pool key, its bound
    choice and (latency) the KV transfer's columns may differ."""
    [file] = (ROOT / "schema").glob("*_pd_columns.sql")
    text = file.read_text().split(f"CREATE VIEW IF NOT EXISTS {pool} AS\n", 1)[1].split(";\n", 1)[0]
    lines = [ln.strip().replace("pool, ", "").replace(", kv_transfer_s,", ",")
             for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("--")]
    added = [ln for ln in lines if "{by:String}" in ln or "kv_transfer" in ln or "AS pool" in ln or ln == "pool,"
             or ln.startswith("'by: expected")]
    assert len(added) == (5 if exact == "bands_exact" else 8), added
    kept = [ln for ln in lines if ln not in added]
    assert kept == _code(exact)


def test_each_rebucketing_query_is_its_base_query_with_only_the_bucket_changed():
    """The re-bucketing queries stay files of their own (one query with an
    optional edges parameter was measured slower on the stored-bucket path,
    docs/analytics.md). So nothing but the bucket may differ: a change to
    the base query that is not made to its twin fails here."""
    import difflib

    label = ("arrayElement({labels:Array(String)}, arrayCount(e -> e <= input_tokens, "
             "{edges:Array(UInt32)})) AS input_bucket,")
    having = "HAVING empty({buckets:Array(String)}) OR has({buckets:Array(String)}, input_bucket)"
    where = "AND (empty({buckets:Array(String)}) OR has({buckets:Array(String)}, input_bucket))"
    for base, twin, inner in (("bands_exact", "bands_rebucket", "ts, model, {}, status, ttft_s, decode_tps,"),
                              ("latency", "latency_rebucket", "SELECT ts, model, {}, status, ttft_s, tpot_s, queue_s,")):
        changed = sorted(ln for ln in difflib.ndiff(_code(base), _code(twin)) if ln[:2] in ("- ", "+ "))
        assert changed == sorted([
            "- input_bucket,", "+ " + label,
            "- " + inner.format("input_bucket"), "+ " + inner.format("input_tokens"),
            "- " + where, "+ " + having]), (twin, changed)


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


@pytest.mark.parametrize("frame", ["stall_window", "transfer_window"])
def test_the_stall_and_transfer_frames_split_windows_as_the_alert_frame_does(frame):
    def parts(text):
        code = re.sub(r"\s+", " ", "\n".join(ln for ln in text.splitlines() if not ln.strip().startswith("--")))
        return re.search(r"multiIf\(.*?\) AS part", code).group(0)

    [view] = (ROOT / "schema").glob("*_alert_window_view.sql")
    assert parts((ROOT / "sql" / f"{frame}.sql").read_text()) == parts(view.read_text())


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
