"""Listeners by name, as Kafka takes them: `listeners`, `advertised.listeners` and
`listener.security.protocol.map`, from flags or the environment; the health check's
default addresses, which follow the same environment; and a mistaken flag, on the broker's
command line or `rebalanced faults`'s, in one line with exit 2."""

from __future__ import annotations

import re

import pytest
import structlog.testing

from coordinator.cli.healthcheck import default_addresses
from coordinator.settings import ConfigError, Listener, load

TWO_LISTENERS = {
    "REBALANCED_LISTENERS": "INTERNAL://0.0.0.0:19092,EXTERNAL://:9092",
    "REBALANCED_ADVERTISED_LISTENERS": "INTERNAL://broker:19092,EXTERNAL://localhost:29092",
    "REBALANCED_LISTENER_SECURITY_PROTOCOL_MAP": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
}


def test_each_listener_advertises_its_own_address() -> None:
    settings, _ = load([], TWO_LISTENERS)
    assert settings.listeners == (Listener("INTERNAL", "0.0.0.0", 19092),
                                  Listener("EXTERNAL", "", 9092))
    assert settings.advertised_by_listener() == {"INTERNAL": ("broker", 19092),
                                                 "EXTERNAL": ("localhost", 29092)}
    assert settings.listen == ("0.0.0.0", 19092)


def test_a_listener_without_an_advertised_entry_advertises_itself() -> None:
    settings, _ = load(["--listeners", "PLAINTEXT://0.0.0.0:9092,HOST://127.0.0.2:9093",
                        "--listener.security.protocol.map", "PLAINTEXT:PLAINTEXT,HOST:PLAINTEXT",
                        "--advertised.listeners", "HOST://localhost:9093"], {})
    assert settings.advertised_by_listener() == {"PLAINTEXT": ("127.0.0.1", 9092),
                                                 "HOST": ("localhost", 9093)}


def test_the_single_plaintext_listener_needs_no_map() -> None:
    settings, _ = load(["--listeners", "PLAINTEXT://127.0.0.1:9555"], {})
    assert settings.advertised == ("127.0.0.1", 9555)
    settings, _ = load(["--listeners", "127.0.0.1:9556"], {})
    assert settings.listeners == (Listener("PLAINTEXT", "127.0.0.1", 9556),)


@pytest.mark.parametrize(("argv", "message"), [
    (["--listeners", "INTERNAL://:9092"], "listener INTERNAL has no entry in "
                                          "listener.security.protocol.map"),
    (["--listeners", "X://:9093", "--listener.security.protocol.map", "X:KERBEROS"],
     "listener X uses security protocol KERBEROS; known: PLAINTEXT, SSL, SASL_PLAINTEXT"),
    (["--listeners", "PLAINTEXT://:9092", "--advertised.listeners", "EXTERNAL://h:1"],
     "advertised.listeners names EXTERNAL, which is not in listeners (PLAINTEXT)"),
    (["--listeners", "PLAINTEXT://:9092", "--advertised.listeners", "PLAINTEXT://0.0.0.0:9092"],
     "invalid value 'PLAINTEXT://0.0.0.0:9092' for advertised.listeners: listener PLAINTEXT "
     "advertises no host"),
    (["--listeners", "A://:9092,B://:9092", "--listener.security.protocol.map",
      "A:PLAINTEXT,B:PLAINTEXT"], "two listeners on the same port"),
    (["--listeners", "PLAINTEXT://:9092,PLAINTEXT://:9093"], "listener PLAINTEXT is given twice"),
    (["--listeners", "PLAINTEXT://broker"], "expected NAME://host:port"),
    (["--listener.security.protocol.map", "INTERNAL"], "expected NAME:PROTOCOL"),
])
def test_a_wrong_listener_is_an_error_naming_the_setting(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load(argv, {})


def test_a_bad_environment_variable_is_named() -> None:
    with pytest.raises(ConfigError) as error:
        load([], {"REBALANCED_LISTENERS": "PLAINTEXT://broker"})
    assert str(error.value).startswith("REBALANCED_LISTENERS: invalid value 'PLAINTEXT://broker'"
                                       " for listeners")
    with pytest.raises(ConfigError, match=r"^REBALANCED_NUM_PARTITIONS: invalid value 'three'"):
        load([], {"REBALANCED_NUM_PARTITIONS": "three"})


def test_a_flag_overrides_the_environment() -> None:
    settings, _ = load(["--listeners", "PLAINTEXT://127.0.0.1:9600"],
                       {"REBALANCED_LISTENERS": "PLAINTEXT://127.0.0.1:9601"})
    assert settings.listen == ("127.0.0.1", 9600)


def test_the_health_check_follows_the_listeners_in_the_environment() -> None:
    assert default_addresses({}) == ["127.0.0.1:9092"]
    assert default_addresses(TWO_LISTENERS) == ["127.0.0.1:19092", "127.0.0.1:9092"]
    assert default_addresses({"REBALANCED_LISTENERS": "PLAINTEXT://10.1.2.3:9500"}) == [
        "10.1.2.3:9500"]
    assert default_addresses({**TWO_LISTENERS,
                              "REBALANCED_HEALTHCHECK_ADDRESS": "127.0.0.1:7"}) == ["127.0.0.1:7"]


def test_a_misspelt_variable_is_named_in_a_warning() -> None:
    with structlog.testing.capture_logs() as logs:
        load([], {"REBALANCED_ADVERTISED_LISTENER": "PLAINTEXT://h:1",
                  "REBALANCED_HEALTHCHECK_ADDRESS": "127.0.0.1:9092"})
    assert [(e["event"], e["variables"]) for e in logs] == [
        ("environment variables naming no setting ignored", ["REBALANCED_ADVERTISED_LISTENER"])]


@pytest.mark.parametrize("argv", [["--no-such-flag"], ["--listeners"],
                                  ["--listener.name.x"]])
def test_a_mistaken_flag_is_one_line_and_exit_2(argv: list[str],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        load(argv, {})
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("rebalanced: error: "), err


def test_the_fault_commands_mistakes_are_one_line_and_exit_2(
        capsys: pytest.CaptureFixture[str]) -> None:
    from coordinator.testkit.cli import main

    for argv in (["--bogus"], ["remove", "x"], []):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("rebalanced faults"), err
        assert ": error: " in err


def test_deferred_warnings_are_left_to_the_caller() -> None:
    with structlog.testing.capture_logs() as logs:
        _, args = load([], {"REBALANCED_ADVERTISED_LISTENER": "PLAINTEXT://h:1"},
                       defer_warnings=True)
    assert logs == []
    assert args.setting_warnings == [("environment variables naming no setting ignored",
                                      {"variables": ["REBALANCED_ADVERTISED_LISTENER"]})]


def test_deferred_warnings_are_written_when_the_settings_are_refused() -> None:
    # The misspelt variable (no _MS) is why the session timeout is out of bounds: say so.
    with structlog.testing.capture_logs() as logs, pytest.raises(ConfigError):
        load(["--group.consumer.session.timeout.ms", "90000"],
             {"REBALANCED_GROUP_CONSUMER_MAX_SESSION_TIMEOUT": "120000"}, defer_warnings=True)
    assert [e["variables"] for e in logs] == [["REBALANCED_GROUP_CONSUMER_MAX_SESSION_TIMEOUT"]]
