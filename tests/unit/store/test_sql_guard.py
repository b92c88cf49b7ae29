"""The SQL interface's classifier: the text check, the parse check on the
engine's `EXPLAIN AST` text (captured from chDB 4.4), and errors in
ClickHouse's form. The same refusals through a real worker:
tests/integration/test_sql_refusals.py."""

from __future__ import annotations

import pytest

from phasemeter.store.sql_guard import ChError, check_ast, check_text, from_engine, words

TABLE_FUNCTIONS = frozenset({"file", "url", "s3", "remote", "python", "numbers", "format", "dictionary", "input"})


def ast(*lines: str) -> str:
    return "\n".join(lines) + "\n"


SELECT_FORMAT = ast("SelectWithUnionQuery (children 2)", " ExpressionList (children 1)", "  SelectQuery (children 2)",
                    "   ExpressionList (children 1)", "    Identifier a", "   TablesInSelectQuery (children 1)",
                    "    TablesInSelectQueryElement (children 1)", "     TableExpression (children 1)",
                    "      TableIdentifier t", " Identifier JSON")
OUTFILE = ast("SelectWithUnionQuery (children 2)", " ExpressionList (children 1)", "  SelectQuery (children 1)",
              "   ExpressionList (children 1)", "    Literal UInt64_1", " Literal '/tmp/x'")


def table_function(name: str) -> str:
    return ast("SelectWithUnionQuery (children 1)", " ExpressionList (children 1)", "  SelectQuery (children 2)",
               "   ExpressionList (children 1)", "    Asterisk", "   TablesInSelectQuery (children 1)",
               "    TablesInSelectQueryElement (children 1)", "     TableExpression (children 1)",
               f"      Function {name} (children 1)", "       ExpressionList (children 1)", "        Literal 'a'")


def scalar(name: str) -> str:
    return ast("SelectWithUnionQuery (children 1)", " ExpressionList (children 1)", "  SelectQuery (children 1)",
               "   ExpressionList (children 1)", f"    Function {name} (children 1)",
               "     ExpressionList (children 2)", "      Literal '{}'", "      Literal 'x'")


SUBQUERY_SETTINGS = ast("SelectWithUnionQuery (children 1)", " ExpressionList (children 1)",
                        "  SelectQuery (children 2)", "   ExpressionList (children 1)", "    Asterisk",
                        "   TablesInSelectQuery (children 1)", "    TablesInSelectQueryElement (children 1)",
                        "     TableExpression (children 1)", "      Subquery (children 1)",
                        "       SelectWithUnionQuery (children 1)", "        ExpressionList (children 1)",
                        "         SelectQuery (children 2)", "          ExpressionList (children 1)",
                        "           Literal UInt64_1", "          Set")
TOP_SETTINGS = ast("SelectWithUnionQuery (children 1)", " ExpressionList (children 1)", "  SelectQuery (children 2)",
                   "   ExpressionList (children 1)", "    Literal UInt64_1", "   Set")


def test_words_skip_comments_strings_and_quoted_names():
    sql = "SELECT 'a;b' AS \"c;d\", `e;f` -- g;h\n/* i;j */ FROM t # k;l\n WHERE $$m;n$$ = 'o''p'"
    assert words(sql) == ["SELECT", "AS", ",", "FROM", "T", "WHERE", "="]


@pytest.mark.parametrize("sql", ["SELECT 1", "SELECT 1;", "SELECT 1; -- done", " (SELECT 1) ", "WITH 1 AS x SELECT x",
                                 "SHOW TABLES", "DESCRIBE generations", "EXISTS generations",
                                 "EXPLAIN SELECT 1", "EXPLAIN PLAN actions = 1 SELECT 1",
                                 "SELECT 'INTO OUTFILE' AS s", "SELECT ';' AS s", "SELECT $t$a;b$t$",
                                 "SELECT 1 # ; SELECT 2"])
def test_reads_pass_the_text_check(sql):
    assert check_text(sql) is None  # it raises on a refusal


@pytest.mark.parametrize("sql,code", [
    ("", 62), ("-- nothing", 62), ("SELEC 1", 62),
    ("SELECT 1; SELECT 2", 62), ("SELECT 1;; DROP TABLE t", 62), ("SELECT 1 -- ;\n; DROP TABLE t", 62),
    ("INSERT INTO t VALUES (1)", 164), ("/* x */ insert into t values (1)", 164), ("SET readonly = 0", 164),
    ("SYSTEM FLUSH LOGS", 164), ("KILL QUERY WHERE 1", 164), ("OPTIMIZE TABLE t", 164), ("USE system", 164),
    ("EXPLAIN AST INSERT INTO t VALUES (1)", 164), ("EXPLAIN PLAN header = 1 DROP TABLE t", 164),
    ("SELECT 1 INTO OUTFILE 'x'", 497), ("SELECT 1 into\noutfile 'x' FORMAT CSV", 497),
])
def test_the_text_check_refuses_with_clickhouse_codes(sql, code):
    with pytest.raises(ChError) as err:
        check_text(sql)
    assert err.value.code == code


