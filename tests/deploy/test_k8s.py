"""deploy/k8s: the Helm values and manifests name what the code really has, and mirror
deploy/dagster.yaml; the recall server's command is one the CLI accepts and needs its tokens; its
replicas stage pushes where the code location's sensor and runs read them; no secret is written."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from librarian_dagster.cli.main import build_parser
from librarian_dagster.cli.run import cmd_mcp
from librarian_dagster.core.capture.agents import AGENTS
from librarian_dagster.core.settings import SETTINGS, VARIABLES, Settings

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"


def _load(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((K8S / name).read_text(encoding="utf-8")) if d]


def _values() -> dict:
    (values,) = _load("dagster-values.yaml")
    return values


def _kind(documents: list[dict], kind: str) -> dict:
    (found,) = [d for d in documents if d["kind"] == kind]
    return found


def _recall_container() -> dict:
    deployment = _kind(_load("recall-server.yaml"), "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


def _code_location() -> dict:
    (location,) = _values()["dagster-user-deployments"]["deployments"]
    return location


def _settings_names() -> set[str]:
    """Every LIBRARIAN_* and TELEGRAM_* environment variable Settings.from_env reads, and each
    agent's folder (core/capture/agents.py)."""
    folders = {n for a in AGENTS.values() for n in (a.folder.variable, *a.folder.aliases)}
    return {name for name in VARIABLES if name.startswith(("LIBRARIAN_", "TELEGRAM_"))} | folders


def test_every_yaml_file_parses_and_every_manifest_has_a_kind():
    files = sorted(K8S.glob("*.yaml"))
    assert {f.name for f in files} >= {
        "dagster-values.yaml",
        "recall-server.yaml",
        "librarian-data.yaml",
    }
    for path in files:
        documents = _load(path.name)
        assert documents, path.name
        if path.name != "dagster-values.yaml":
            for doc in documents:
                assert doc["apiVersion"] and doc["kind"] and doc["metadata"]["name"], path.name


def test_the_code_location_is_the_one_workspace_yaml_loads():
    location = _code_location()
    workspace = yaml.safe_load((REPO / "workspace.yaml").read_text(encoding="utf-8"))
    (entry,) = workspace["load_from"]
    assert location["name"] == entry["python_module"]["location_name"]
    assert location["dagsterApiGrpcArgs"] == ["-m", entry["python_module"]["module_name"]]
    assert location["includeConfigInLaunchedRuns"] == {"enabled": True}


def test_one_image_serves_the_code_location_and_the_recall_server():
    image = _code_location()["image"]
    assert image["repository"] and image["tag"] and image["tag"] != "latest"
    assert _recall_container()["image"] == f"{image['repository']}:{image['tag']}"


def test_runs_are_kubernetes_jobs_with_the_settings_secret():
    launcher = _values()["runLauncher"]
    assert launcher["type"] == "K8sRunLauncher"
    assert {"name": "librarian-env"} in launcher["config"]["k8sRunLauncher"]["envSecrets"]
    assert {"name": "librarian-env"} in _code_location()["envSecrets"]


def test_dagster_storage_is_the_external_postgresql_with_its_password_from_a_secret():
    values = _values()
    postgresql = values["postgresql"]
    assert postgresql["enabled"] is False
    assert postgresql["postgresqlHost"]
    assert "postgresqlPassword" not in postgresql
    assert values["generatePostgresqlPasswordSecret"] is False
    assert values["global"]["postgresqlSecretName"]
    server = yaml.safe_load((REPO / "deploy" / "dagster.yaml").read_text(encoding="utf-8"))
    assert postgresql["postgresqlScheme"] == server["storage"]["postgres"]["postgres_db"]["scheme"]


def test_queue_pool_and_retries_match_the_single_server():
    values = _values()
    server = yaml.safe_load((REPO / "deploy" / "dagster.yaml").read_text(encoding="utf-8"))
    daemon = values["dagsterDaemon"]
    assert daemon["runCoordinator"]["enabled"] is True
    assert daemon["runCoordinator"]["type"] == "QueuedRunCoordinator"
    # The chart fails when a limit is set both here and under `concurrency`.
    assert not daemon["runCoordinator"]["config"]["queuedRunCoordinator"]
    concurrency = values["concurrency"]
    assert concurrency["enabled"] is True
    assert concurrency["pools"]["defaultLimit"] >= 1
    assert concurrency["pools"]["granularity"] == server["concurrency"]["pools"]["granularity"]
    backfill = concurrency["runs"]["tagConcurrencyLimits"]
    assert [t["key"] for t in backfill] == ["dagster/backfill"]
    assert backfill[0]["limit"] < concurrency["runs"]["maxConcurrentRuns"]
    retries = daemon["runRetries"]
    assert retries["enabled"] is True
    assert retries["maxRetries"] == server["run_retries"]["max_retries"]
    assert (
        retries["retryOnAssetOrOpFailure"]
        == server["run_retries"]["retry_on_asset_or_op_failure"]
        is False
    )
    assert daemon["runMonitoring"]["enabled"] is True


