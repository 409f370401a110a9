"""The image installs what README tells a user to install, and runs it the way README says.

The first half reads the Dockerfiles, and runs wherever `make test` does: the image must build
the project's wheel (with its C speedups: compilers in the build stage only) from the whole
build context, install that wheel with the pinned dependencies of `constraints.txt` into a
virtualenv in the build stage (stripped, without the admin clients the broker never imports)
and copy only that into the image, run the `rebalanced` script as an unprivileged user with data
in a volume, and health-check with a real ApiVersions request on the listeners it is given.

The second half runs the image: `make docker-test` (docker/test.sh) builds it, starts the
compose broker on a free host port and runs this file with `REBALANCED_DOCKER_COMPOSE` set to
its compose command line. Without it those tests skip (no Docker engine: make docker-test says
so); with it nothing skips.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
import tomllib
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from setuptools import find_packages

PROJECT = Path(__file__).resolve().parents[2]
DOCKERFILE = PROJECT / "docker" / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, with continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            found.append((keyword.upper(), " ".join(rest.split())))
    return found


def stages() -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for keyword, args in instructions():
        if keyword == "FROM":
            result.append([])
        result[-1].append((keyword, args))
    return result


def pyproject() -> dict:
    with open(PROJECT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


VENV = "/opt/rebalanced"


def pip_commands(stage: list[tuple[str, str]]) -> list[list[str]]:
    """The pip commands of a stage's RUNs, from the command word on; those run for another
    interpreter (`pip --python PYTHON ...`) only when it is the image's virtualenv."""
    commands = []
    for keyword, args in stage:
        if keyword == "RUN":
            for part in args.split("&&"):
                words = shlex.split(part)
                if words[:1] == ["pip"] or words[:3] == ["python", "-m", "pip"]:
                    words = words[words.index("pip") + 1:]
                    if words[:1] == ["--python"]:
                        assert words[1] == f"{VENV}/bin/python", words
                        words = words[2:]
                    commands.append(words)
    return commands


def env(stage: list[tuple[str, str]]) -> str:
    return " ".join(args for keyword, args in stage if keyword == "ENV")


def test_readme_installs_the_project_without_extras() -> None:
    readme = (PROJECT / "README.md").read_text()
    assert "pip install ." in readme
    assert "docker/Dockerfile" in readme


def test_image_builds_the_wheel_of_the_whole_project() -> None:
    build, _ = stages()
    assert ("COPY", ". .") in build
    wheel_commands = [c for c in pip_commands(build) if c[0] == "wheel"]
    assert len(wheel_commands) == 1
    assert wheel_commands[0][-1] == ".", "the wheel is built from the project root, no extras"
    assert "--no-deps" in wheel_commands[0]


