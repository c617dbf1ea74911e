"""The sidecar image (Containerfile, scripts/build-image), built and run with podman.

The image is built once per run by ``scripts/build-image`` (on the Debian base it makes from
Debian's packages where python:3.11-slim can't be pulled, reused when the machine has it).
scripts/test builds it in the background from its start, so that by the time the parallel run
reaches these tests it is there (``PRIORITYLOCK_IMAGE_BUILD``); a plain pytest run builds it at
the first test that needs it, under a file lock that pytest-xdist's workers share.

Containers run as CI here can run them: runc (crun fails on hybrid cgroups), lowered limits,
and the host's network, so that the service, bound to 127.0.0.1 as in a pod, reaches the
emulators and the tests reach it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest
from filelock import FileLock

from prioritylock import LockBuilder, __version__
from prioritylock.server._proto import lock_pb2, lock_pb2_grpc
from tests._servers.s3 import S3Server
from tools import sdk
from tools.emulators import free_port, http_get

ROOT = Path(__file__).resolve().parent.parent
IMAGE = f"prioritylock:{__version__}"
#: The build's budget: the base made with mmdebstrap (once per machine) and the image.
BUILD_TIMEOUT = 600
#: How long the service in a container may take to answer its health check.
START_S = 60.0
#: The grace period `podman stop` gives before SIGKILL; the service must end well within it.
STOP_GRACE = 20
#: The goal for what the image adds to its base (issue 33).
MAX_OVER_BASE_MB = 150

pytestmark = [
    pytest.mark.timeout(BUILD_TIMEOUT + 120),
    pytest.mark.skipif(
        shutil.which("podman") is None and os.geteuid() != 0,
        reason="needs podman (scripts/build-image installs it only as root)",
    ),
]


def _podman_flags() -> list[str]:
    flags = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]
    if shutil.which("runc"):
        flags = ["--runtime", "runc", *flags]
    return flags


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The last line of ``scripts/build-image``'s output (the sizes), after building the image
    once for the whole run (every xdist worker shares the first one's build)."""
    background = os.environ.get("PRIORITYLOCK_IMAGE_BUILD")
    if background:
        return _background_build(Path(background))
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    marker = shared / "image-build.json"
    with FileLock(str(shared / "image-build.lock")):
        if not marker.exists():  # a failed build is not tried again by every test
            env = {**os.environ, "CONTAINER_ENGINE": "podman"}
            done = subprocess.run(
                [str(ROOT / "scripts" / "build-image")],
                env=env,
                capture_output=True,
                text=True,
                timeout=BUILD_TIMEOUT,
                check=False,
            )
            lines = done.stdout.strip().splitlines() or [""]
            ok = done.returncode == 0
            marker.write_text(json.dumps([ok, lines[-1] if ok else done.stdout + done.stderr]))
    ok, text = json.loads(marker.read_text())
    assert ok, f"scripts/build-image failed: {text}"
    return str(text)


def _background_build(log: Path) -> str:
    """The result of scripts/test's background build, writing ``log`` and, when it ends, its
    exit status in ``log.status``."""
    status = log.with_name(log.name + ".status")
    deadline = time.monotonic() + BUILD_TIMEOUT
    while not status.exists() or not status.read_text().strip():
        assert time.monotonic() < deadline, f"scripts/build-image: not done in {BUILD_TIMEOUT} s"
        time.sleep(0.5)  # another process's build: no event to wait on
    text = log.read_text(errors="replace")
    assert status.read_text().strip() == "0", f"scripts/build-image failed: {text}"
    return [line for line in text.splitlines() if "over its base" in line][-1]


class Container:
    """One ``podman run -d`` of the image; removed at the end of the ``with`` block."""

    def __init__(
        self,
        args: Sequence[str],
        *,
        env: dict[str, str],
        network: str = "host",
        volumes: Sequence[str] = (),
    ) -> None:
        self.name = f"plk-test-{uuid.uuid4().hex[:12]}"
        # The HEALTHCHECK is run by the test (`podman healthcheck run`), not by systemd timers.
        # --read-only: as Kubernetes runs it (deploy/kubernetes: readOnlyRootFilesystem).
        command = ["run", "-d", "--name", self.name, "--network", network, "--read-only"]
        command += _podman_flags()
        command += ["--health-interval", "disable"]
        for name, value in env.items():
            command += ["-e", f"{name}={value}"]
        for volume in volumes:
            command += ["-v", volume]
        _podman(*command, IMAGE, *args)

    def logs(self) -> str:
        return _podman("logs", self.name, check=False)

    def inspect(self, template: str) -> str:
        return _podman("inspect", "--format", template, self.name).strip()

    def __enter__(self) -> Container:
        return self

    def __exit__(self, *exc: object) -> None:
        _podman("rm", "-f", "-t", "0", self.name, check=False)