def test_every_librarian_variable_named_is_a_real_setting():
    names = _settings_names()
    assert {"LIBRARIAN_DATABASE_URL", "LIBRARIAN_MCP_TOKENS", "TELEGRAM_BOT_TOKEN"} <= names
    used = {e["name"] for e in _code_location()["env"]} | {
        e["name"] for e in _recall_container()["env"]
    }
    assert used - names == set()


def _uploads_of(env: list[dict], mounts: list[dict], volumes: list[dict]) -> tuple[str, str, Path]:
    """Where a pod's Librarian stages or finds pushed sessions (Settings.uploads, from its
    LIBRARIAN_HOME), as (the claim, the mount path it is under, the path itself)."""
    values = {e["name"]: e["value"] for e in env if "value" in e}
    uploads = Settings.from_env({"LIBRARIAN_HOME": values["LIBRARIAN_HOME"]}).uploads
    under = [m for m in mounts if uploads.is_relative_to(m["mountPath"])]
    mount = max(under, key=lambda m: len(m["mountPath"]))  # the innermost mount holds it
    assert "subPath" not in mount
    (volume,) = [v for v in volumes if v["name"] == mount["name"]]
    return volume["persistentVolumeClaim"]["claimName"], mount["mountPath"], uploads


def test_every_pod_that_reads_uploads_mounts_the_same_claim_at_the_same_path():
    """The recall replicas stage each pushed session in uploads/; the code location's sensor
    finds it there and its run pods (the same volumes: includeConfigInLaunchedRuns) read it.
    One claim, at one path, in all of them: else a push is staged where no sensor looks."""
    location = _code_location()
    deployment = _kind(_load("recall-server.yaml"), "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    seen = {
        "code location and runs": _uploads_of(
            location["env"], location["volumeMounts"], location["volumes"]
        ),
        "recall server": _uploads_of(
            _recall_container()["env"], _recall_container()["volumeMounts"], pod["volumes"]
        ),
    }
    assert len(set(seen.values())) == 1, seen
    assert location["includeConfigInLaunchedRuns"] == {"enabled": True}
    claim = _kind(_load("librarian-data.yaml"), "PersistentVolumeClaim")
    assert seen["recall server"][0] == claim["metadata"]["name"]
    # Mounted by the code server's pod, every run's pod and every replica, on any node.
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    # The image's user (uid 10001) writes it in every pod.
    assert pod["securityContext"]["fsGroup"] == location["podSecurityContext"]["fsGroup"] == 10001


def test_the_mirror_is_an_empty_folder_of_the_image_never_the_shared_volume():
    """No agent runs in a pod: every session comes pushed. A mirror on the shared volume would
    have Claude Code's reader find the staged uploads a second time."""
    location = _code_location()
    env = {e["name"]: e["value"] for e in location["env"]}
    mirror = Path(env["LIBRARIAN_MIRROR"])
    assert not any(mirror.is_relative_to(m["mountPath"]) for m in location["volumeMounts"])
    # It must exist: the capture-gap check alerts when the mirror folder is missing.
    dockerfile = (K8S / "Dockerfile").read_text(encoding="utf-8")
    assert re.search(rf"mkdir (-m \d+ )?{re.escape(str(mirror))}\b", dockerfile)
    # Its quiet hours read this folder alone, never the pushes: off, or it alerts every day.
    assert float(env["LIBRARIAN_QUIET_HOURS"]) == 0


def test_the_recall_server_runs_several_replicas_each_client_kept_on_one():
    documents = _load("recall-server.yaml")
    deployment = _kind(documents, "Deployment")
    replicas = deployment["spec"]["replicas"]
    assert replicas >= 2
    # An MCP session, an SSE stream and the page's forget form live in one replica's memory.
    assert _kind(documents, "Service")["spec"]["sessionAffinity"] == "ClientIP"
    budget = _kind(documents, "PodDisruptionBudget")
    assert 1 <= budget["spec"]["minAvailable"] < replicas
    assert budget["spec"]["selector"] == deployment["spec"]["selector"]


_SECRET_NAME = re.compile(r"(TOKEN|PASSWORD|SECRET|_KEY)$", re.I)
_SECRET_SETTINGS = {v for v, name in VARIABLES.items() if SETTINGS[name].repr is False}
"""The settings declared secret (never in a repr): LIBRARIAN_DATABASE_URL, the tokens, keys."""
_SECRET_TEXT = re.compile(
    r"lbr_[A-Za-z0-9_-]{8,}|Bearer\s+\S|postgres(?:ql)?(?:\+\w+)?://[^/\s:@]+:[^@\s]+@"
)