def test_dockerignore_keeps_every_package() -> None:
    find = pyproject()["tool"]["setuptools"]["packages"]["find"]
    packages = find_packages(str(PROJECT), include=find["include"], exclude=find["exclude"])
    assert {"coordinator", "coordinator.dataplane", "protocol", "storage"} <= set(packages)
    ignored = [line.strip().rstrip("/") for line in
               (PROJECT / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")]
    needed = ["pyproject.toml", "README.md", "constraints.txt",
              *(p.replace(".", "/") for p in packages)]
    for path in needed:
        for pattern in ignored:
            parts = path.split("/")
            prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
            assert not any(fnmatch.fnmatch(p, pattern) for p in prefixes), (path, pattern)


def _targets(words: list[str]) -> list[str]:
    """The requirement arguments of a pip command (options and their values left out)."""
    targets, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word in ("-c", "--constraint", "-r", "--requirement"):
            skip = True
        elif not word.startswith("-"):
            targets.append(word)
    return targets


def test_image_installs_that_wheel_and_nothing_else() -> None:
    build, final = stages()
    installs = [c for c in pip_commands(build) if c[0] == "install"]
    assert len(installs) == 1
    targets = _targets(installs[0][1:])
    assert targets == ["/wheels/rebalanced-*.whl"], targets
    assert "-e" not in installs[0] and "[" not in " ".join(targets)
    assert "constraints.txt" in installs[0], "the dependencies are the pinned ones"
    assert f"python -m venv --without-pip {VENV}" in " ".join(a for k, a in build if k == "RUN")
    # The image gets the build stage's virtualenv and nothing else of it; it installs nothing.
    assert [a for k, a in final if k == "COPY"] == [f"--from=build {VENV} {VENV}"]
    assert pip_commands(final) == []
    assert f"PATH={VENV}/bin:$PATH" in env(final)


def _imports(path: Path, module: str) -> bool:
    return bool(re.search(rf"^\s*(from|import) {module}\b", path.read_text(), re.MULTILINE))


def test_the_image_leaves_out_only_the_admin_clients_the_broker_never_imports() -> None:
    build, _ = stages()
    (uninstall,) = [c for c in pip_commands(build) if c[0] == "uninstall"]
    removed = _targets(uninstall[1:])
    assert sorted(removed) == ["confluent-kafka", "kafka-python"]
    dependencies = {_name(r) for r in pyproject()["project"]["dependencies"]}
    assert set(removed) <= dependencies
    # Only the operators' commands (`rebalanced groups` in cli/admin.py, `rebalanced users` and
    # `acls` in cli/security.py, `rebalanced transactions`) and the Spark job (forensics) use
    # them, and the broker imports none of those; without them each command says so in one line.
    users = sorted(str(path.relative_to(PROJECT))
                   for package in ("protocol", "coordinator", "storage", "forensics")
                   for path in (PROJECT / package).rglob("*.py")
                   if _imports(path, "confluent_kafka") or _imports(path, "kafka"))
    commands = ("coordinator/cli/admin.py", "coordinator/cli/security.py",
                "coordinator/cli/transactions.py")
    assert users and all(u in commands or u.startswith("forensics/") for u in users), users
    for package in ("protocol", "coordinator", "storage"):
        for path in (PROJECT / package).rglob("*.py"):
            assert not _imports(path, "forensics"), path


MISSING_CLIENTS_LINE = (
    "rebalanced groups: error: confluent-kafka and kafka-python are not installed (the broker's "
    "Docker image leaves them out): run `rebalanced groups` where `pip install .` installed it, "
    "against the broker's published port")


def test_groups_without_the_admin_clients_is_one_line() -> None:
    """As in the image: the clients absent (here: blocked), something listening."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        block = "; ".join(f"sys.modules[{m!r}] = None" for m in
                          ("confluent_kafka", "confluent_kafka.admin", "kafka", "kafka.errors"))
        code = (f"import sys; {block}; from coordinator.cli.groups import main; "
                f"sys.exit(main(['list', '--bootstrap-server', '127.0.0.1:{port}']))")
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                timeout=60, cwd=PROJECT)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [MISSING_CLIENTS_LINE]


def test_the_build_stage_strips_the_compiled_modules() -> None:
    build, _ = stages()
    runs = " ".join(args for keyword, args in build if keyword == "RUN")
    assert f"find {VENV} -name '*.so*' -type f -exec strip --strip-unneeded {{}} +" in runs


def _name(requirement: str) -> str:
    name = re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0]
    return name.strip().lower().replace("_", "-")


def test_every_dependency_is_pinned_for_the_image() -> None:
    pins = {}
    for line in (PROJECT / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep and version, f"{line!r} is not an exact pin"
            pins[_name(name)] = version.strip()
    dependencies = pyproject()["project"]["dependencies"]
    # Also kio's own dependency, and the build backend.
    needed = {_name(r) for r in dependencies} | {"typing-extensions", "setuptools", "wheel"}
    assert needed <= set(pins), needed - set(pins)
    for requirement in dependencies:  # a pin agrees with pyproject.toml's own pins
        name, sep, version = requirement.split(";")[0].partition("==")
        if sep:
            assert pins[_name(name)] == version.strip(), requirement


def test_only_the_build_stage_has_a_compiler_and_the_image_checks_the_speedups() -> None:
    build, final = stages()
    build_runs = " ".join(args for keyword, args in build if keyword == "RUN")
    final_runs = " ".join(args for keyword, args in final if keyword == "RUN")
    assert "gcc" in build_runs and "zlib1g-dev" in build_runs
    assert "apt-get" not in final_runs and "gcc" not in final_runs
    assert ("import storage._legacy_speedups, storage._fsync_worker, protocol._tls_records, "
            "forensics._grouplog_speedups" in final_runs)
    assert "assert protocol.tls.RECORDS_IN_C" in final_runs


def test_image_runs_the_installed_scripts_unprivileged_with_a_data_volume() -> None:
    final = dict(stages()[-1])
    final["ENV"] = env(stages()[-1])
    scripts = pyproject()["project"]["scripts"]
    assert scripts["rebalanced"] == "coordinator.__main__:main"
    assert scripts["rebalanced-healthcheck"] == "coordinator.cli.healthcheck:main"
    assert final["ENTRYPOINT"] == '["rebalanced"]'
    assert final["USER"] not in ("root", "0")
    assert final["VOLUME"] == "/data"
    assert "REBALANCED_LOG_DIRS=/data" in final["ENV"]
    # No address: the check follows REBALANCED_LISTENERS, wherever the listeners were moved.
    assert final["HEALTHCHECK"].endswith('CMD ["rebalanced-healthcheck"]')
    assert "REBALANCED_LISTENERS=INTERNAL://0.0.0.0:29092,EXTERNAL://0.0.0.0:9092" in final["ENV"]
    assert ("REBALANCED_ADVERTISED_LISTENERS=INTERNAL://broker:29092,EXTERNAL://localhost:9092"
            in final["ENV"])


def test_the_scenario_image_is_unprivileged_and_installs_only_its_clients() -> None:
    text = re.sub(r"\\\n", " ", (PROJECT / "docker" / "Dockerfile.tests").read_text())
    assert re.search(r"^USER (?!root\b|0\b)\w+", text, re.MULTILINE)
    assert "ruff" not in text and "mypy" not in text and "pytest" not in text
    assert "--constraint" in text


# The image, run -------------------------------------------------------------------------------

COMPOSE = os.environ.get("REBALANCED_DOCKER_COMPOSE", "")
live = pytest.mark.skipif(not COMPOSE, reason="runs the image: make docker-test (needs Docker)")
IMAGE = "rebalanced:local"


def compose(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*shlex.split(COMPOSE), *args], capture_output=True, text=True,
                          timeout=timeout)


def docker(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"{result.args}: {result.stdout[-3000:]}{result.stderr[-3000:]}"
    return result.stdout


def container_name(suffix: str) -> str:
    """Named after the compose project, which docker/test.sh removes on the way out."""
    return f"{os.environ['COMPOSE_PROJECT_NAME']}-{suffix}"


def host_port() -> int:
    return int(os.environ["REBALANCED_HOST_PORT"])


def wait_healthy(name: str, timeout_s: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        state = json.loads(ok(docker("inspect", "-f", "{{json .State}}", name)))
        if state.get("Health", {}).get("Status") == "healthy":
            return state
        assert state["Running"], f"{name} stopped: {docker('logs', name).stderr[-2000:]}"
        assert time.monotonic() < deadline, f"{name} not healthy: {state.get('Health')}"
        time.sleep(0.1)


def _timestamp(text: str) -> datetime:
    """Docker's RFC 3339 times carry nanoseconds, which fromisoformat does not take."""
    match = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?Z", text)
    assert match, text
    micros = (match.group(2) or "0")[:6].ljust(6, "0")
    return datetime.fromisoformat(f"{match.group(1)}.{micros}+00:00")


@live
def test_the_compose_file_is_one_to_copy() -> None:
    config = json.loads(ok(compose("config", "--format", "json")))
    broker = config["services"]["broker"]
    assert broker["restart"] == "unless-stopped"
    assert [(v["type"], v["target"]) for v in broker["volumes"]] == [("volume", "/data")]
    environment = broker["environment"]
    assert environment["REBALANCED_GROUP_INITIAL_REBALANCE_DELAY_MS"] == "0"
    assert environment["REBALANCED_ADVERTISED_LISTENERS"] == (
        f"INTERNAL://broker:29092,EXTERNAL://localhost:{host_port()}")
    (published,) = broker["ports"]
    assert (published["host_ip"], int(published["published"]), published["target"]) == (
        "127.0.0.1", host_port(), 9092)
    for client in ("kcat", "scenario"):
        assert config["services"][client]["depends_on"]["broker"]["condition"] == (
            "service_healthy")


@live
def test_the_image_carries_the_speedups_and_no_compiler() -> None:
    imported = ok(docker("run", "--rm", "--entrypoint", "python", IMAGE, "-c",
                         "import storage._legacy_speedups as s, storage._fsync_worker as f,"
                         " protocol._tls_records as t, forensics._grouplog_speedups as g,"
                         " protocol.tls; print(s.__file__, f.__file__, t.__file__, g.__file__,"
                         " protocol.tls.RECORDS_IN_C)"))
    assert imported.count(".so") == 4 and imported.split()[-1] == "True", imported
    assert docker("run", "--rm", "--entrypoint", "sh", IMAGE, "-c",
                  "command -v gcc cc").returncode != 0
    assert ok(docker("run", "--rm", "--entrypoint", "id", IMAGE, "-u")).strip() == "10001"


@live
def test_the_image_adds_little_to_its_base() -> None:
    size = int(ok(docker("image", "inspect", "-f", "{{.Size}}", IMAGE)))
    base = int(ok(docker("image", "inspect", "-f", "{{.Size}}", "python:3.11-slim")))
    print(f"\ndocker-test: image {size / 1e6:.1f} MB, {(size - base) / 1e6:.1f} MB on its base")
    # About 9 MB on python:3.11-slim (about 130 MB; 191 MB for the Debian-packaged stand-in):
    # the image stays under 200 MB on either.
    assert size - base <= 10_000_000, (size, base)


@live
def test_the_image_has_no_admin_clients_and_its_groups_command_says_so() -> None:
    result = docker("run", "--rm", "--entrypoint", "rebalanced", IMAGE, "groups", "list")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [MISSING_CLIENTS_LINE]


@live
def test_the_image_has_no_admin_clients_and_its_transactions_command_says_so() -> None:
    result = docker("run", "--rm", "--entrypoint", "rebalanced", IMAGE, "transactions", "list")
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("rebalanced transactions: error: ") and "not installed" in line, line


@live
def test_a_client_on_the_host_uses_the_published_port() -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient

    bootstrap = f"localhost:{host_port()}"
    (advertised,) = AdminClient({"bootstrap.servers": bootstrap}).list_topics(
        timeout=15).brokers.values()
    assert (advertised.host, advertised.port) == ("localhost", host_port())
    topic, group = "host-client", "host-client"
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(5):
        producer.produce(topic, value=b"%d" % i)
    assert producer.flush(15) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    seen: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(seen) < 5 and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                seen.append(message.value() or b"")
                consumer.commit(message=message, asynchronous=False)
    finally:
        consumer.close()
    assert sorted(seen) == [b"%d" % i for i in range(5)]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (described,) = [f.result(15) for f in admin.describe_consumer_groups([group]).values()]
    assert (described.coordinator.host, described.coordinator.port) == ("localhost", host_port())


@live
def test_kcat_on_the_compose_network() -> None:
    output = ok(compose("run", "--rm", "kcat", timeout=120))
    assert "at broker:29092" in output, output
    assert output.strip().splitlines()[-3:] == ["one", "two", "three"], output


@live
def test_the_stock_clients_on_the_compose_network_across_a_restart() -> None:
    ok(compose("run", "--rm", "scenario", "--phase", "first", timeout=240))
    ok(compose("restart", "broker", timeout=60))
    ok(compose("up", "--detach", "--wait", "--wait-timeout", "60", "broker", timeout=90))
    ok(compose("run", "--rm", "scenario", "--phase", "resume", timeout=240))


@live
def test_start_to_healthy() -> None:
    """From the container's start to its first passing health check, probing every second as
    compose.yaml does (the image's own interval is 5 s)."""
    name = container_name("timing")
    ok(docker("run", "--detach", "--name", name, "--health-interval", "1s", IMAGE))
    state = wait_healthy(name)
    first_pass = min(_timestamp(probe["End"].replace(" +0000 UTC", "Z").replace(" ", "T"))
                     for probe in state["Health"]["Log"] if probe["ExitCode"] == 0)
    seconds = (first_pass - _timestamp(state["StartedAt"])).total_seconds()
    print(f"\ndocker-test: start to healthy {seconds:.2f} s (probing every 1 s)")
    assert seconds <= 5, state["Health"]["Log"]
    ok(docker("rm", "--force", "--volumes", name))


@live
def test_the_health_check_follows_a_moved_listener() -> None:
    name = container_name("moved")
    ok(docker("run", "--detach", "--name", name, "--health-interval", "1s",
              "-e", "REBALANCED_LISTENERS=PLAINTEXT://0.0.0.0:9555",
              "-e", "REBALANCED_ADVERTISED_LISTENERS=PLAINTEXT://localhost:9555", IMAGE))
    wait_healthy(name)
    ok(docker("rm", "--force", "--volumes", name))


@live
@pytest.mark.parametrize(("variable", "value", "line"), [
    ("REBALANCED_LISTENERS", "EXTERNAL://0.0.0.0",
     "rebalanced: configuration error: REBALANCED_LISTENERS: invalid value 'EXTERNAL://0.0.0.0'"
     " for listeners: 'EXTERNAL://0.0.0.0': expected NAME://host:port"),
    ("REBALANCED_ADVERTISED_LISTENERS", "PUBLIC://localhost:9092",
     "rebalanced: configuration error: advertised.listeners names PUBLIC, which is not in "
     "listeners (EXTERNAL, INTERNAL)"),
    ("REBALANCED_NUM_PARTITIONS", "many",
     "rebalanced: configuration error: REBALANCED_NUM_PARTITIONS: invalid value 'many' for "
     "num.partitions: invalid literal for int() with base 10: 'many'"),
])
def test_a_bad_setting_stops_the_container_with_one_line(variable: str, value: str,
                                                         line: str) -> None:
    result = docker("run", "--rm", "--name", container_name("bad-setting"),
                    "-e", f"{variable}={value}", IMAGE)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [line]


@live
def test_a_root_owned_bind_mount_says_what_to_chown(tmp_path: Path) -> None:
    data = tmp_path / "broker-data"
    data.mkdir(mode=0o755)
    result = docker("run", "--rm", "--name", container_name("bind-mount"),
                    "-v", f"{data}:/data", IMAGE)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "rebalanced: log.dirs /data is not writable by uid 10001 (gid 10001): run "
        "`chown -R 10001:10001` on /data (for a bind mount: on its host directory)"]
    if os.getuid() == 0:  # the fix it names works
        os.chown(data, 10001, 10001)
        name = container_name("bind-mount-chowned")
        ok(docker("run", "--detach", "--name", name, "--health-interval", "1s",
                  "-v", f"{data}:/data", IMAGE))
        wait_healthy(name)
        ok(docker("rm", "--force", "--volumes", name))
        assert (data / "meta.properties").exists()
