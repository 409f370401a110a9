"""`rebalanced users scram ...` and `rebalanced acls ...`: SCRAM users and ACLs of any
Kafka-compatible broker, through the admin API (like kafka-configs.sh and kafka-acls.sh).

    rebalanced users scram list [--user U ...]
    rebalanced users scram add --user U [--mechanism SCRAM-SHA-512] [--iterations 8192]
                               [--password-file FILE]     (else the password is read on stdin)
    rebalanced users scram remove --user U [--mechanism M]
    rebalanced acls list [--group G | --topic T | --transactional-id T | --cluster]
                         [--principal P]
    rebalanced acls add (--allow-principal P | --deny-principal P) --operation OP
                        (--group G | --topic T | --transactional-id T | --cluster)
                        [--resource-pattern-type prefixed]
    rebalanced acls remove (same selection as add; what it names is removed)

`--command-config client.properties` carries the client's security settings (Kafka's names:
security.protocol, sasl.mechanism, sasl.jaas.config, ssl.truststore.location of PEM files ...).
A password is never taken from the command line. A failure prints one line and exits 1.
"""

from __future__ import annotations

import argparse
import getpass
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coordinator.cli.arguments import OneLineParser, connection_arguments, required_subcommands

_JAAS_USER = re.compile(r'username\s*=\s*"((?:\\.|[^"\\])*)"')
_JAAS_PASSWORD = re.compile(r'password\s*=\s*"((?:\\.|[^"\\])*)"')
# Java client properties -> librdkafka's; the others are passed as they are.
_RENAMED = {"ssl.truststore.location": "ssl.ca.location"}
_JAVA_ONLY = {"ssl.truststore.type", "ssl.keystore.type", "sasl.login.callback.handler.class",
              "sasl.client.callback.handler.class"}


class CommandError(Exception):
    pass



