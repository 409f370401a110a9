"""The fault rule format, one for Python, the HTTP control endpoint and the CLI.

A rule is a JSON object:

    {"match":   {"api": "Heartbeat", "api_version": 4, "group_id": "g", "member_id": "m",
                 "group_instance_id": "i", "client_id": "c", "topic": "t", "partition": 0,
                 "connection": 7},                      every field optional: all must match
     "action":  {"type": "error", "error_code": 27}     answer this error code (27 or a name:
                                                        "REBALANCE_IN_PROGRESS")
              | {"type": "delay", "ms": 500}            handle the request this much later
              | {"type": "hold"}                        handle the request only once released
                                                        (or the rule removed)
              | {"type": "drop"}                        close the connection, no answer
              | {"type": "blackhole"}                   never answer (the client's session runs
                                                        out while it waits)
              | {"type": "observe"}                     count only
              | {"type": "expire_session"}              expire the request's member now, then
                                                        handle the request
              | {"type": "rebalance"}                   start a rebalance of the request's group
                                                        now, then handle the request,
     "trigger": {"type": "always"} | {"type": "once"} | {"type": "times", "n": 3}
              | {"type": "nth", "n": 2} | {"type": "probability", "p": 0.25, "seed": 7},
     "when":    {"group_state": "Stable", "generation_at_least": 3, "members_at_least": 2},
                                                        optional: the request's group, as the
                                                        coordinator sees it when the request
                                                        arrives, must be so (see WHEN)
     "for_ms":  5000}                                   optional: the rule ends after this long

`api` is an API key number or its name. Parsing is pure (no broker imports): `parse_rule`
returns the normalized dict or raises `RuleError` naming the field.
"""

from __future__ import annotations

from typing import Any

# The APIs a consumer application's requests use, by Kafka's names.
API_KEYS: dict[str, int] = {
    "Produce": 0, "Fetch": 1, "ListOffsets": 2, "Metadata": 3, "OffsetCommit": 8,
    "OffsetFetch": 9, "FindCoordinator": 10, "JoinGroup": 11, "Heartbeat": 12,
    "LeaveGroup": 13, "SyncGroup": 14, "DescribeGroups": 15, "ListGroups": 16,
    "ApiVersions": 18, "CreateTopics": 19, "DeleteTopics": 20, "InitProducerId": 22,
    "OffsetDelete": 47, "ConsumerGroupHeartbeat": 68, "ConsumerGroupDescribe": 69,
}
# The APIs the "error" action can answer: those with an error answer shaped like Kafka's.
ERROR_ANSWERABLE: frozenset[int] = frozenset({8, 9, 10, 11, 12, 13, 14, 15, 16, 68, 69})
# The requests that name one group (and a member): OffsetCommit, JoinGroup, Heartbeat,
# LeaveGroup, SyncGroup, and the consumer protocol's ConsumerGroupHeartbeat.
GROUP_APIS: frozenset[int] = frozenset({8, 11, 12, 13, 14, 68})
# Actions that act on the request's group, and the APIs they can act from: a consumer-protocol
# group has no forced rebalance, so "rebalance" never acts from its heartbeat.
GROUP_ACTIONS: dict[str, frozenset[int]] = {"expire_session": GROUP_APIS,
                                            "rebalance": GROUP_APIS - {68}}

# The declarative predicate (`when`): conditions on the request's group at the moment the
# request arrives, all of which must hold. A request whose group does not exist, or that names
# no group, does not match a rule with a `when`.
WHEN_INT = ("generation_at_least", "generation_at_most", "members_at_least", "members_at_most")
WHEN = ("group_state", "group_type", *WHEN_INT)
# Kafka's state names, classic (DescribeGroups) and consumer protocol (ConsumerGroupDescribe).
GROUP_STATES = ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead",
                "Assigning", "Reconciling")
GROUP_TYPES = ("classic", "consumer")

_MATCH_TEXT = ("group_id", "member_id", "group_instance_id", "client_id", "topic")
_MATCH_INT = ("api_version", "partition", "connection")
ACTIONS = ("error", "delay", "hold", "drop", "blackhole", "observe", "expire_session",
           "rebalance")
TRIGGERS = ("always", "once", "times", "nth", "probability")