def _podman(*args: str, check: bool = True, timeout: float = 60) -> str:
    done = subprocess.run(
        ["podman", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check:
        assert done.returncode == 0, f"podman {' '.join(args)}: {done.stdout}{done.stderr}"
    return done.stdout + (done.stderr if not check else "")


def _wait(ready: Any, container: Container, what: str) -> None:
    deadline = time.monotonic() + START_S
    while not ready():
        if container.inspect("{{.State.Running}}") != "true" or time.monotonic() > deadline:
            pytest.fail(f"{what} not in {START_S:g} s: {container.logs()}")
        time.sleep(0.2)  # a process in a container: no event to wait on


def _post(url: str, body: dict[str, Any]) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def test_the_image_adds_at_most_150_mb_to_its_base(built: str, record_property: Any) -> None:
    record_property("figure", f"image (scripts/build-image): {built}")
    found = re.search(r"(\d+) MB over its base", built)
    assert found, built
    assert int(found[1]) <= MAX_OVER_BASE_MB, built
    labels = json.loads(_podman("image", "inspect", "--format", "{{json .Labels}}", IMAGE))
    assert labels["org.opencontainers.image.version"] == __version__
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.source"].startswith("https://")


def test_default_command_serves_the_mounted_components_as_a_non_root_user(
    built: str, tmp_path: Path
) -> None:
    """`podman run IMAGE` with the app id in the environment and the component files mounted,
    on a network of its own (loopback only: the default ports are free there): its HEALTHCHECK
    answers, and the service (PID 1) is not root."""
    components = tmp_path / "components"
    components.mkdir()
    (components / "lockstore.yaml").write_text(
        "apiVersion: dapr.io/v1alpha1\nkind: Component\nmetadata:\n  name: lockstore\n"
        "spec:\n  type: lock.prioritylock\n  version: v1\n  metadata:\n"
        "  - name: url\n    value: memory://image-test\n"
    )
    with Container(
        [],
        env={"PRIORITYLOCK_APP_ID": "orders"},
        network="none",
        volumes=[f"{components}:/components:ro"],
    ) as container:
        healthy = lambda: _podman("healthcheck", "run", container.name, check=False) == ""  # noqa: E731
        _wait(healthy, container, "the HEALTHCHECK")
        uid = _podman("exec", container.name, "sh", "-c", "grep ^Uid: /proc/1/status")
        assert uid.split()[1:] == ["10001"] * 4, uid
        assert "app orders" in container.logs()
        assert "lockstore=memory://image-test" in container.logs()


@pytest.fixture(params=["memory", "s3-moto"])
def store(request: pytest.FixtureRequest) -> Iterator[tuple[str, dict[str, str]]]:
    """(URL, environment) of a fresh namespace on the memory store or on moto."""
    if request.param == "memory":
        yield f"memory://image-{uuid.uuid4().hex[:8]}", {}
        return
    server: S3Server = request.getfixturevalue("moto_server")
    bucket = server.create_bucket()
    url = sdk.store_url("s3-moto", server.endpoint_url, bucket, "locks")
    env = {"AWS_ACCESS_KEY_ID": server.access_key_id}
    yield url, {**env, "AWS_SECRET_ACCESS_KEY": server.secret_access_key}
    server.remove_bucket(bucket)


@contextlib.contextmanager
def serving(store: tuple[str, dict[str, str]]) -> Iterator[tuple[Container, int, int]]:
    """The image serving ``store`` as ``locks`` for app ``app1`` on the host's network, ready:
    (container, HTTP port, gRPC port)."""
    url, env = store
    http_port, grpc_port = free_port(), free_port()
    args = ["serve", "--app-id", "app1", "--store", f"locks={url}"]
    args += ["--http-port", str(http_port), "--grpc-port", str(grpc_port)]
    with Container(args, env=env) as container:
        health = f"http://127.0.0.1:{http_port}/v1.0/healthz"
        _wait(lambda: (http_get(health) or (0,))[0] == 204, container, "GET /v1.0/healthz")
        yield container, http_port, grpc_port


def test_alpha1_over_http_and_the_full_api_over_grpc(
    built: str, store: tuple[str, dict[str, str]]
) -> None:
    with serving(store) as (container, http_port, grpc_port):
        alpha1 = f"http://127.0.0.1:{http_port}/v1.0-alpha1"
        lock = {"resourceId": "order-1", "lockOwner": "worker-a", "expiryInSeconds": 30}
        assert _post(f"{alpha1}/lock/locks", lock) == (200, {"success": True})
        assert _post(f"{alpha1}/lock/locks", {**lock, "lockOwner": "worker-b"}) == (
            200,
            {"success": False},
        )
        unlock = {"resourceId": "order-1", "lockOwner": "worker-a"}
        assert _post(f"{alpha1}/unlock/locks", unlock) == (200, {"status": 0})
        assert _post(f"{alpha1}/unlock/locks", unlock) == (200, {"status": 1})

        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            api = lock_pb2_grpc.LockServiceStub(channel)  # type: ignore[no-untyped-call]
            request = lock_pb2.LockRequest(
                store_name="locks", resource_id="report", owner="batch", immediate=True
            )
            held = api.Acquire(request, timeout=20)
            assert held.lock_id and held.fence >= 1
            with pytest.raises(grpc.RpcError) as refused:
                api.Acquire(request, timeout=20)
            assert refused.value.code() == grpc.StatusCode.ABORTED
            info = api.Info(lock_pb2.InfoRequest(store_name="locks", resource_id="report"))
            assert info.resource_id == "report"
            api.Unlock(
                lock_pb2.UnlockRequest(
                    store_name="locks", resource_id="report", lock_id=held.lock_id
                ),
                timeout=20,
            )
            again = api.Acquire(request, timeout=20)
            assert again.fence > held.fence
        assert "Traceback" not in container.logs()


def test_podman_stop_ends_it_with_status_0_releasing_its_stream_locks(
    built: str, moto_server: S3Server
) -> None:
    bucket = moto_server.create_bucket()
    try:
        url = sdk.store_url("s3-moto", moto_server.endpoint_url, bucket, "locks")
        env = {
            "AWS_ACCESS_KEY_ID": moto_server.access_key_id,
            "AWS_SECRET_ACCESS_KEY": moto_server.secret_access_key,
        }
        # The lease the service takes for resource "nightly" of app "app1", seen from outside.
        other = LockBuilder().store(moto_server.store(bucket, "locks")).path("app1/nightly")
        other_lock = other.lease_timeout(30).owner("other").build()
        with serving((url, env)) as (container, _, grpc_port):
            channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
            with contextlib.closing(channel):
                request = lock_pb2.LockRequest(
                    store_name="locks", resource_id="nightly", owner="batch"
                )
                stub = lock_pb2_grpc.LockServiceStub(channel)  # type: ignore[no-untyped-call]
                stream = stub.Lock(request, timeout=60)
                first = next(event for event in stream if not event.HasField("ping"))
                assert first.HasField("lock_acquired"), first
                assert not other_lock.try_lock()  # held in the bucket, under the app's prefix
                started = time.monotonic()
                _podman("stop", "-t", str(STOP_GRACE), container.name, timeout=STOP_GRACE + 30)
                took = time.monotonic() - started
                assert container.inspect("{{.State.ExitCode}}") == "0", container.logs()
                assert took < STOP_GRACE, (took, container.logs())
                lost = [event.lost.reason for event in _rest(stream) if event.HasField("lost")]
                assert lost == ["service-stopping"], lost
            assert other_lock.try_lock(), container.logs()  # released, not left to run out
            other_lock.unlock()
    finally:
        moto_server.remove_bucket(bucket)


def _rest(stream: Any) -> list[Any]:
    """What a stream sent after the service stopped (ending with its status, ignored)."""
    events = []
    with contextlib.suppress(grpc.RpcError):
        events.extend(stream)
    return events
