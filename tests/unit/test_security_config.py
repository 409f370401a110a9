"""Listener security settings and the pieces that read them: per-listener keys from flags, the
environment and a properties file; ssl.principal.mapping.rules as Kafka's SslPrincipalMapper
applies them; the certificate subject written as Java writes it; JAAS entries; OAUTHBEARER's
unsecured-JWS checks; PLAIN's."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from coordinator.security.listeners import listener_security
from coordinator.security.mechanisms import (
    OAuthBearerExchange,
    PlainExchange,
    SaslFailure,
    UnsecuredJwsOptions,
    parse_jaas,
)
from coordinator.security.tls import NoMatchingRule, PrincipalMapper, subject_dn
from coordinator.settings import ConfigError, load


def test_per_listener_settings_come_from_flags_env_and_file(tmp_path: Path) -> None:
    properties = tmp_path / "server.properties"
    properties.write_text("listener.name.sasl_ssl.sasl.enabled.mechanisms=PLAIN\n"
                          "listener.name.sasl_ssl.ssl.client.auth=requested\n")
    settings, _ = load(
        ["--config", str(properties), "--listeners",
         "SASL_SSL://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092",
         "--listener.name.sasl_ssl.ssl.client.auth", "required",
         "--sasl.enabled.mechanisms=SCRAM-SHA-512"],
        environ={"REBALANCED_LISTENER_NAME_SASL_SSL_PLAIN_SASL_JAAS_CONFIG":
                 'x.PlainLoginModule required user_a="b";'})
    assert settings.for_listener("SASL_SSL", "ssl.client.auth") == "required"  # flag > file
    assert settings.for_listener("SASL_SSL", "sasl.enabled.mechanisms") == "PLAIN"
    assert settings.for_listener("PLAINTEXT", "sasl.enabled.mechanisms") == "SCRAM-SHA-512"
    assert settings.for_listener("SASL_SSL", "plain.sasl.jaas.config").startswith("x.Plain")


def test_an_unknown_per_listener_key_is_a_configuration_error() -> None:
    with pytest.raises(ConfigError, match=r"listener\.name\.ssl\.log\.dirs"):
        load(["--listener.name.ssl.log.dirs", "x"], environ={})


@pytest.mark.parametrize(("overrides", "message"), [
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:1"}, "set sasl.enabled.mechanisms"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:1", "sasl.enabled.mechanisms": "GSSAPI"},
     "GSSAPI"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:1", "sasl.enabled.mechanisms": "PLAIN"},
     "plain.sasl.jaas.config"),
    ({"listeners": "SSL://127.0.0.1:1"}, "needs its key and certificate"),
    ({"listeners": "SSL://127.0.0.1:1", "ssl.keystore.type": "JKS",
      "ssl.keystore.location": "x.jks"}, "keytool"),
    ({"listeners": "SSL://127.0.0.1:1", "ssl.keystore.location": "/nonexistent/k.pem"},
     "cannot read ssl.keystore.location"),
])
def test_listener_security_is_checked_at_start_up(overrides: dict[str, str],
                                                  message: str) -> None:
    argv = [part for key, value in overrides.items() for part in (f"--{key}", value)]
    settings, _ = load(argv, environ={})
    with pytest.raises(ConfigError, match=message):
        listener_security(settings)


def test_principal_mapping_rules_as_kafka_applies_them() -> None:
    mapper = PrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
                             "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
                             "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U,"
                             "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U,"
                             "DEFAULT")
    assert mapper.name("CN=kafka-server,OU=ServiceUsers,O=Org,C=US") == "kafka-server"
    assert mapper.name("CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Santa Clara,ST=CA,C=US") \
        == "duke@javasoft"
    assert mapper.name("cn=duke,ou=javasoft,dc=sun,dc=com") == "DUKE@JAVASOFT"
    assert mapper.name("OU=x,CN=duke.y") == "DUKE.Y"
    assert mapper.name("O=nobody") == "O=nobody"
    with pytest.raises(NoMatchingRule):
        PrincipalMapper("RULE:^CN=(.*)$/$1/").name("O=nobody")
    with pytest.raises(ConfigError):
        PrincipalMapper("RULE:^CN=(.*)$")


def test_the_subject_is_written_most_specific_first_and_escaped() -> None:
    certificate = {"subject": ((("countryName", "DE"),), (("organizationName", "A, B"),),
                               (("commonName", "alice"),), (("emailAddress", "a@b"),))}
    assert subject_dn(certificate) == (
        "1.2.840.113549.1.9.1=#1603614062,CN=alice,O=A\\, B,C=DE")


def test_jaas_options() -> None:
    options = parse_jaas('org.apache.kafka.common.security.plain.PlainLoginModule required '
                         'username="admin" password="a\\"b" user_alice="s;c";')
    assert options == {"username": "admin", "password": 'a"b', "user_alice": "s;c"}
    with pytest.raises(ConfigError):
        parse_jaas('PlainLoginModule required user_a="b"')


def test_plain_checks_user_password_and_authorization_id() -> None:
    users = {"alice": "secret"}
    exchange = PlainExchange(users)
    assert exchange.step(b"alice\0alice\0secret") == b"" and exchange.principal == "alice"
    for token in (b"\0alice\0wrong", b"\0mallory\0secret", b"bob\0alice\0secret", b"x"):
        with pytest.raises(SaslFailure):
            PlainExchange(users).step(token)


def _jws(claims: dict[str, object], alg: str = "none") -> bytes:
    def part(value: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    token = f"{part({'alg': alg})}.{part(claims)}."
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode()


def test_oauthbearer_unsecured_tokens() -> None:
    now_ms = 1_700_000_000_000
    options = UnsecuredJwsOptions(required_scope=("kafka",))
    good = OAuthBearerExchange(options, clock_ms=lambda: now_ms)
    assert good.step(_jws({"sub": "dave", "exp": now_ms / 1000 + 60, "scope": "kafka x"})) \
        == b""
    assert good.complete and good.principal == "dave"
    assert good.expires_at_ms == now_ms + 60_000
    for claims, alg in (({"sub": "dave", "exp": now_ms / 1000 - 1, "scope": "kafka"}, "none"),
                        ({"sub": "dave", "exp": now_ms / 1000 + 60}, "none"),
                        ({"exp": now_ms / 1000 + 60, "scope": "kafka"}, "none"),
                        ({"sub": "dave", "exp": now_ms / 1000 + 60, "scope": "kafka"},
                         "RS256")):
        exchange = OAuthBearerExchange(options, clock_ms=lambda: now_ms)
        # RFC 7628: the error comes as a challenge; the client's %x01 ends the exchange.
        assert json.loads(exchange.step(_jws(claims, alg))) == {"status": "invalid_token"}
        with pytest.raises(SaslFailure):
            exchange.step(b"\x01")