class RuleError(ValueError):
    """A malformed rule: `field` is where (`action.error_code`), the message says why."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def _int(value: Any, field: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise RuleError(field, f"expected an integer >= {minimum}, got {value!r}")
    return value


def _object(value: Any, field: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RuleError(field, f"expected an object, got {type(value).__name__}")
    return value


def _unknown(obj: dict[str, Any], known: tuple[str, ...], field: str) -> None:
    for key in obj:
        if key not in known:
            raise RuleError(f"{field}.{key}" if field else key,
                            f"unknown field (known: {', '.join(known)})")


def error_code(value: Any, field: str = "action.error_code") -> int:
    """An error code by number or by Kafka's name (REBALANCE_IN_PROGRESS)."""
    from kio.schema.errors import ErrorCode

    if isinstance(value, str):
        try:
            return int(ErrorCode[value.lower()].value)
        except KeyError:
            raise RuleError(field, f"no Kafka error named {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RuleError(field, f"expected an error code or its name, got {value!r}")
    try:
        return int(ErrorCode(value).value)
    except ValueError:
        raise RuleError(field, f"no Kafka error code {value}") from None


def parse_rule(rule: Any) -> dict[str, Any]:
    """The normalized rule, or `RuleError` naming the first field that is wrong. A rule that
    could never match (an error answer on an API without one, a group action on a request
    without a group) is refused here rather than kept."""
    rule = _object(rule, "rule")
    _unknown(rule, ("match", "action", "trigger", "when", "for_ms"), "")
    match = dict(_object(rule.get("match", {}), "match"))
    _unknown(match, ("api", "api_key", *_MATCH_TEXT, *_MATCH_INT), "match")
    api = match.pop("api", match.pop("api_key", None))
    normalized_match: dict[str, Any] = {}
    if api is not None:
        if isinstance(api, str):
            if api not in API_KEYS:
                raise RuleError("match.api", f"unknown API {api!r} (known: "
                                f"{', '.join(API_KEYS)}, or a key number)")
            api = API_KEYS[api]
        normalized_match["api_key"] = _int(api, "match.api")
    for key in _MATCH_TEXT:
        if key in match:
            if not isinstance(match[key], str):
                raise RuleError(f"match.{key}", f"expected a string, got {match[key]!r}")
            normalized_match[key] = match[key]
    for key in _MATCH_INT:
        if key in match:
            normalized_match[key] = _int(match[key], f"match.{key}")

    if "action" not in rule:
        raise RuleError("action", "required")
    action = _object(rule["action"], "action")
    kind = action.get("type")
    if kind not in ACTIONS:
        raise RuleError("action.type", f"expected one of {', '.join(ACTIONS)}, got {kind!r}")
    normalized_action: dict[str, Any] = {"type": kind}
    api_key = normalized_match.get("api_key")
    if kind == "error":
        _unknown(action, ("type", "error_code"), "action")
        if "error_code" not in action:
            raise RuleError("action.error_code", "required with an error action")
        normalized_action["error_code"] = error_code(action["error_code"])
        if api_key is None:
            raise RuleError("match.api", "an error action needs the API it answers")
        if api_key not in ERROR_ANSWERABLE:
            raise RuleError("match.api", f"API {api_key} has no error answer here: use "
                            "drop, delay or blackhole")
    elif kind == "delay":
        _unknown(action, ("type", "ms"), "action")
        normalized_action["ms"] = _int(action.get("ms"), "action.ms")
    else:
        _unknown(action, ("type",), "action")
    if kind in GROUP_ACTIONS and api_key is not None and api_key not in GROUP_ACTIONS[kind]:
        raise RuleError("match.api", f"a {kind} action acts on a group request "
                        f"({', '.join(str(k) for k in sorted(GROUP_ACTIONS[kind]))})")

    trigger = _object(rule.get("trigger", {"type": "always"}), "trigger")
    when = trigger.get("type", "always")
    if when not in TRIGGERS:
        raise RuleError("trigger.type", f"expected one of {', '.join(TRIGGERS)}, got {when!r}")
    normalized_trigger: dict[str, Any] = {"type": when}
    if when in ("times", "nth"):
        _unknown(trigger, ("type", "n"), "trigger")
        normalized_trigger["n"] = _int(trigger.get("n"), "trigger.n", 1)
    elif when == "probability":
        _unknown(trigger, ("type", "p", "seed"), "trigger")
        p = trigger.get("p")
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1:
            raise RuleError("trigger.p", f"expected a probability in (0, 1], got {p!r}")
        normalized_trigger["p"] = float(p)
        normalized_trigger["seed"] = _int(trigger.get("seed", 0), "trigger.seed")
    else:
        _unknown(trigger, ("type",), "trigger")
    normalized: dict[str, Any] = {"match": normalized_match, "action": normalized_action,
                                  "trigger": normalized_trigger}
    if "when" in rule:
        normalized["when"] = parse_when(rule["when"], api_key)
    if "for_ms" in rule:
        normalized["for_ms"] = _int(rule["for_ms"], "for_ms", 1)
    return normalized


def parse_when(when: Any, api_key: int | None = None) -> dict[str, Any]:
    """The normalized predicate, or `RuleError` naming its field. With the rule's API known,
    one whose requests name no group is refused: the predicate could never hold."""
    when = _object(when, "when")
    if not when:
        raise RuleError("when", f"expected at least one of {', '.join(WHEN)}")
    _unknown(when, WHEN, "when")
    normalized: dict[str, Any] = {}
    if "group_state" in when:
        if when["group_state"] not in GROUP_STATES:
            raise RuleError("when.group_state", f"expected one of {', '.join(GROUP_STATES)}, "
                            f"got {when['group_state']!r}")
        normalized["group_state"] = when["group_state"]
    if "group_type" in when:
        if when["group_type"] not in GROUP_TYPES:
            raise RuleError("when.group_type", f"expected one of {', '.join(GROUP_TYPES)}, "
                            f"got {when['group_type']!r}")
        normalized["group_type"] = when["group_type"]
    for key in WHEN_INT:
        if key in when:
            normalized[key] = _int(when[key], f"when.{key}")
    for low, high in (("generation_at_least", "generation_at_most"),
                      ("members_at_least", "members_at_most")):
        if low in normalized and high in normalized and normalized[low] > normalized[high]:
            raise RuleError(f"when.{high}", f"{normalized[high]} is below {low} "
                            f"{normalized[low]}: the rule could never match")
    if api_key is not None and api_key not in GROUP_APIS:
        raise RuleError("match.api", f"a rule with `when` needs a request naming a group "
                        f"({', '.join(str(k) for k in sorted(GROUP_APIS))})")
    return normalized


def when_holds(when: dict[str, Any], group: dict[str, Any] | None) -> bool:
    """Does the predicate hold for the group as `TestControl.group` describes it (None: no
    such group)?"""
    if group is None:
        return False
    generation, members = group["generation_id"], len(group["members"])
    return (when.get("group_state", group["state"]) == group["state"]
            and when.get("group_type", group["type"]) == group["type"]
            and generation >= when.get("generation_at_least", generation)
            and generation <= when.get("generation_at_most", generation)
            and members >= when.get("members_at_least", members)
            and members <= when.get("members_at_most", members))
