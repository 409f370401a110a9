"""The authorizer's decisions, as Kafka's StandardAuthorizer makes them, and the ACL file."""

from __future__ import annotations

from pathlib import Path

from coordinator.security.acls import (
    AclBinding,
    AclFilter,
    AclStore,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

GROUP, TOPIC = ResourceType.GROUP, ResourceType.TOPIC


def _binding(name: str, principal: str = "User:alice", operation: Operation = Operation.READ,
             permission: Permission = Permission.ALLOW,
             pattern: PatternType = PatternType.LITERAL, host: str = "*",
             resource_type: ResourceType = GROUP) -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, host, operation, permission)


def _authorizer(tmp_path: Path, *bindings: AclBinding, allow_if_no_acl: bool = False,
                super_users: tuple[str, ...] = ()) -> Authorizer:
    store = AclStore(tmp_path)
    store.replace(list(bindings))
    return Authorizer(store, super_users, allow_if_no_acl)


def _allowed(authorizer: Authorizer, name: str, principal: str = "User:alice",
             operation: Operation = Operation.READ, host: str = "/10.0.0.1",
             resource_type: ResourceType = GROUP) -> bool:
    return authorizer.authorize(principal, host, operation, resource_type, name).allowed


def test_literal_prefixed_and_wildcard_names(tmp_path: Path) -> None:
    authorizer = _authorizer(tmp_path, _binding("billing"),
                             _binding("team-", pattern=PatternType.PREFIXED),
                             _binding("*", principal="User:ops"))
    assert _allowed(authorizer, "billing")
    assert not _allowed(authorizer, "billing-2")
    assert _allowed(authorizer, "team-a")
    assert not _allowed(authorizer, "team")
    assert _allowed(authorizer, "anything", principal="User:ops")
    assert not _allowed(authorizer, "billing", principal="User:bob")


def test_deny_wins_and_describe_is_implied(tmp_path: Path) -> None:
    authorizer = _authorizer(
        tmp_path, _binding("g", operation=Operation.ALL),
        _binding("g", operation=Operation.DELETE, permission=Permission.DENY),
        _binding("h", operation=Operation.WRITE, resource_type=TOPIC))
    assert _allowed(authorizer, "g", operation=Operation.READ)
    assert not _allowed(authorizer, "g", operation=Operation.DELETE)
    assert _allowed(authorizer, "h", operation=Operation.DESCRIBE, resource_type=TOPIC)
    assert not _allowed(authorizer, "h", operation=Operation.READ, resource_type=TOPIC)


def test_hosts_principal_wildcard_super_users_and_no_acl_default(tmp_path: Path) -> None:
    authorizer = _authorizer(tmp_path, _binding("g", principal="User:*", host="10.0.0.1"),
                             super_users=("User:admin",))
    assert _allowed(authorizer, "g", principal="User:anyone")
    assert not _allowed(authorizer, "g", host="/10.0.0.2")
    assert _allowed(authorizer, "unnamed", principal="User:admin")
    assert not _allowed(authorizer, "unnamed")
    permissive = _authorizer(tmp_path, _binding("g"), allow_if_no_acl=True)
    assert _allowed(permissive, "unnamed", principal="User:bob")
    # A resource some ACL names is not "no ACL found", even for another principal.
    assert not _allowed(permissive, "g", principal="User:bob")


def test_the_acls_survive_a_restart_and_filters_match_as_kafkas(tmp_path: Path) -> None:
    literal, prefixed = _binding("billing"), _binding("bill", pattern=PatternType.PREFIXED)
    AclStore(tmp_path).replace([literal, prefixed])
    assert AclStore(tmp_path).bindings == [literal, prefixed]

    def matching(pattern: PatternType, name: str | None) -> list[AclBinding]:
        acl_filter = AclFilter(ResourceType.ANY, name, pattern, None, None, Operation.ANY,
                               Permission.ANY)
        return [b for b in (literal, prefixed) if acl_filter.matches(b)]

    assert matching(PatternType.MATCH, "billing") == [literal, prefixed]
    assert matching(PatternType.LITERAL, "billing") == [literal]
    assert matching(PatternType.PREFIXED, None) == [prefixed]
    assert matching(PatternType.ANY, "bill") == [prefixed]


def _write(name: str, permission: Permission = Permission.ALLOW,
           pattern: PatternType = PatternType.LITERAL,
           operation: Operation = Operation.WRITE) -> AclBinding:
    return _binding(name, operation=operation, permission=permission, pattern=pattern,
                    resource_type=TOPIC)


def test_write_on_any_topic_is_allowed_unless_a_deny_covers_it(tmp_path: Path) -> None:
    def any_write(authorizer: Authorizer, principal: str = "User:alice") -> bool:
        return authorizer.authorize_any(principal, "/10.0.0.1", Operation.WRITE,
                                        TOPIC).allowed

    deny = Permission.DENY
    prefixed = PatternType.PREFIXED
    assert any_write(_authorizer(tmp_path / "a", _write("orders")))
    assert not any_write(_authorizer(tmp_path / "b", _write("orders")), principal="User:bob")
    assert not any_write(_authorizer(tmp_path / "c", _write("orders-", pattern=prefixed),
                                     _write("ord", deny, prefixed)))
    assert any_write(_authorizer(tmp_path / "d", _write("orders"), _write("other", deny)))
    assert not any_write(_authorizer(tmp_path / "e", _write("orders"),
                                     _write("*", deny, operation=Operation.ALL)))
    assert not any_write(_authorizer(tmp_path / "f", _binding("g")), "User:x")  # groups only
    assert any_write(_authorizer(tmp_path / "g", _binding("g"), allow_if_no_acl=True))
    assert any_write(_authorizer(tmp_path / "h", super_users=("User:root",)), "User:root")
