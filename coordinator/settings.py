"""Broker settings under Kafka's own names, from defaults, a properties file, env and flags.

Precedence, lowest first: built-in defaults, `--config server.properties`, environment variables
(`REBALANCED_` + the key upper-cased with dots as underscores, e.g. `REBALANCED_LOG_DIRS`), then
command-line flags (`--log.dirs ./data`). A bad value is a start-up error naming the key.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import structlog


class ConfigError(ValueError):
    pass


def _int(lo: int | None = None, hi: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text.strip())
        if lo is not None and value < lo:
            raise ValueError(f"must be >= {lo}")
        if hi is not None and value > hi:
            raise ValueError(f"must be <= {hi}")
        return value

    return parse


def _float(lo: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = float(text.strip())
        if value < lo:
            raise ValueError(f"must be >= {lo}")
        return value

    return parse


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValueError("must be true or false")


@dataclass(frozen=True, slots=True)
class Listener:
    """One `NAME://host:port` entry of `listeners` or `advertised.listeners`."""

    name: str
    host: str
    port: int


# Kafka's default listener.security.protocol.map: a listener named after a protocol uses it.
_DEFAULT_PROTOCOL_MAP = ("PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                         "SASL_SSL:SASL_SSL")
_LISTENER_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")


def parse_listeners(text: str) -> tuple[Listener, ...]:
    """`NAME://host:port[,NAME://host:port...]` (a lone `host:port` is PLAINTEXT) -> listeners,
    each name once. An empty host means every interface."""
    listeners: list[Listener] = []
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        name, sep, address = entry.partition("://")
        if not sep:
            name, address = "PLAINTEXT", entry
        name = name.upper()
        if not _LISTENER_NAME.match(name):
            raise ValueError(f"listener name {name!r} is not a name (letters, digits, _)")
        host, sep, port = address.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"{entry!r}: expected NAME://host:port")
        port_number = int(port)
        if not 0 <= port_number <= 65535:
            raise ValueError(f"{entry!r}: port out of range")
        if any(known.name == name for known in listeners):
            raise ValueError(f"listener {name} is given twice")
        listeners.append(Listener(name, host.strip("[]"), port_number))
    if not listeners:
        raise ValueError("expected NAME://host:port")
    return tuple(listeners)


def _listeners(text: str) -> tuple[Listener, ...]:
    listeners = parse_listeners(text)
    ports = [listener.port for listener in listeners if listener.port]
    if len(set(ports)) != len(ports):
        raise ValueError("two listeners on the same port")
    return listeners


def _advertised_listeners(text: str) -> tuple[Listener, ...]:
    if not text.strip():
        return ()
    listeners = parse_listeners(text)
    for listener in listeners:
        if listener.host in ("", "0.0.0.0", "::"):
            raise ValueError(f"listener {listener.name} advertises no host a client can "
                             "reach (an empty host or a wildcard address)")
    return listeners


def _protocol_map(text: str) -> dict[str, str]:
    """`NAME:PROTOCOL,...` (Kafka's listener.security.protocol.map)."""
    mapping: dict[str, str] = {}
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        name, sep, protocol = entry.partition(":")
        if not sep or not _LISTENER_NAME.match(name.strip()):
            raise ValueError(f"{entry!r}: expected NAME:PROTOCOL")
        mapping[name.strip().upper()] = protocol.strip().upper()
    return mapping


def _metrics_listener(text: str) -> str:
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError("expected HOST:PORT")
    return text.strip()


def _metrics_authentication(text: str) -> str:
    value = text.strip().lower()
    if value not in ("", "none", "basic", "bearer"):
        raise ValueError("must be none, basic or bearer")
    return value


def _log_format(text: str) -> str:
    value = text.strip().lower()
    if value not in ("auto", "json", "console"):
        raise ValueError("must be auto, json or console")
    return value


def _fsync_policy(text: str) -> str:
    value = text.strip().lower()
    if value == "always" or value.isdigit():
        return value
    raise ValueError("must be 'always' or an interval in milliseconds")


def _assignors(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in ("uniform", "range")]
    if unknown or not names:
        raise ValueError(f"unknown assignor(s) {', '.join(unknown) or '(none)'}; "
                         "known: uniform, range")
    return names


def _migration_policy(text: str) -> str:
    value = text.strip().lower()
    if value not in ("bidirectional", "upgrade", "downgrade", "disabled"):
        raise ValueError("must be bidirectional, upgrade, downgrade or disabled")
    return value


def _authorizer(text: str) -> str:
    name = text.strip()
    known = ("org.apache.kafka.metadata.authorizer.StandardAuthorizer",
             "kafka.security.authorizer.AclAuthorizer")
    if name and name not in known:
        raise ValueError(f"the authorizers served are {' and '.join(known)}")
    return name


@dataclass(frozen=True, slots=True)
class Setting:
    key: str
    parse: Callable[[str], Any]
    default: str
    doc: str


SETTINGS: tuple[Setting, ...] = (
    Setting("listeners", _listeners, "PLAINTEXT://127.0.0.1:9092",
            "NAME://host:port,... to listen on (an empty host: every interface)"),
    Setting("advertised.listeners", _advertised_listeners, "",
            "NAME://host:port,... clients are told to connect to, per listener they came in "
            "on (default: the listener's own address)"),
    Setting("listener.security.protocol.map", _protocol_map, _DEFAULT_PROTOCOL_MAP,
            "NAME:PROTOCOL,... the security protocol of each listener: PLAINTEXT, SSL, "
            "SASL_PLAINTEXT or SASL_SSL"),
    Setting("node.id", _int(0), "1", "this broker's node id"),
    Setting("log.dirs", str, "./data", "data directory (topics and the group log)"),
    Setting("num.partitions", _int(1), "1", "partitions of an auto-created topic"),
    Setting("auto.create.topics.enable", _bool, "true", "create unknown topics on Metadata"),
    Setting("max.broker.partitions", _int(-1), "-1",
            "topic partitions this broker holds at most; more are refused (POLICY_VIOLATION). "
            "-1: no limit (partitions open their segment files lazily, within "
            "log.open.segments.max)"),
    Setting("log.open.segments.max", _int(-1), "-1",
            "topic segment files open at once (at least 4); the least recently used are "
            "closed (sealed ones first, then idle active ones once fsynced). -1: the open-file "
            "limit less the "
            "group log's descriptors, the connections' share and the ops port's"),
    Setting("controller.mutation.rate", _float(-1), "-1",
            "partitions a client id may create per second (KIP-599), with a burst of 11 s; "
            "beyond, THROTTLING_QUOTA_EXCEEDED (-1: no quota)"),
    Setting("log.segment.bytes", _int(14), "1073741824", "segment size before rolling"),
    Setting("log.retention.ms", _int(-1), "604800000",
            "delete segments older than this (-1: never)"),
    Setting("log.retention.bytes", _int(-1), "-1", "per-partition size limit (-1: none)"),
    Setting("log.retention.check.interval.ms", _int(1), "300000", "how often retention runs"),
    Setting("socket.request.max.bytes", _int(1), "104857600", "largest request frame accepted"),
    Setting("queued.max.requests", _int(1), "500",
            "requests in flight per connection before reading pauses"),
    Setting("group.min.session.timeout.ms", _int(0), "6000", "smallest session timeout allowed"),
    Setting("group.max.session.timeout.ms", _int(0), "1800000", "largest session timeout allowed"),
    Setting("group.initial.rebalance.delay.ms", _int(0), "3000",
            "wait for more members before the first rebalance of an empty group"),
    Setting("group.max.size", _int(1), "2147483647", "members allowed in one group"),
    Setting("group.member.disconnect.grace.ms", _int(-1), "1000",
            "remove a dynamic member this long after its connection closed without LeaveGroup"
            " (-1: off, only the session timeout removes it)"),
    Setting("offsets.topic.num.partitions", _int(1), "50", "partitions of the group log"),
    Setting("transaction.max.timeout.ms", _int(1), "900000",
            "longest transaction.timeout.ms a transactional producer may ask for"),
    Setting("transactional.id.expiration.ms", _int(1), "604800000",
            "forget a transactional id idle this long"),
    Setting("offsets.topic.segment.bytes", _int(14), "104857600", "group log segment size"),
    Setting("offset.metadata.max.bytes", _int(0), "4096", "largest commit metadata string"),
    Setting("offsets.topic.max.message.bytes", _int(1024), "1048588",
            "largest group record (every member's subscription and assignment) the group log "
            "takes; a larger one is refused with UNKNOWN_SERVER_ERROR (Kafka's message.max.bytes "
            "of __consumer_offsets)"),
    Setting("offsets.retention.minutes", _int(1), "10080", "committed offsets expire after this"),
    Setting("offsets.retention.check.interval.ms", _int(1), "600000",
            "how often offset expiry runs"),
    Setting("offsets.commit.fsync", _fsync_policy, "always",
            "'always': fsync before acknowledging a commit; N: fsync every N ms"),
    Setting("log.cleaner.delete.retention.ms", _int(0), "86400000",
            "how long group-log tombstones survive compaction"),
    Setting("log.cleaner.backoff.ms", _int(1), "15000", "how often the group log is compacted"),
    # The event journal (docs/events.md).
    Setting("journal.dir", str, "", "event journal directory (default: <log.dirs>/events)"),
    Setting("journal.segment.bytes", _int(1024), "67108864",
            "close and rename the active journal file at this size"),
    Setting("journal.segment.ms", _int(100), "60000",
            "close and rename the active journal file after this long"),
    Setting("journal.retention.bytes", _int(-1), "1073741824",
            "delete the oldest closed journal files above this total (-1: keep all)"),
    # The edge against hostile or broken clients.
    Setting("connections.max.idle.ms", _int(-1), "600000",
            "close a connection with no request or response for this long, including one "
            "that stopped inside a frame (-1: never)"),
    Setting("max.connections", _int(1), "2147483647", "connections accepted at once"),
    Setting("max.connections.per.ip", _int(1), "2147483647",
            "connections accepted at once from one client address"),
    Setting("queued.max.request.bytes", _int(-1), "536870912",
            "request bytes buffered broker-wide (partial frames, frames waiting) before reading "
            "pauses (-1: no limit)"),
    # The operators' HTTP endpoint: /metrics (Prometheus) and / (the live group page).
    Setting("metrics.listener", lambda s: _metrics_listener(s) if s.strip() else "", "",
            "HOST:PORT serving /metrics and the group page at / (default: off)"),
    Setting("metrics.authentication", _metrics_authentication, "",
            "basic, bearer or none for metrics.listener (default: none on a loopback address; "
            "required on any other)"),
    Setting("metrics.credentials.file", str, "",
            "file of user:password lines (basic) or tokens (bearer), one a line"),
    Setting("metrics.ssl.certificate.location", str, "",
            "PEM certificate chain: serve metrics.listener over HTTPS"),
    Setting("metrics.ssl.key.location", str, "",
            "PEM private key of that certificate (default: in the certificate file)"),
    Setting("metrics.max.connections", _int(1), "32",
            "HTTP connections to metrics.listener at once (more are answered 503); at most "
            "an eighth of the open-files limit"),
    Setting("metrics.header.timeout.ms", _int(1), "5000",
            "an HTTP request's head must arrive within this long, else 408 and close"),
    Setting("metrics.idle.timeout.ms", _int(1), "10000",
            "close a kept-alive HTTP connection idle this long, or one not taking its answer"),
    Setting("metrics.max.request.rate", _int(1), "20",
            "HTTP requests answered per second on metrics.listener; more wait their turn"),
    Setting("metrics.cache.ms", _int(0), "1000",
            "/metrics and the group page are built at most once per this interval, and "
            "shared by the requests in it"),
    Setting("log.format", _log_format, "auto",
            "'json' lines, 'console' (readable), or 'auto': console when stderr is a terminal"),
    Setting("metrics.max.groups", _int(1), "200",
            "groups with their own per-group metric series; later ones share group=__other__"),
)
# The event-loop lag monitor (always on; its figures are also exported at /metrics).
SETTINGS += (
    Setting("loop.lag.warn.ms", _int(1), "100",
            "log one warning line when the event loop runs this much later than asked"),
)
# The test control endpoint (docs/testing.md): faults, virtual time and group waiters for
# test suites. Off unless a listener is set; without it no fault can ever be installed.
SETTINGS += (
    Setting("test.control.listener", lambda s: _metrics_listener(s) if s.strip() else "", "",
            "HOST:PORT of the test control endpoint, loopback unless "
            "test.control.allow.remote (default: off)"),
    Setting("test.control.token", str, "",
            "the token a control request must carry (Authorization: Bearer ...); required "
            "with test.control.listener"),
    Setting("test.control.allow.remote", _bool, "false",
            "let test.control.listener bind a non-loopback address"),
)
# The consumer group protocol (KIP-848): Kafka's group.consumer.* broker configs.
SETTINGS += (
    Setting("group.consumer.session.timeout.ms", _int(1), "45000",
            "consumer-protocol members are fenced after this long without a heartbeat"),
    Setting("group.consumer.min.session.timeout.ms", _int(1), "45000",
            "lower bound of group.consumer.session.timeout.ms"),
    Setting("group.consumer.max.session.timeout.ms", _int(1), "60000",
            "upper bound of group.consumer.session.timeout.ms"),
    Setting("group.consumer.heartbeat.interval.ms", _int(1), "5000",
            "heartbeat interval the broker gives consumer-protocol members"),
    Setting("group.consumer.min.heartbeat.interval.ms", _int(1), "5000",
            "lower bound of group.consumer.heartbeat.interval.ms"),
    Setting("group.consumer.max.heartbeat.interval.ms", _int(1), "15000",
            "upper bound of group.consumer.heartbeat.interval.ms"),
    Setting("group.consumer.max.size", _int(1), "2147483647",
            "members allowed in one consumer group"),
    Setting("group.consumer.assignors", _assignors, "uniform,range",
            "server-side assignors (uniform, range); the first is the default"),
    Setting("group.consumer.migration.policy", _migration_policy, "bidirectional",
            "upgrade an empty classic group to a consumer group: "
            "bidirectional, upgrade, downgrade or disabled"),
)
# Listener security (docs/security.md): Kafka's names, each also per listener as
# `listener.name.<name>.<key>`.
SETTINGS += (
    Setting("ssl.keystore.type", str, "PEM", "PEM or PKCS12 (JKS: convert it)"),
    Setting("ssl.keystore.location", str, "",
            "PEM file with the private key and certificate chain, or a PKCS12 file"),
    Setting("ssl.keystore.password", str, "", "the PKCS12 keystore's password"),
    Setting("ssl.key.password", str, "", "the password of an encrypted PEM private key"),
    Setting("ssl.keystore.key", str, "", "PEM private key given inline"),
    Setting("ssl.keystore.certificate.chain", str, "", "PEM certificate chain given inline"),
    Setting("ssl.truststore.type", str, "PEM", "PEM or PKCS12"),
    Setting("ssl.truststore.location", str, "", "CA certificates client certificates are "
            "checked against"),
    Setting("ssl.truststore.password", str, "", "the PKCS12 truststore's password"),
    Setting("ssl.truststore.certificates", str, "", "PEM CA certificates given inline"),
    Setting("ssl.client.auth", str, "none", "client certificates: none, requested or required"),
    Setting("ssl.enabled.protocols", str, "TLSv1.2,TLSv1.3", "TLS versions served"),
    Setting("ssl.protocol", str, "TLSv1.3", "accepted for Kafka compatibility; the versions "
            "served are ssl.enabled.protocols"),
    Setting("ssl.cipher.suites", str, "", "TLS 1.2 cipher suites, OpenSSL's names (default: "
            "OpenSSL's)"),
    Setting("ssl.principal.mapping.rules", str, "DEFAULT",
            "client certificate subject -> principal name (RULE:pattern/replacement/[LU],"
            "...,DEFAULT)"),
    Setting("sasl.enabled.mechanisms", str, "",
            "SASL mechanisms of SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, "
            "OAUTHBEARER"),
    Setting("connections.max.reauth.ms", _int(0), "0",
            "SASL session lifetime: clients re-authenticate within it or are disconnected "
            "(KIP-368; 0: no limit)"),
    Setting("connection.failed.authentication.delay.ms", _int(0), "100",
            "delay before a failed authentication is answered and the connection closed"),
)
# ACLs (docs/security.md).
SETTINGS += (
    Setting("authorizer.class.name", lambda s: _authorizer(s), "",
            "org.apache.kafka.metadata.authorizer.StandardAuthorizer (or Kafka's older "
            "AclAuthorizer) checks ACLs; empty: no authorization"),
    Setting("super.users", lambda s: tuple(p.strip() for p in s.split(";") if p.strip()), "",
            "principals allowed everything, separated by ';' (User:admin;User:ops)"),
    Setting("allow.everyone.if.no.acl.found", _bool, "false",
            "allow a request on a resource no ACL names"),
)
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
# What `listener.name.<name>.` may prefix; the JAAS entries exist only per listener, as in
# Kafka (`listener.name.sasl_ssl.plain.sasl.jaas.config`).
LISTENER_SCOPED = frozenset(
    {s.key for s in SETTINGS if s.key.startswith(("ssl.", "sasl."))}
    | {"connections.max.reauth.ms"}
    | {f"{mechanism.lower()}.sasl.jaas.config" for mechanism in SASL_MECHANISMS})
_LISTENER_KEY = re.compile(r"listener\.name\.([A-Za-z][A-Za-z0-9_]*)\.(.+)\Z")
_BY_KEY = {s.key: s for s in SETTINGS}


def _listener_key(key: str) -> tuple[str, str] | None:
    """`listener.name.sasl_ssl.ssl.client.auth` -> ("SASL_SSL", "ssl.client.auth")."""
    match = _LISTENER_KEY.match(key)
    if match is None:
        return None
    return match.group(1).upper(), match.group(2).lower()


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    values: Mapping[str, Any]

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    @property
    def listeners(self) -> tuple[Listener, ...]:
        return tuple(self.values["listeners"])

    @property
    def listen(self) -> tuple[str, int]:
        """The first listener's address (an empty host: every interface)."""
        first = self.listeners[0]
        return first.host or "0.0.0.0", first.port

    def advertised_by_listener(self) -> dict[str, tuple[str, int]]:
        """What Metadata and FindCoordinator answer on a connection, by the listener it came in
        on: its advertised.listeners entry, else its own address (a wildcard one as
        127.0.0.1)."""
        advertised = {listener.name: (listener.host, listener.port)
                      for listener in self.values["advertised.listeners"]}
        for listener in self.listeners:
            if listener.name not in advertised:
                wildcard = listener.host in ("", "0.0.0.0", "::")
                advertised[listener.name] = ("127.0.0.1" if wildcard else listener.host,
                                             listener.port)
        return advertised

    @property
    def advertised(self) -> tuple[str, int]:
        """The first listener's advertised address."""
        return self.advertised_by_listener()[self.listeners[0].name]

    @property
    def data_dir(self) -> Path:
        return Path(self.values["log.dirs"].split(",")[0])

    def for_listener(self, listener: str, key: str) -> str:
        """`listener.name.<listener>.<key>` if set, else the broker-wide `key` ("" if none)."""
        scoped = self.values.get("listener.name", {}).get(listener, {})
        if key in scoped:
            return str(scoped[key])
        value = self.values.get(key, "")
        return str(value)

    def with_overrides(self, overrides: Mapping[str, str]) -> BrokerSettings:
        values = dict(self.values)
        scoped = {name: dict(keys) for name, keys in values.get("listener.name", {}).items()}
        for key, text in overrides.items():
            value = _parse(key, text)
            listener_key = _listener_key(key)
            if listener_key is not None:
                scoped.setdefault(listener_key[0], {})[listener_key[1]] = value
            else:
                values[key] = value
        values["listener.name"] = scoped
        return BrokerSettings(values)


def _parse(key: str, text: str) -> Any:
    listener_key = _listener_key(key)
    if listener_key is not None:
        if listener_key[1] not in LISTENER_SCOPED:
            raise ConfigError(f"unknown setting {key!r} (listener.name.<listener>. prefixes "
                              "ssl.*, sasl.enabled.mechanisms, connections.max.reauth.ms and "
                              "<mechanism>.sasl.jaas.config)")
        setting = _BY_KEY.get(listener_key[1])
        if setting is None:
            return text.strip()
        try:
            setting.parse(text)
        except ValueError as exc:
            raise ConfigError(f"invalid value for {key}: {exc}") from exc
        return text.strip()
    setting = _BY_KEY.get(key)
    if setting is None:
        raise ConfigError(f"unknown setting {key!r}")
    try:
        return setting.parse(text)
    except ValueError as exc:
        raise ConfigError(f"invalid value {text!r} for {key}: {exc}") from exc


def read_properties(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        key, sep, value = stripped.partition("=")
        if not sep:
            key, sep, value = stripped.partition(":")
        if not sep:
            raise ConfigError(f"{path}:{number}: expected key=value")
        values[key.strip()] = value.strip()
    return values


def defaults() -> BrokerSettings:
    return BrokerSettings({**{s.key: s.parse(s.default) for s in SETTINGS}, "listener.name": {}})


class _ArgumentParser(argparse.ArgumentParser):
    """Measures the terminal once. `add_argument` makes a help formatter to check each
    argument's metavar, and every formatter asked for the terminal's size: with a hundred
    settings that was a tenth of the broker's start-up."""

    _width: int | None = None

    def error(self, message: str) -> NoReturn:
        # One line and exit 2, as the operators' commands do (argparse would print the usage
        # of every setting first: seventy lines above the one that says what was wrong).
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")

    def _get_formatter(self) -> argparse.HelpFormatter:
        if self._width is None:
            self._width = shutil.get_terminal_size().columns - 2  # as HelpFormatter's default
        return self.formatter_class(prog=self.prog, width=self._width)  # type: ignore[call-arg]


def argument_parser() -> argparse.ArgumentParser:
    parser = _ArgumentParser(
        prog="rebalanced",
        allow_abbrev=False,
        description="A Kafka wire-protocol compatible consumer-group coordinator broker.",
        epilog="Every setting may also come from --config FILE or REBALANCED_<KEY> env vars. "
               "`rebalanced groups --help`: the consumer-group commands (list, describe, "
               "reset-offsets, delete-offsets, delete).",
    )
    parser.add_argument("--config", type=Path, help="server.properties-style file")
    parser.add_argument("--repair", action="store_true",
                        help="cut corrupted batches out of the logs (keeping every intact one, "
                        "each loss logged) instead of refusing to start")
    for s in SETTINGS:
        parser.add_argument(f"--{s.key}", dest=s.key, metavar="VALUE",
                            help=f"{s.doc}" + (f" (default: {s.default})" if s.default else ""))
    return parser


def log_setting_warnings(warnings: Sequence[tuple[str, dict[str, Any]]]) -> None:
    for event, fields in warnings:
        structlog.get_logger("rebalanced.settings").warning(event, **fields)


def load(argv: Sequence[str] | None = None,
         environ: Mapping[str, str] | None = None, *,
         defer_warnings: bool = False) -> tuple[BrokerSettings, argparse.Namespace]:
    parser = argument_parser()
    args, rest = parser.parse_known_args(argv)
    # `--listener.name.<listener>.<key> VALUE`: per-listener settings have open-ended names.
    listener_flags: dict[str, str] = {}
    while rest:
        flag = rest.pop(0)
        key, equals, value = flag[2:].partition("=") if flag.startswith("--") else ("", "", "")
        if _listener_key(key) is None:
            parser.error(f"unrecognized arguments: {flag}")
        if not equals:
            if not rest:
                parser.error(f"argument {flag}: expected one argument")
            value = rest.pop(0)
        listener_flags[key] = value
    env = os.environ if environ is None else environ
    overrides: dict[str, str] = {}
    ignored: list[str] = []
    if args.config is not None:
        try:
            from_file = read_properties(args.config)
        except OSError as exc:
            raise ConfigError(f"cannot read --config {args.config}: {exc.strerror}") from exc
        for key, value in from_file.items():
            if key in _BY_KEY or _listener_key(key) is not None:
                overrides[key] = value
            else:
                # A Kafka server.properties carries many settings that mean nothing here
                # (broker.id, num.network.threads ...): they are skipped, and named.
                ignored.append(key)
    for s in SETTINGS:
        env_key = env_name(s.key)
        if env_key in env:
            # Checked here so that the error names the variable a container was given.
            try:
                _parse(s.key, env[env_key])
            except ConfigError as exc:
                raise ConfigError(f"{env_key}: {exc}") from None
            overrides[s.key] = env[env_key]
    for s in SETTINGS:
        value = getattr(args, s.key)
        if value is not None:
            overrides[s.key] = value
    # Per-listener variables are known once the listeners are: REBALANCED_LISTENER_NAME_
    # <LISTENER>_<KEY>, e.g. REBALANCED_LISTENER_NAME_SASL_SSL_PLAIN_SASL_JAAS_CONFIG.
    try:
        named = defaults().with_overrides(overrides).listeners
    except ConfigError:
        named = ()
    listener_env: set[str] = set()
    for listener in named:
        for scoped in LISTENER_SCOPED:
            key = f"listener.name.{listener.name.lower()}.{scoped}"
            name = env_name(key).replace("-", "_")
            if name in env:
                listener_env.add(name)
                overrides[key] = env[name]
    overrides.update(listener_flags)
    unknown_env = sorted(name for name in env if name.startswith("REBALANCED_")
                         and name not in _ENV_NAMES and name not in _OTHER_ENV
                         and name not in listener_env)
    settings = defaults().with_overrides(overrides)
    # With `defer_warnings` the caller logs `args.setting_warnings` itself, once its logging
    # has the format these settings choose.
    warnings: list[tuple[str, dict[str, Any]]] = []
    if unknown_env:
        warnings.append(("environment variables naming no setting ignored",
                         {"variables": unknown_env}))
    if ignored:
        warnings.append(("settings not used by this broker ignored",
                         {"file": str(args.config), "keys": ignored}))
    args.setting_warnings = warnings
    try:
        _check_settings(settings)
    except ConfigError:
        log_setting_warnings(warnings)  # a misspelt variable or key may be why
        raise
    if not defer_warnings:
        log_setting_warnings(warnings)
    return settings, args


def _check_settings(settings: BrokerSettings) -> None:
    """The rules between settings; ConfigError names the first one broken."""
    _check_listeners(settings)
    if settings["group.min.session.timeout.ms"] > settings["group.max.session.timeout.ms"]:
        raise ConfigError("group.min.session.timeout.ms exceeds group.max.session.timeout.ms")
    budget = settings["queued.max.request.bytes"]
    if budget != -1 and budget < settings["socket.request.max.bytes"]:
        raise ConfigError("queued.max.request.bytes is smaller than socket.request.max.bytes "
                          "(a largest request could never be read)")
    _check_consumer_group_bounds(settings)


def env_name(key: str) -> str:
    """The environment variable of a setting: `log.dirs` -> `REBALANCED_LOG_DIRS`."""
    return "REBALANCED_" + key.upper().replace(".", "_")


_ENV_NAMES = frozenset(env_name(s.key) for s in SETTINGS)
# Read by other programs of the project, not by the broker.
_OTHER_ENV = frozenset({"REBALANCED_HEALTHCHECK_ADDRESS"})


def _check_listeners(settings: BrokerSettings) -> None:
    """Kafka's rules: every listener's name maps to a security protocol, and every advertised
    listener is one of the listeners."""
    protocols = settings["listener.security.protocol.map"]
    names = {listener.name for listener in settings.listeners}
    for listener in settings.listeners:
        protocol = protocols.get(listener.name)
        if protocol is None:
            raise ConfigError(f"listener {listener.name} has no entry in "
                              "listener.security.protocol.map (e.g. "
                              f"{listener.name}:PLAINTEXT)")
        if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise ConfigError(f"listener {listener.name} uses security protocol {protocol}; "
                              "known: PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL "
                              "(listener.security.protocol.map)")
    for advertised in settings["advertised.listeners"]:
        if advertised.name not in names:
            raise ConfigError(f"advertised.listeners names {advertised.name}, which is not in "
                              f"listeners ({', '.join(sorted(names))})")


def _check_consumer_group_bounds(settings: BrokerSettings) -> None:
    """Kafka's bounds: each timing within its min/max, the interval below the session."""
    for name in ("session.timeout.ms", "heartbeat.interval.ms"):
        value = settings[f"group.consumer.{name}"]
        low = settings[f"group.consumer.min.{name}"]
        high = settings[f"group.consumer.max.{name}"]
        if not low <= value <= high:
            raise ConfigError(f"group.consumer.{name}={value} must be between "
                              f"group.consumer.min.{name}={low} and "
                              f"group.consumer.max.{name}={high}")
    if settings["group.consumer.heartbeat.interval.ms"] >= settings[
            "group.consumer.session.timeout.ms"]:
        raise ConfigError("group.consumer.heartbeat.interval.ms must be below "
                          "group.consumer.session.timeout.ms")