def client_config(path: Path | None) -> dict[str, str]:
    """librdkafka settings from a Kafka client.properties file."""
    if path is None:
        return {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise CommandError(f"cannot read --command-config {path}: {exc.strerror}") from None
    config: dict[str, str] = {}
    for line in lines:
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        key, _, value = stripped.partition("=")
        key, value = key.strip(), value.strip()
        if key == "sasl.jaas.config":
            user, password = _JAAS_USER.search(value), _JAAS_PASSWORD.search(value)
            if user:
                config["sasl.username"] = user.group(1)
            if password:
                config["sasl.password"] = password.group(1)
        elif key == "ssl.keystore.location":
            # A PEM keystore (key and certificate in one file), as the broker's.
            config["ssl.certificate.location"] = value
            config["ssl.key.location"] = value
        elif key not in _JAVA_ONLY:
            config[_RENAMED.get(key, key)] = value
    return config


def _admin(args: argparse.Namespace) -> Any:
    try:
        from confluent_kafka.admin import AdminClient
    except ImportError:
        # The broker's Docker image leaves the admin client out: the broker never imports it.
        raise CommandError("confluent-kafka is not installed (the broker's Docker image leaves "
                           "it out): run this command where `pip install .` installed it, "
                           "against the broker's published port") from None

    from coordinator.cli.admin import _silent_logger

    config: dict[str, Any] = {"bootstrap.servers": args.bootstrap_server,
                              "logger": _silent_logger(), "log.connection.close": False,
                              **client_config(args.command_config)}
    return AdminClient(config)


def _wait(future: Any, what: str, timeout: float) -> Any:
    from confluent_kafka import KafkaException

    try:
        return future.result(timeout=timeout)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else exc
        text = error.str() if hasattr(error, "str") else str(error)
        raise CommandError(f"{what} failed: {text}") from None
    except TimeoutError:
        raise CommandError(f"{what}: no answer within {timeout:g} s") from None


def _print(args: argparse.Namespace, rows: list[dict[str, Any]], columns: Sequence[str]) -> None:
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    widths = [max([len(c), *(len(str(r[c])) for r in rows)]) for c in columns]
    print("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for row in rows:
        print("  ".join(str(row[c]).ljust(w) for c, w in zip(columns, widths, strict=True))
              .rstrip())


# users ----------------------------------------------------------------------------------------


def _read_password(args: argparse.Namespace) -> str:
    if args.password_file is not None:
        try:
            text = Path(args.password_file).read_text(encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"cannot read --password-file: {exc.strerror}") from None
        password = text.splitlines()[0] if text else ""
    elif sys.stdin.isatty():
        password = getpass.getpass(f"password for {args.user}: ")
    else:
        password = sys.stdin.readline().rstrip("\n")
    if not password:
        raise CommandError("empty password")
    return password


def cmd_users(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    admin = _admin(args)
    mechanism = ScramMechanism[args.mechanism.replace("-", "_")] if getattr(
        args, "mechanism", None) else None
    if args.action == "list":
        future = admin.describe_user_scram_credentials(args.user or None,
                                                       request_timeout=args.timeout)
        result = _wait(future, "describing SCRAM users", args.timeout + 1)
        rows = [{"user": user, "mechanism": info.mechanism.name.replace("_", "-"),
                 "iterations": info.iterations}
                for user, description in sorted(result.items())
                for info in description.scram_credential_infos]
        _print(args, rows, ("user", "mechanism", "iterations"))
        return 0
    if args.action == "add":
        assert mechanism is not None
        alteration: Any = UserScramCredentialUpsertion(
            args.user, ScramCredentialInfo(mechanism, args.iterations),
            _read_password(args).encode())
    else:
        assert mechanism is not None
        alteration = UserScramCredentialDeletion(args.user, mechanism)
    futures = admin.alter_user_scram_credentials([alteration], request_timeout=args.timeout)
    for future in futures.values():
        _wait(future, f"{'adding' if args.action == 'add' else 'removing'} {args.user}",
              args.timeout + 1)
    print(f"{args.user}: {args.mechanism} {'added' if args.action == 'add' else 'removed'}")
    return 0


# acls -----------------------------------------------------------------------------------------


def _resource(args: argparse.Namespace, for_filter: bool) -> tuple[Any, Any, Any]:
    from confluent_kafka.admin import ResourcePatternType, ResourceType

    chosen = [(t, n) for t, n in ((ResourceType.GROUP, args.group),
                                  (ResourceType.TOPIC, args.topic),
                                  (ResourceType.TRANSACTIONAL_ID, args.transactional_id),
                                  (ResourceType.BROKER, "kafka-cluster" if args.cluster
                                   else None)) if n is not None]
    if len(chosen) > 1:
        raise CommandError("name one resource: --group, --topic, --transactional-id or "
                           "--cluster")
    if not chosen:
        if not for_filter:
            raise CommandError("name the resource: --group, --topic, --transactional-id or "
                               "--cluster")
        return ResourceType.ANY, None, ResourcePatternType.ANY
    pattern = ResourcePatternType[args.resource_pattern_type.upper()] \
        if args.resource_pattern_type else (ResourcePatternType.ANY if for_filter
                                            else ResourcePatternType.LITERAL)
    return chosen[0][0], chosen[0][1], pattern


def cmd_acls(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
    )

    admin = _admin(args)
    if args.action == "list":
        resource_type, name, pattern = _resource(args, for_filter=True)
        any_host: Any = None
        acl_filter = AclBindingFilter(resource_type, name, pattern, args.principal, any_host,
                                      AclOperation.ANY, AclPermissionType.ANY)
        found = _wait(admin.describe_acls(acl_filter, request_timeout=args.timeout),
                      "listing ACLs", args.timeout + 1)
        rows = [{"resource": f"{b.restype.name}:{b.name}", "pattern": b.resource_pattern_type.name,
                 "principal": b.principal, "host": b.host, "operation": b.operation.name,
                 "permission": b.permission_type.name} for b in found]
        _print(args, rows, ("resource", "pattern", "principal", "host", "operation",
                            "permission"))
        return 0
    resource_type, name, pattern = _resource(args, for_filter=False)
    principals = [(p, AclPermissionType.ALLOW) for p in args.allow_principal or ()] + [
        (p, AclPermissionType.DENY) for p in args.deny_principal or ()]
    if not principals or not args.operation:
        raise CommandError("give --allow-principal or --deny-principal, and --operation")
    bindings = [AclBinding(resource_type, name, pattern, principal, args.host, operation,
                           permission)
                for principal, permission in principals for operation in args.operation]
    if args.action == "add":
        for future in admin.create_acls(bindings, request_timeout=args.timeout).values():
            _wait(future, "adding ACLs", args.timeout + 1)
        print(f"{len(bindings)} ACL(s) added")
        return 0
    filters = [AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal,
                                b.host, b.operation, b.permission_type) for b in bindings]
    removed = 0
    for future in admin.delete_acls(filters, request_timeout=args.timeout).values():
        removed += len(_wait(future, "removing ACLs", args.timeout + 1))
    print(f"{removed} ACL(s) removed")
    return 0


def argument_parser(command: str) -> argparse.ArgumentParser:
    common = connection_arguments(timeout_s=10.0)
    parser = OneLineParser(prog=f"rebalanced {command}", allow_abbrev=False, description=(
        "SCRAM users of a Kafka-compatible broker (AlterUserScramCredentials)"
        if command == "users" else "ACLs of a Kafka-compatible broker (CreateAcls ...)"))
    if command == "users":
        kinds = required_subcommands(parser, "kind", "scram")
        scram = kinds.add_parser("scram", help="SCRAM-SHA-256/512 credentials")
        actions = required_subcommands(scram, "action", "ACTION")
        listing = actions.add_parser("list", parents=[common], help="users and mechanisms")
        listing.add_argument("--user", action="append", metavar="NAME")
        add = actions.add_parser("add", parents=[common], help="add or replace a credential")
        remove = actions.add_parser("remove", parents=[common], help="remove a credential")
        for sub in (add, remove):
            sub.add_argument("--user", required=True, metavar="NAME")
            sub.add_argument("--mechanism", default="SCRAM-SHA-512",
                             choices=("SCRAM-SHA-256", "SCRAM-SHA-512"))
        add.add_argument("--iterations", type=int, default=8192, help="4096 to 16384")
        add.add_argument("--password-file", metavar="FILE",
                         help="first line is the password (default: read from stdin)")
        return parser
    actions = required_subcommands(parser, "action", "ACTION")
    for action in ("list", "add", "remove"):
        sub = actions.add_parser(action, parents=[common])
        sub.add_argument("--group", metavar="NAME")
        sub.add_argument("--topic", metavar="NAME")
        sub.add_argument("--transactional-id", metavar="NAME")
        sub.add_argument("--cluster", action="store_true")
        sub.add_argument("--resource-pattern-type", choices=("literal", "prefixed", "match",
                                                             "any"))
        if action == "list":
            sub.add_argument("--principal", metavar="TYPE:NAME")
            continue
        sub.add_argument("--allow-principal", action="append", metavar="TYPE:NAME")
        sub.add_argument("--deny-principal", action="append", metavar="TYPE:NAME")
        sub.add_argument("--operation", action="append", metavar="OP", type=acl_operation,
                         help=f"one of {', '.join(_OPERATION_NAMES)}")
        sub.add_argument("--host", default="*", metavar="HOST")
    return parser


# The operations an ACL can name, as kafka-acls.sh spells them (`--operation ClusterAction`).
_OPERATION_NAMES = ("All", "Read", "Write", "Create", "Delete", "Alter", "Describe",
                    "ClusterAction", "DescribeConfigs", "AlterConfigs", "IdempotentWrite")
_UPPER_SNAKE = re.compile(r"(?<=[a-z])(?=[A-Z])")  # where ClusterAction gets its underscore


def acl_operation(text: str) -> Any:
    """`--operation`: one of `_OPERATION_NAMES`, in any case, with or without underscores;
    the client library's `AclOperation`."""
    from confluent_kafka.admin import AclOperation

    wanted = text.replace("_", "").replace("-", "").lower()
    for name in _OPERATION_NAMES:
        if name.lower() == wanted:
            return AclOperation[_UPPER_SNAKE.sub("_", name).upper()]
    raise argparse.ArgumentTypeError(
        f"unknown operation {text!r} (choose from {', '.join(_OPERATION_NAMES)})")


def main(command: str, argv: Sequence[str]) -> int:
    args = argument_parser(command).parse_args(list(argv))
    try:
        return cmd_users(args) if command == "users" else cmd_acls(args)
    except (CommandError, KeyError, ValueError) as exc:
        print(f"rebalanced {command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