VIEWS = frozenset({"phasemeter.bands_view", "phasemeter.read_path_view"})


def test_the_stores_parameterized_views_pass_and_nothing_else_by_their_names():
    assert check_ast(table_function("bands_view"), TABLE_FUNCTIONS, VIEWS, "phasemeter") is None
    assert check_ast(table_function("phasemeter.read_path_view"), TABLE_FUNCTIONS, VIEWS, "phasemeter") is None
    for name, database in (("bands_view", "other"), ("other.bands_view", "phasemeter"), ("nope", "phasemeter")):
        with pytest.raises(ChError) as err:
            check_ast(table_function(name), TABLE_FUNCTIONS, VIEWS, database)
        assert err.value.code == 497, name
    # a table function keeps its refusal even where a view of its name exists
    with pytest.raises(ChError) as err:
        check_ast(table_function("file"), TABLE_FUNCTIONS, VIEWS | {"phasemeter.file"}, "phasemeter")
    assert err.value.code == 497


def test_the_parse_check_returns_the_querys_format():
    assert check_ast(SELECT_FORMAT, TABLE_FUNCTIONS) == "JSON"
    assert check_ast(TOP_SETTINGS, TABLE_FUNCTIONS) is None  # the engine's readonly=1 judges these
    assert check_ast(table_function("numbers"), TABLE_FUNCTIONS) is None
    assert check_ast(scalar("format"), TABLE_FUNCTIONS) is None  # the string function, not the table one
    assert check_ast(ast("ShowTables"), TABLE_FUNCTIONS) is None
    assert check_ast(ast("Explain EXPLAIN (children 1)", " SelectWithUnionQuery (children 1)"), TABLE_FUNCTIONS) \
        is None


@pytest.mark.parametrize("text,code", [
    (OUTFILE, 497), (table_function("file"), 497), (table_function("FILE"), 497), (table_function("Python"), 497),
    (table_function("s3"), 497), (table_function("somethingNew"), 497), (scalar("file"), 497),
    (scalar("dictGet"), 497), (scalar("dictHas"), 497), (scalar("catboostEvaluate"), 497),
    (SUBQUERY_SETTINGS, 164), (ast("InsertQuery   (children 2)"), 164), (ast("SYSTEM query"), 164),
    (ast("Explain EXPLAIN AST (children 1)", " InsertQuery   (children 2)"), 164), (ast("Set"), 164), ("", 62),
])
def test_the_parse_check_refuses(text, code):
    with pytest.raises(ChError) as err:
        check_ast(text, TABLE_FUNCTIONS)
    assert err.value.code == code


def test_engine_errors_in_clickhouse_form():
    err = from_engine("Code: 164. DB::Exception: Code: 164. DB::Exception: Cannot modify 'readonly' setting in "
                      "readonly mode. (READONLY) (version 26.9.2.1). (READONLY)")
    assert (err.code, err.name, err.status) == (164, "READONLY", 403)
    assert err.body("26.9.2.1") == ("Code: 164. DB::Exception: Cannot modify 'readonly' setting in readonly mode. "
                                    "(READONLY) (version 26.9.2.1)\n")
    assert from_engine("Code: 60. DB::Exception: Unknown table expression identifier 'x'. (UNKNOWN_TABLE)").status \
        == 404
    assert from_engine("something else").code == 1002
    assert ChError("AUTHENTICATION_FAILED", "no").status == 401


def test_an_error_after_the_answer_began_ends_it_as_a_server_does():
    from clickhouse_connect.driver.transform import extract_exception_with_tag

    from phasemeter.store.sql_guard import exception_block, split_exception

    body = "Code: 395. DB::Exception: Value passed to 'throwIf' is non-zero. (FUNCTION_THROW_IF_VALUE_IS_NON_ZERO)\n"
    stream = b"1\n2\n" + exception_block(body, "0123abcd")
    assert stream.endswith(b" 0123abcd\r\n__exception__\r\n")
    assert extract_exception_with_tag(stream, "0123abcd") == body.rstrip("\n")  # what clickhouse-connect reads
    assert split_exception(stream, "0123abcd") == (b"1\n2\n", body.rstrip("\n"))
    assert split_exception(b"1\n2\n", "0123abcd") == (b"1\n2\n", None)
    assert split_exception(stream, "other") == (stream, None)
