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
