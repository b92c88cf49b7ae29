"""docker-compose.yml and the Dockerfile cannot run here (no Docker engine),
so check what can be checked: structure, paths and setting names."""

import dataclasses
import re
from pathlib import Path

import yaml

from phasemeter.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
KNOWN_ENV = {f.metadata["env"] for f in dataclasses.fields(Settings)}


def test_compose_services_and_settings_names():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"kafka", "clickhouse", "migrate", "worker", "grafana"}
    # The images are the versions the tests run: the broker the project starts
    # from Maven jars, and the ClickHouse engine chDB embeds (major.minor).
    from phasemeter.kafka_local import KAFKA_VERSION

    assert services["kafka"]["image"] == f"apache/kafka:{KAFKA_VERSION}"
    import chdb

    engine = ".".join(chdb.engine_version.split(".")[:2])
    assert services["clickhouse"]["image"] == f"clickhouse/clickhouse-server:{engine}"
    for name in ("migrate", "worker"):
        assert set(services[name]["environment"]) <= KNOWN_ENV, name
    # Published ports stay on the host's loopback.
    ports = [port for svc in services.values() for port in svc.get("ports", [])]
    assert ports, "the broker's, the store's, the worker's and Grafana's ports"
    for port in ports:
        assert port.startswith("127.0.0.1:"), port
    volumes = [vol for svc in services.values() for vol in svc.get("volumes", [])]
    assert volumes, "the store's data and Grafana's provisioning"
    for vol in volumes:
        src = vol.split(":")[0]
        if src.startswith("./"):
            assert (ROOT / src).exists(), src


def test_dockerfile_copies_existing_paths():
    copied = [src for line in (ROOT / "Dockerfile").read_text().splitlines()
              if (m := re.match(r"COPY (.+) \S+$", line)) for src in m.group(1).split()]
    assert copied, "the Dockerfile copies the package in"
    for src in copied:
        assert (ROOT / src).exists(), src


def test_grafana_provisions_the_worker_interface_beside_the_server():
    """Two data sources of the ClickHouse plugin: the server of docker compose
    and the worker's SQL interface at its default address and database."""
    from phasemeter.settings import Settings

    folder = ROOT / "dashboards" / "grafana" / "provisioning" / "datasources"
    found = {}
    for path in sorted(folder.glob("*.yaml")):
        for ds in yaml.safe_load(path.read_text())["datasources"]:
            found[ds["uid"]] = ds
    assert set(found) == {"phasemeter-clickhouse", "phasemeter-embedded"}
    assert {ds["type"] for ds in found.values()} == {"grafana-clickhouse-datasource"}
    worker, default = found["phasemeter-embedded"]["jsonData"], Settings()
    assert f"http://{worker['host']}:{worker['port']}" == default.sql_url
    assert (worker["protocol"], worker["defaultDatabase"]) == ("http", default.database)
