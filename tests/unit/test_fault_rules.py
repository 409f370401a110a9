"""The test control's rule format: normalized, or refused naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.testkit.faults import RuleError, parse_rule


def test_a_rule_is_normalized() -> None:
    rule = parse_rule({"match": {"api": "Heartbeat", "group_id": "g", "partition": 0},
                       "action": {"type": "error", "error_code": "REBALANCE_IN_PROGRESS"},
                       "trigger": {"type": "probability", "p": 0.5, "seed": 3},
                       "for_ms": 100})
    assert rule == {"match": {"api_key": 12, "group_id": "g", "partition": 0},
                    "action": {"type": "error", "error_code": 27},
                    "trigger": {"type": "probability", "p": 0.5, "seed": 3}, "for_ms": 100}
    assert parse_rule({"action": {"type": "observe"}})["trigger"] == {"type": "always"}


@pytest.mark.parametrize(("rule", "field"), [
    ([], "rule"),
    ({"match": {}}, "action"),
    ({"action": {"type": "explode"}}, "action.type"),
    ({"match": {"api": "Nope"}, "action": {"type": "drop"}}, "match.api"),
    ({"match": {"colour": "red"}, "action": {"type": "drop"}}, "match.colour"),
    ({"match": {"group_id": 7}, "action": {"type": "drop"}}, "match.group_id"),
    ({"match": {"api": 12}, "action": {"type": "error"}}, "action.error_code"),
    ({"match": {"api": 12}, "action": {"type": "error", "error_code": 99999}},
     "action.error_code"),
    ({"action": {"type": "error", "error_code": 27}}, "match.api"),
    ({"match": {"api": "Produce"}, "action": {"type": "error", "error_code": 27}},
     "match.api"),
    ({"match": {"api": "Metadata"}, "action": {"type": "rebalance"}}, "match.api"),
    ({"action": {"type": "delay"}}, "action.ms"),
    ({"action": {"type": "drop"}, "trigger": {"type": "nth", "n": 0}}, "trigger.n"),
    ({"action": {"type": "drop"}, "trigger": {"type": "probability", "p": 2}}, "trigger.p"),
    ({"action": {"type": "drop"}, "for_ms": 0}, "for_ms"),
    ({"action": {"type": "drop"}, "when": "always"}, "when"),
])
def test_a_malformed_rule_names_its_field(rule: Any, field: str) -> None:
    with pytest.raises(RuleError) as raised:
        parse_rule(rule)
    assert raised.value.field == field
    assert isinstance(raised.value, ValueError)


def test_a_predicate_is_normalized_and_evaluated_against_the_group() -> None:
    from coordinator.testkit.faults import when_holds

    rule = parse_rule({"match": {"api": "Heartbeat"}, "action": {"type": "observe"},
                       "when": {"group_state": "Stable", "generation_at_least": 3,
                                "members_at_least": 2}})
    when = rule["when"]
    assert when == {"group_state": "Stable", "generation_at_least": 3, "members_at_least": 2}

    def group(state: str, generation: int, members: int) -> dict[str, Any]:
        return {"type": "classic", "state": state, "generation_id": generation,
                "members": [{"member_id": str(i)} for i in range(members)]}

    assert when_holds(when, group("Stable", 3, 2))
    assert not when_holds(when, group("Stable", 2, 2))
    assert not when_holds(when, group("Stable", 3, 1))
    assert not when_holds(when, group("PreparingRebalance", 4, 2))
    assert not when_holds(when, None)  # no such group
    assert when_holds({"group_type": "consumer", "members_at_most": 0},
                      {**group("Empty", 5, 0), "type": "consumer"})


@pytest.mark.parametrize(("rule", "field"), [
    ({"action": {"type": "drop"}, "when": {}}, "when"),
    ({"action": {"type": "drop"}, "when": {"colour": "red"}}, "when.colour"),
    ({"action": {"type": "drop"}, "when": {"group_state": "Sleeping"}}, "when.group_state"),
    ({"action": {"type": "drop"}, "when": {"group_type": "share"}}, "when.group_type"),
    ({"action": {"type": "drop"}, "when": {"members_at_least": -1}}, "when.members_at_least"),
    ({"action": {"type": "drop"}, "when": {"generation_at_least": "3"}},
     "when.generation_at_least"),
    # Rules that could never match are refused, not kept.
    ({"action": {"type": "drop"}, "when": {"members_at_least": 3, "members_at_most": 2}},
     "when.members_at_most"),
    ({"match": {"api": "Metadata"}, "action": {"type": "drop"},
      "when": {"group_state": "Stable"}}, "match.api"),
    ({"match": {"api": "ConsumerGroupHeartbeat"}, "action": {"type": "rebalance"}},
     "match.api"),
])
def test_a_malformed_predicate_names_its_field(rule: Any, field: str) -> None:
    with pytest.raises(RuleError) as raised:
        parse_rule(rule)
    assert raised.value.field == field


def test_a_consumer_heartbeat_can_expire_its_member() -> None:
    rule = parse_rule({"match": {"api": "ConsumerGroupHeartbeat"},
                       "action": {"type": "expire_session"}})
    assert rule["match"] == {"api_key": 68}
