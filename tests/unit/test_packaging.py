"""The wheel ships schema/ and sql/, and the gateway install stays light."""

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    # Built from a copy without build/: setuptools reuses build/lib and keeps
    # files deleted or renamed since (a renamed migration then ships twice).
    import shutil

    src = tmp_path_factory.mktemp("src") / "phasemeter"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns("build", ".venv", ".git", "*.egg-info", ".phasemeter",
                                                             "demo-out", "__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(out)], check=True, capture_output=True)
    return next(out.glob("phasemeter-*.whl"))


def test_wheel_contains_schema_sql_and_broker_files(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped_schema = {p.name for p in (ROOT / "schema").glob("*.sql")} | {"event-v1.schema.json"}
    shipped_sql = {p.name for p in (ROOT / "sql").glob("*.sql")}
    assert {f"phasemeter/schema/{n}" for n in shipped_schema} <= names
    assert {f"phasemeter/sql/{n}" for n in shipped_sql} <= names
    assert {"phasemeter/kafka/pom.xml", "phasemeter/kafka/server.properties",
            "phasemeter/producers/emitter.py", "phasemeter/stream_jobs/app.py"} <= names
    # the live page's files, served by the worker from the installed package
    assert {f"phasemeter/render/live/{p.name}" for p in (ROOT / "phasemeter/render/live").iterdir()} <= names
    # No generic top-level import names: everything lives under phasemeter/.
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == {"phasemeter"}


def test_installed_wheel_finds_migrations_and_queries_at_runtime(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
                    str(wheel)], check=True, capture_output=True)
    # -S: no site-packages, so the editable checkout cannot be picked up by mistake.
    code = ("import phasemeter, phasemeter.store.migrate as m, phasemeter.store.client as s; "
            "print(phasemeter.__file__); print([x.version for x in m.discover()]); "
            "print('FROM bands_exact_buckets_view(' in s.load_sql('bands_exact')); "
            "import phasemeter.render.assets as a; print(b'PMBands' in a.asset('bands.js'))")
    out = subprocess.run([sys.executable, "-S", "-c", code], env={"PYTHONPATH": str(target)},
                         cwd=tmp_path, capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0].startswith(str(target))
    versions = [int(v) for v in out[1].strip("[]").split(",")]
    assert versions[:2] == [1, 2] and versions == sorted(versions)
    assert out[2] == "True" and out[3] == "True"


def test_gateway_install_is_light():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert [d.split(">")[0].split("=")[0] for d in meta["dependencies"]] == ["kafka-python"]
    heavy = ("faust", "pandas", "chdb", "clickhouse_connect", "numpy", "matplotlib")
    code = ("import sys, phasemeter.producers; "
            f"print([m for m in {heavy!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
