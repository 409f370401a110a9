"""The operators' commands refuse option mistakes before asking a broker: one line, exit 2."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AclOperation

from coordinator.cli import groups, security


@pytest.mark.parametrize("argv", [
    ["describe", ""],
    ["delete", "billing", ""],
    ["list", "--timeout", "-1"],
    ["list", "--timeout", "0"],
    ["list", "--timeout", "nan"],
    ["reset-offsets", "billing", "--all-topics", "--to-offset", "-1"],
    ["reset-offsets", "billing", "--topic", "orders:x", "--to-earliest"],
])
def test_group_command_mistakes_are_usage_errors(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        groups.main([*argv, "--bootstrap-server", "127.0.0.1:1"])
    assert stopped.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith("rebalanced groups")
    assert ": error: " in error[0]


@pytest.mark.parametrize(("spelled", "operation"), [
    ("Read", AclOperation.READ), ("describe", AclOperation.DESCRIBE),
    ("ClusterAction", AclOperation.CLUSTER_ACTION),
    ("DESCRIBE_CONFIGS", AclOperation.DESCRIBE_CONFIGS),
    ("IdempotentWrite", AclOperation.IDEMPOTENT_WRITE), ("All", AclOperation.ALL),
])
def test_acl_operations_as_kafka_acls_spells_them(spelled: str, operation: AclOperation) -> None:
    assert security.acl_operation(spelled) is operation


def test_an_unknown_acl_operation_names_the_known_ones(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        security.main("acls", ["add", "--allow-principal", "User:b", "--operation", "Fly",
                               "--group", "x"])
    assert stopped.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "unknown operation 'Fly'" in line and "ClusterAction" in line


def test_a_kafka_python_error_is_named_once() -> None:
    from kafka.errors import KafkaTimeoutError

    from coordinator.cli.admin import kafka_python_error_text

    text = kafka_python_error_text(KafkaTimeoutError("Unable to bootstrap from 127.0.0.1:1"))
    assert text == "KafkaTimeoutError: Unable to bootstrap from 127.0.0.1:1"


def test_a_wrong_control_endpoint_is_named_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    import http.server
    import threading

    from coordinator.testkit import cli as faults_cli

    with pytest.raises(SystemExit) as stopped:
        faults_cli.main(["--control", "notaurl", "list"])
    assert stopped.value.code == 2
    assert "expected http://HOST:PORT" in capsys.readouterr().err

    # Another HTTP server (the metrics port, say) answers without the endpoint's JSON.
    class Quiet(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        assert faults_cli.main(["--control", f"http://127.0.0.1:{port}", "list"]) == 1
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.endswith("is not a test control endpoint: GET /faults answered HTTP 501 "
                             "without JSON")
    finally:
        server.shutdown()
        server.server_close()
    assert faults_cli.main(["--control", f"http://127.0.0.1:{port}", "list"]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"cannot reach the test control endpoint at http://127.0.0.1:{port}" in line


@pytest.mark.parametrize(("status", "body", "command", "answer"), [
    (404, b"", ["list"], "answered HTTP 404 with no JSON body"),
    (200, b"{}", ["list"], "answered HTTP 200 with a JSON dict where an array was expected"),
    (200, b"{}", ["remove", "--all"], "answered without 'removed'"),
    (401, b"[]", ["list"], "answered HTTP 401 with a JSON list where an object was expected"),
])
def test_an_http_server_that_is_not_the_endpoint_gets_one_line(
        status: int, body: bytes, command: list[str], answer: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    import http.server
    import threading

    from coordinator.testkit import cli as faults_cli

    class Answers(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_DELETE = _answer

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answers)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        assert faults_cli.main(["--control", url, *command]) == 1
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith(f"rebalanced faults: {url} is not a test control endpoint")
        assert line.endswith(answer)
    finally:
        server.shutdown()
        server.server_close()


def test_the_control_endpoint_may_follow_the_command(
        capsys: pytest.CaptureFixture[str]) -> None:
    from coordinator.testkit import cli as faults_cli

    for argv in (["list", "--control", "notaurl"], ["--control", "http://127.0.0.1:1", "list",
                                                    "--control", "notaurl"]):
        with pytest.raises(SystemExit) as stopped:
            faults_cli.main(argv)
        assert stopped.value.code == 2
        assert "'notaurl'" in capsys.readouterr().err
