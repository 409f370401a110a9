"""The image installs what README tells a user to install, and runs it the way README says.

There is no Docker engine on the machines that run `make test`, so this reads the Dockerfile:
the image must build the project's wheel from the whole build context (nothing a package
needs may be left out by `.dockerignore`), install that wheel without extras, run the
`rebalanced` script as an unprivileged user with data in a volume, and health-check with a
real ApiVersions request. `make docker-test` builds and runs it where an engine exists.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
import tomllib
from pathlib import Path

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


def pip_commands(stage: list[tuple[str, str]]) -> list[list[str]]:
    commands = []
    for keyword, args in stage:
        if keyword == "RUN":
            for part in args.split("&&"):
                words = shlex.split(part)
                if words[:1] == ["pip"] or words[:3] == ["python", "-m", "pip"]:
                    commands.append(words[words.index("pip") + 1:])
    return commands


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
    needed = ["pyproject.toml", "README.md", *(p.replace(".", "/") for p in packages)]
    for path in needed:
        for pattern in ignored:
            parts = path.split("/")
            prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
            assert not any(fnmatch.fnmatch(p, pattern) for p in prefixes), (path, pattern)


def test_image_installs_that_wheel_and_nothing_else() -> None:
    final = stages()[-1]
    installs = [c for c in pip_commands(final) if c[0] == "install"]
    assert len(installs) == 1
    targets = [w for w in installs[0][1:] if not w.startswith("-")]
    assert targets == ["/wheels/rebalanced-*.whl"], targets
    assert "-e" not in installs[0] and "[" not in " ".join(targets)


def test_image_runs_the_installed_scripts_unprivileged_with_a_data_volume() -> None:
    final = dict(stages()[-1])
    scripts = pyproject()["project"]["scripts"]
    assert scripts["rebalanced"] == "coordinator.__main__:main"
    assert scripts["rebalanced-healthcheck"] == "coordinator.cli.healthcheck:main"
    assert final["ENTRYPOINT"] == '["rebalanced"]'
    assert final["USER"] not in ("root", "0")
    assert final["VOLUME"] == "/data"
    assert "REBALANCED_LOG_DIRS=/data" in final["ENV"]
    healthcheck = final["HEALTHCHECK"]
    assert 'CMD ["rebalanced-healthcheck", "127.0.0.1:9092"]' in healthcheck
