"""A broker with the standard authorizer behind a SASL_PLAINTEXT listener, for the ACL tests:
PLAIN users `admin` (the super user), `alice` and `bob`, each with the password `<user>-secret`,
and a PLAINTEXT listener beside it (the broker's own port)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.bench import wire
from tests.broker_process import BrokerProcess, free_port

JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        'user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";')


def start_acl_broker(data_dir: Path, settings: dict[str, str] | None = None) -> BrokerProcess:
    """Started; `env["SASL_PORT"]` names the SASL listener's port."""
    plain, sasl = free_port(), free_port()
    broker = BrokerProcess(data_dir, port=plain, settings={
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
        **(settings or {}),
    })
    broker.env["SASL_PORT"] = str(sasl)
    broker.start()
    return broker


def client_config(broker: BrokerProcess, user: str) -> dict[str, Any]:
    """confluent-kafka settings for `user` over the SASL listener."""
    return {"bootstrap.servers": f"127.0.0.1:{broker.env['SASL_PORT']}",
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": f"{user}-secret"}


async def login(broker: BrokerProcess, user: str) -> wire.Connection:
    """A raw connection authenticated as `user` (SaslHandshake v1, SaslAuthenticate v2)."""
    conn = await wire.Connection.open("127.0.0.1", int(broker.env["SASL_PORT"]))
    assert (await conn.call(17, 1, {"mechanism": "PLAIN"})).error_code.value == 0
    secret = f"\0{user}\0{user}-secret".encode()
    assert (await conn.call(36, 2, {"auth_bytes": secret})).error_code.value == 0
    return conn
