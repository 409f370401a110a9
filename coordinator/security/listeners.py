"""Each listener's security from the broker settings: the TLS context of SSL and SASL_SSL
listeners, the certificate principal mapping, and the SASL configuration of SASL_PLAINTEXT and
SASL_SSL listeners. Everything is checked here, at start-up: a missing key file or an unknown
mechanism is a configuration error naming the setting, never a failure of the first client."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from coordinator.security import tls
from coordinator.security.mechanisms import (
    ListenerSasl,
    UnsecuredJwsOptions,
    parse_jaas,
)
from coordinator.security.sasl import SaslSession
from coordinator.security.scram_store import ScramStore
from coordinator.settings import SASL_MECHANISMS, BrokerSettings, ConfigError
from protocol.server import ListenerSecurity


def _int(settings: BrokerSettings, listener: str, key: str) -> int:
    text = settings.for_listener(listener, key)
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"listener {listener}: {key} must be an integer") from None
    if value < 0:
        raise ConfigError(f"listener {listener}: {key} must be >= 0")
    return value


def _sasl(settings: BrokerSettings, listener: str, store: ScramStore) -> ListenerSasl:
    text = settings.for_listener(listener, "sasl.enabled.mechanisms")
    mechanisms = tuple(m.strip().upper() for m in text.split(",") if m.strip())
    if not mechanisms:
        raise ConfigError(f"listener {listener} is a SASL listener: set sasl.enabled.mechanisms "
                          f"(or listener.name.{listener.lower()}.sasl.enabled.mechanisms) to "
                          f"some of {', '.join(SASL_MECHANISMS)}")
    unknown = [m for m in mechanisms if m not in SASL_MECHANISMS]
    if unknown:
        raise ConfigError(f"listener {listener}: sasl.enabled.mechanisms names "
                          f"{', '.join(unknown)}; served: {', '.join(SASL_MECHANISMS)}")
    plain_users: dict[str, str] = {}
    if "PLAIN" in mechanisms:
        key = f"listener.name.{listener.lower()}.plain.sasl.jaas.config"
        jaas = settings.for_listener(listener, "plain.sasl.jaas.config")
        if not jaas:
            raise ConfigError(f"listener {listener} enables PLAIN: its users are set in {key} "
                              "(PlainLoginModule required user_<name>=\"<password>\" ...;)")
        try:
            options = parse_jaas(jaas)
        except ConfigError as exc:
            raise ConfigError(f"{key}: {exc}") from None
        plain_users = {name[len("user_"):]: value for name, value in options.items()
                       if name.startswith("user_")}
    oauth = UnsecuredJwsOptions()
    if "OAUTHBEARER" in mechanisms:
        jaas = settings.for_listener(listener, "oauthbearer.sasl.jaas.config")
        if jaas:
            oauth = UnsecuredJwsOptions.from_jaas(parse_jaas(jaas))
    return ListenerSasl(mechanisms, plain_users, oauth, store,
                        _int(settings, listener, "connections.max.reauth.ms"))


def listener_security(settings: BrokerSettings) -> dict[str, ListenerSecurity]:
    """Security of each listener that is not PLAINTEXT, by name."""
    protocols = settings["listener.security.protocol.map"]
    delay_ms = settings["connection.failed.authentication.delay.ms"]
    store = ScramStore(settings.data_dir)
    secured: dict[str, ListenerSecurity] = {}
    for listener in settings.listeners:
        name = listener.name
        protocol = protocols.get(name, "PLAINTEXT")
        if protocol == "PLAINTEXT":
            continue

        def get(key: str, name: str = name) -> str:
            return settings.for_listener(name, key)

        context = tls.server_context(name, get) if protocol in ("SSL", "SASL_SSL") else None
        mapping = None
        if context is not None:
            mapping = tls.PrincipalMapper(get("ssl.principal.mapping.rules")).name
        sasl = None
        if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            sasl = functools.partial(SaslSession, _sasl(settings, name, store), delay_ms)
        secured[name] = ListenerSecurity(
            tls=context,
            certificate_principal=(None if mapping is None else
                                   functools.partial(_certificate_name, mapping)),
            sasl=sasl)
    return secured


def _certificate_name(mapping: Callable[[str], str], certificate: dict[str, Any]) -> str:
    return mapping(tls.subject_dn(certificate))
