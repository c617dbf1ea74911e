"""deploy/kubernetes/: every manifest is valid against the Kubernetes schemas (offline, with
kubernetes-validate's bundled schemas), and the sidecar and the CronJob run the image that
scripts/build-image builds, wired as docs/serve.md's Deploy section says."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from prioritylock import __version__

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml"))
IMAGE = f"prioritylock:{__version__}"
#: The first version with native sidecars on by default, and the newest with bundled schemas.
VERSIONS = ["1.29.0", kubernetes_validate.latest_version()]


def _documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def _one(kind: str) -> dict[str, Any]:
    found = [doc for path in MANIFESTS for doc in _documents(path) if doc["kind"] == kind]
    assert len(found) == 1, (kind, found)
    return found[0]


def test_there_are_manifests() -> None:
    assert {path.name for path in MANIFESTS} >= {"sidecar.yaml", "cronjob.yaml"}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("path", MANIFESTS, ids=lambda path: path.name)
def test_every_manifest_is_valid(path: Path, version: str) -> None:
    for doc in _documents(path):
        kubernetes_validate.validate(doc, version, strict=True)


def test_the_validation_refuses_a_field_kubernetes_does_not_know() -> None:
    deployment = _one("Deployment")
    sidecar = dict(deployment["spec"]["template"]["spec"]["initContainers"][0])
    sidecar["restartPolicyy"] = "Always"
    broken = {**deployment, "spec": {**deployment["spec"], "template": {"spec": {}}}}
    broken["spec"]["template"]["spec"] = {"initContainers": [sidecar], "containers": []}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, VERSIONS[-1], strict=True)


def test_the_sidecar_is_a_native_sidecar_of_the_image_with_its_config_and_probes() -> None:
    pod = _one("Deployment")["spec"]["template"]["spec"]
    [sidecar] = pod["initContainers"]
    assert sidecar["image"] == IMAGE
    assert sidecar["restartPolicy"] == "Always"
    env = {item["name"]: item for item in sidecar["env"]}
    assert env["PRIORITYLOCK_APP_ID"]["value"]
    secret = _one("Secret")["metadata"]["name"]
    for name in ("DAPR_API_TOKEN", "PRIORITYLOCK_OPERATOR_TOKEN"):
        assert env[name]["valueFrom"]["secretKeyRef"]["name"] == secret
    # The components come from the ConfigMap, mounted where the command reads them.
    [mount] = sidecar["volumeMounts"]
    volume = {item["name"]: item for item in pod["volumes"]}[mount["name"]]
    assert volume["configMap"]["name"] == _one("ConfigMap")["metadata"]["name"]
    assert sidecar["args"] == ["serve", "--components", mount["mountPath"]]
    components = _one("ConfigMap")["data"]
    for text in components.values():
        assert yaml.safe_load(text)["spec"]["type"] == "lock.prioritylock"
    # The service binds the pod's loopback: probes run inside the container.
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert sidecar[probe]["exec"]["command"][0] == "prioritylock-healthz", probe
    assert sidecar["securityContext"]["readOnlyRootFilesystem"] is True
    [app] = pod["containers"]
    app_env = {item["name"]: item for item in app["env"]}
    assert app_env["DAPR_API_TOKEN"] == env["DAPR_API_TOKEN"]


def test_the_cronjob_runs_its_command_under_prioritylock_run_in_the_image() -> None:
    spec = _one("CronJob")["spec"]
    [container] = spec["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == IMAGE
    args = container["args"]
    assert args[0] == "run"
    assert "--" in args and args.index("--") < len(args) - 1
    grace = spec["jobTemplate"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    cleanup = next(arg for arg in args if arg.startswith("--cleanup="))
    assert grace > float(cleanup.split("=", 1)[1])


def test_the_cron_howto_shows_the_cronjob_of_deploy_kubernetes() -> None:
    howto = (ROOT / "docs" / "howto" / "cron.md").read_text(encoding="utf-8")
    assert "registry.example.com" not in howto
    assert "deploy/kubernetes/cronjob.yaml" in howto
    [block] = [
        text for text in re.findall(r"```yaml\n(.*?)```", howto, re.DOTALL) if "CronJob" in text
    ]
    assert yaml.safe_load(block) == _one("CronJob")