def _named_values(node):
    """Every {"name": ..., "value": ...} pair (an env entry) anywhere in a YAML document."""
    if isinstance(node, dict):
        if isinstance(node.get("name"), str) and "value" in node:
            yield node["name"], node["value"]
        for child in node.values():
            yield from _named_values(child)
    elif isinstance(node, list):
        for child in node:
            yield from _named_values(child)


@pytest.mark.parametrize(
    "path",
    sorted(p for p in (REPO / "deploy").rglob("*") if p.is_file() and p.name != "README.md"),
    ids=lambda p: str(p.relative_to(REPO / "deploy")),
)
def test_no_token_or_password_is_written_in_any_manifest_or_unit(path):
    """Secrets come from Secrets, and on a machine from the env file (mode 600): never from a
    file of the repository, which every pod's reader and every local user may read."""
    assert {
        "LIBRARIAN_DATABASE_URL",
        "LIBRARIAN_MCP_TOKEN",
        "TELEGRAM_BOT_TOKEN",
    } <= _SECRET_SETTINGS
    text = path.read_text(encoding="utf-8")
    assert not _SECRET_TEXT.search(text), path
    if path.suffix == ".yaml":
        for document in yaml.safe_load_all(text):
            for name, value in _named_values(document):
                secret = _SECRET_NAME.search(name) or name in _SECRET_SETTINGS
                assert not secret, f"{path.name}: {name}={value!r}"


def test_the_recall_server_command_is_one_the_cli_accepts():
    command = _recall_container()["command"]
    assert command[0] == "librarian"
    args = build_parser().parse_args(command[1:])
    assert args.handler is cmd_mcp
    assert (args.transport, args.host) == ("http", "0.0.0.0")
    (port,) = _recall_container()["ports"]
    assert args.port == port["containerPort"]


def test_the_recall_server_gets_its_database_and_tokens_from_secrets():
    container = _recall_container()
    deployment = _kind(_load("recall-server.yaml"), "Deployment")
    env = {e["name"]: e for e in container["env"]}
    # The same settings secret as the code location's: the same memory, embedded the same way.
    assert container["envFrom"] == [{"secretRef": {"name": "librarian-env"}}]
    assert {"name": "librarian-env"} in _code_location()["envSecrets"]
    assert "LIBRARIAN_DATABASE_URL" not in env  # from the secret only, never written here
    guide = (REPO / "deploy" / "README.md").read_text(encoding="utf-8")
    (create,) = re.findall(
        r"kubectl create secret generic librarian-env[^\n]*(?:\n +[^\n]+)*", guide
    )
    assert "--from-literal=LIBRARIAN_DATABASE_URL=" in create
    tokens_file = Path(env["LIBRARIAN_MCP_TOKENS"]["value"])
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    (holding,) = [m for m in mounts.values() if tokens_file.parent == Path(m["mountPath"])]
    assert holding["readOnly"] is True
    assert volumes[holding["name"]]["secret"]["secretName"] == "librarian-mcp-tokens"
    assert "subPath" not in holding  # a subPath mount never sees the Secret change


def test_the_recall_server_is_probed_and_served_on_its_port():
    documents = _load("recall-server.yaml")
    container = _recall_container()
    (port,) = container["ports"]
    assert container["readinessProbe"]["tcpSocket"]["port"] == port["name"]
    service = _kind(documents, "Service")
    (service_port,) = service["spec"]["ports"]
    assert service_port["targetPort"] == port["name"]
    deployment = _kind(documents, "Deployment")
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]


@pytest.mark.process
def test_without_the_tokens_secret_the_recall_server_refuses_to_start(tmp_path):
    """Why the manifest mounts a token file: the same command without one exits at once."""
    command = _recall_container()["command"]
    env = {
        **os.environ,
        "LIBRARIAN_HOME": str(tmp_path / "home"),
        "LIBRARIAN_MCP_TOKENS": str(tmp_path / "no-tokens.json"),
    }
    env.pop("LIBRARIAN_MCP_TOKEN", None)
    result = subprocess.run(
        [sys.executable, "-m", "librarian_dagster.cli.main", *command[1:]],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "refusing to serve 0.0.0.0 without tokens" in result.stderr


def test_the_image_adds_dagster_k8s_at_the_trio_version():
    dockerfile = (K8S / "Dockerfile").read_text(encoding="utf-8")
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    (postgres,) = re.findall(r'"dagster-postgres==([\d.]+)"', pyproject)
    assert f"dagster-k8s=={postgres}" in dockerfile
    assert "uv sync --frozen --no-dev" in dockerfile
