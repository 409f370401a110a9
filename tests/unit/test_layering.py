"""The folders are the layers, and imports only go down (docs/architecture.md draws them).

`storage/` knows segments and batches, nothing of ours outside it; the group core
(`coordinator/group/`) does no I/O and sees neither the kio adapters nor the runtime; the group
log's records and codec (`coordinator/grouplog/`) sit below the core. Checked on the source
(every `import` and `from ... import`, also those inside functions or `TYPE_CHECKING`), so a
wrong arrow fails here before it turns into an import cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OURS = ("protocol", "coordinator", "storage", "forensics", "tests")


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            # `from coordinator import group` names a module too
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def ours(module: str) -> bool:
    return module.split(".")[0] in OURS


def within(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def violations(folder: str, allowed: tuple[str, ...], forbidden_external: tuple[str, ...] = ()
               ) -> list[str]:
    found = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for module in sorted(imported_modules(path)):
            wrong = (ours(module) and not within(module, *allowed)) or within(
                module, *forbidden_external)
            if wrong:
                found.append(f"{path.relative_to(ROOT)} imports {module}")
    return found


def test_storage_is_a_leaf() -> None:
    assert violations("storage", ("storage",)) == []


def test_the_protocol_is_a_leaf() -> None:
    """The wire layer knows kio and Kafka's encodings, not storage nor the coordinator: the one
    varint module both leaves read (`storage/varint.py`) is its only import from storage."""
    assert violations("protocol", ("protocol", "storage.varint")) == []


def test_the_group_log_records_and_codec_know_only_storage() -> None:
    assert violations("coordinator/grouplog", ("coordinator.grouplog", "storage")) == []


@pytest.mark.parametrize("folder", ["coordinator/group"])
def test_the_group_core_is_pure(folder: str) -> None:
    """No asyncio, no sockets or files, no kio adapters, no runtime: commands in, Result out."""
    assert violations(folder, ("coordinator.group", "coordinator.grouplog.records",
                               "coordinator.grouplog.placement"),
                      forbidden_external=("asyncio", "socket", "structlog")) == []


def test_the_transaction_core_is_pure() -> None:
    assert violations("coordinator/txn", ("coordinator.txn",),
                      forbidden_external=("asyncio", "socket", "structlog")) == []


def test_the_api_adapters_do_not_reach_the_runtime() -> None:
    assert violations("coordinator/api", ("coordinator.api", "coordinator.group", "protocol")
                      ) == []



def test_the_data_plane_does_not_need_the_broker() -> None:
    """Each handler states what it uses of the broker as a small protocol."""
    assert violations("coordinator/dataplane", (
        "coordinator.dataplane", "coordinator.api.context", "coordinator.grouplog.log",
        "coordinator.grouplog.placement", "coordinator.txn", "protocol", "storage")) == []


def test_ops_sees_the_broker_only_through_its_view() -> None:
    """The page, /metrics and the HTTP endpoint read `coordinator.ops.view`, which the runtime
    implements (`coordinator/runtime/ops_view.py`): no runtime, no group state, no storage. The
    counters time the request context; the rebalance history reads the group events."""
    assert violations("coordinator/ops", ("coordinator.ops", "coordinator.api.context",
                                          "coordinator.group.events")) == []


def test_security_sees_requests_and_settings_not_the_groups() -> None:
    """Listeners, SASL and the authorizer wrap handlers the runtime gives them; they read the
    request context, the settings and the wire layer, never the group core or the runtime."""
    assert violations("coordinator/security", ("coordinator.security", "coordinator.api.context",
                                               "coordinator.settings", "protocol")) == []


def test_the_operators_commands_are_a_client_not_part_of_the_broker() -> None:
    assert violations("coordinator/cli", ("coordinator.cli",)) == []


def test_the_test_kit_is_a_client_of_the_broker() -> None:
    """The kit runs in the user's test process: it starts the broker as another process and
    speaks to it over the network, so it imports nothing of the broker. The warm parent
    (`zygote.py`) is the exception: it runs in a process of its own and forks brokers, so it
    imports the broker's entry point."""
    found = violations("coordinator/testkit", ("coordinator.testkit",))
    assert [v for v in found if not v.startswith("coordinator/testkit/zygote.py imports "
                                                 "coordinator.__main__")] == []


def test_nothing_of_the_broker_imports_the_forensics_job() -> None:
    assert [f for folder in ("protocol", "storage", "coordinator")
            for f in violations(folder, ("protocol", "storage", "coordinator"))
            ] == []


def test_the_forensics_job_reuses_only_the_record_readers() -> None:
    assert violations("forensics", ("forensics", "storage", "coordinator.grouplog",
                                    "coordinator.group")) == []


def test_only_the_process_entry_point_knows_the_broker() -> None:
    importers = [str(path.relative_to(ROOT))
                 for path in sorted((ROOT / "coordinator").rglob("*.py"))
                 if "coordinator.runtime.broker" in imported_modules(path)]
    assert importers == ["coordinator/__main__.py"]


def test_only_the_wire_layer_and_the_embedded_protocol_use_kios_serializer() -> None:
    """kio's reader API has changed between releases: its users stay few and known."""
    users = sorted(str(path.relative_to(ROOT)) for folder in OURS
                   for path in (ROOT / folder).rglob("*.py")
                   if any(within(m, "kio.serial") for m in imported_modules(path))
                   and not within(folder, "tests"))
    assert [u for u in users if not u.startswith("protocol/")] == [
        "coordinator/group/embedded_protocol.py"]
