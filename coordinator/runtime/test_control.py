"""The test control endpoint (`test.control.listener`): faults, virtual time and group waiters
for test suites, over HTTP with JSON bodies. Off unless configured; the broker then has no
fault table at all, and its request path pays one attribute check (`Broker.faults is None`).

    GET    /faults                 the rules with their matches and hits
    POST   /faults                 add a rule (coordinator/testkit/faults.py) -> {"id": ...}
    GET    /faults/ID              one rule
    POST   /faults/ID/release      handle the requests a "hold" rule holds
    DELETE /faults/ID, /faults     remove one rule, or all (what they hold is handled)
    POST   /grouplog/fail          {"op": "write", "times": 1}: the next group-log writes fail
    POST   /clock/advance          {"ms": 45000}: move the broker's clock; due timers fire in order
    GET    /clock                  {"now_ms": ...}
    GET    /groups/ID              a group's state, generation (a consumer group's epoch), members
    POST   /groups/ID/expire       {"member_id": ...}: the member's session ends now
    POST   /groups/ID/rebalance    start a classic group's rebalance now (409 for a consumer
                                   group: the consumer protocol has no forced rebalance)
    GET    /groups/ID/events       the group's journal events, in memory since the start

Every request carries `Authorization: Bearer <test.control.token>`; a wrong one is 401. Only
loopback peers are served unless `test.control.allow.remote`. A malformed rule is 400 with
the field it names.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import json
import random
import time
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any

import structlog
from kio.schema.errors import ErrorCode

from coordinator.api import find_coordinator, offset_commit
from coordinator.api.context import RequestContext, respond_in_slices
from coordinator.group import offset_commands as oc
from coordinator.group.classic import rebalance as rb
from coordinator.group.consumer.heartbeat import session_key
from coordinator.group.events import journal_record
from coordinator.group.outcomes import error_outcome
from coordinator.group.result import RequestRef
from coordinator.runtime.clock import SystemClock
from coordinator.runtime.groups import _MEMBER_APIS
from coordinator.testkit.faults import RuleError, parse_rule, when_holds
from protocol.build import build
from protocol.codec import RequestHeader, response_type
from protocol.connection import Connection, ResponseSlot
from storage.fs import REAL_FS, FaultyFileSystem

log = structlog.get_logger("rebalanced.test_control")

# Journal events kept per group for the waiters (the oldest go first).
_EVENTS_PER_GROUP = 10_000
_MAX_BODY = 1 << 20


class VirtualClock(SystemClock):
    """The system clock plus an offset that only grows: `advance` makes time pass at once."""

    def __init__(self) -> None:
        self.offset_ms = 0
        super().__init__()

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000 + self.offset_ms

    def now_ms(self) -> int:
        return self.monotonic_ms() + self._epoch_offset_ms

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000 + self.offset_ms


def prepare(broker: Any) -> None:
    """Before the broker starts: its group log is opened through a filesystem that the
    endpoint can make fail (`POST /grouplog/fail`), unless a test's disk fault plan is set."""
    if broker.groups.fs is REAL_FS:
        broker.groups.fs = FaultyFileSystem()


class Rule:
    def __init__(self, rule_id: int, spec: dict[str, Any]) -> None:
        self.id = rule_id
        self.spec = spec
        self.match: dict[str, Any] = spec["match"]
        self.action: dict[str, Any] = spec["action"]
        self.trigger: dict[str, Any] = spec["trigger"]
        self.when: dict[str, Any] | None = spec.get("when")
        self.matches = 0
        self.hits = 0
        self.held: list[tuple[Connection, ResponseSlot, RequestHeader, Any]] = []
        self.random = random.Random(self.trigger.get("seed", 0))
        for_ms = spec.get("for_ms")
        self.until = None if for_ms is None else time.monotonic() + for_ms / 1000

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, **self.spec, "matches": self.matches, "hits": self.hits,
                "held": len(self.held), "active": self.active()}

    def active(self) -> bool:
        if self.until is not None and time.monotonic() > self.until:
            return False
        when = self.trigger["type"]
        if when == "once":
            return self.hits < 1
        if when == "times":
            return self.hits < self.trigger["n"]
        if when == "nth":
            return self.matches < self.trigger["n"]
        return True

    def fires(self) -> bool:
        """Counted as a match; True if the trigger says the action runs this time."""
        self.matches += 1
        when = self.trigger["type"]
        if when == "nth":
            fire = self.matches == self.trigger["n"]
        elif when == "probability":
            fire = self.random.random() < self.trigger["p"]
        else:
            fire = True
        if fire:
            self.hits += 1
        return fire


def _request_facts(connection: Connection, header: RequestHeader, request: Any
                   ) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "api_key": header.api_key, "api_version": header.api_version,
        "client_id": header.client_id or "", "connection": connection.id,
        "group_id": getattr(request, "group_id", None),
        "member_id": getattr(request, "member_id", None),
        "group_instance_id": getattr(request, "group_instance_id", None),
    }
    topics = getattr(request, "topics", None) or ()
    names: set[str] = set()
    partitions: set[int] = set()
    for topic in topics if isinstance(topics, (tuple, list)) else ():
        name = getattr(topic, "name", None) or getattr(topic, "topic", None)
        if isinstance(name, str):
            names.add(name)
        for part in getattr(topic, "partitions", None) or getattr(
                topic, "partition_indexes", None) or ():
            index = part if isinstance(part, int) else getattr(part, "partition_index", None)
            if isinstance(index, int):
                partitions.add(index)
    facts["topic"], facts["partition"] = names, partitions
    return facts


def _matches(rule: Rule, facts: dict[str, Any]) -> bool:
    for key, wanted in rule.match.items():
        have = facts.get(key)
        if isinstance(have, set):
            if wanted not in have:
                return False
        elif have != wanted:
            return False
    return True


class TestControl:
    """The fault table (installed as `broker.faults` while it holds a rule), the journal kept
    in memory, and the HTTP endpoint."""

    __test__ = False  # not a pytest test class

    def __init__(self, broker: Any, clock: VirtualClock, token: str,
                 allow_remote: bool) -> None:
        self.broker = broker
        self.clock = clock
        self.token = token
        self.allow_remote = allow_remote
        self.rules: dict[int, Rule] = {}
        self._next_id = 1
        self._released: set[int] = set()
        self.events: dict[str, deque[dict[str, Any]]] = defaultdict(
            lambda: deque(maxlen=_EVENTS_PER_GROUP))
        self._server: asyncio.AbstractServer | None = None
        self._keep_events()

    # the journal in memory ------------------------------------------------------------------

    def _keep_events(self) -> None:
        journal = self.broker.groups.journal
        write = journal.event

        def event(payload: dict[str, Any], quiet: bool = False) -> None:
            group_id = payload.get("group_id")
            if isinstance(group_id, str):
                record = journal_record(payload, journal.wall_ms())
                record["ts_ms"] = payload.get("ts_ms", record["ts"])
                self.events[group_id].append(record)
            write(payload, quiet)

        journal.event = event

    # faults ---------------------------------------------------------------------------------

    def add(self, spec: Any) -> Rule:
        normalized = parse_rule(spec)
        rule = Rule(self._next_id, normalized)
        self._next_id += 1
        self.rules[rule.id] = rule
        self.broker.faults = self
        log.info("fault rule added", rule_id=rule.id, rule=normalized)
        return rule

    def remove(self, rule_id: int | None) -> int:
        """Remove a rule (or all); the requests they hold are handled now."""
        gone = (list(self.rules.values()) if rule_id is None
                else [r for r in (self.rules.get(rule_id),) if r is not None])
        for rule in gone:
            del self.rules[rule.id]
        if not self.rules:
            self.broker.faults = None
        for rule in gone:
            self.release(rule)
        return len(gone)

    def release(self, rule: Rule) -> int:
        """Handle the requests `rule` holds, in the order they came."""
        held, rule.held = rule.held, []
        for connection, slot, header, request in held:
            self._released.add(id(slot))
            self.broker.handle(connection, slot, header, request)
        return len(held)

    def intercept(self, connection: Connection, slot: ResponseSlot, header: RequestHeader,
                  request: Any) -> bool:
        """Called by `Broker.handle` while a rule is installed: True if the request was
        consumed here (answered with an error, held, dropped or swallowed)."""
        if self._released and id(slot) in self._released:
            self._released.discard(id(slot))
            return False
        facts = _request_facts(connection, header, request)
        for rule in list(self.rules.values()):
            if not rule.active() or not _matches(rule, facts):
                continue
            # The predicate is part of the match: a trigger counts only the requests for
            # which it held.
            if rule.when is not None and not when_holds(rule.when, self._group_of(facts)):
                continue
            if not rule.fires():
                continue
            kind = rule.action["type"]
            if kind == "observe":
                continue
            if kind == "expire_session":
                self._expire(facts["group_id"], facts["member_id"])
                continue
            if kind == "rebalance":
                self._rebalance(facts["group_id"])
                continue
            if kind == "error":
                self._answer_error(connection, slot, header, request,
                                   ErrorCode(rule.action["error_code"]))
            elif kind == "delay":
                self._released.add(id(slot))
                asyncio.get_running_loop().call_later(
                    rule.action["ms"] / 1000, self.broker.handle, connection, slot, header,
                    request)
            elif kind == "hold":
                rule.held.append((connection, slot, header, request))
            elif kind == "drop":
                connection.close()
            # blackhole: the slot is never completed, so nothing after it is answered either
            return True
        return False

    def _answer_error(self, connection: Connection, slot: ResponseSlot, header: RequestHeader,
                      request: Any, error: ErrorCode) -> None:
        ctx = RequestContext(connection, slot, header)
        api_key, version = header.api_key, header.api_version
        ref = RequestRef(connection.id, -1)
        module = _MEMBER_APIS.get(api_key)
        if module is not None:
            command = module.to_command(request, version, ref, ctx.client_id, ctx.client_host)
            ctx.respond(module.to_response(error_outcome(command, error), version))
        elif api_key == offset_commit.API_KEY:
            command = offset_commit.to_command(request, version, ref)
            ctx.respond_raw(offset_commit.encode(oc.OffsetCommitOutcome.failed(command, error),
                                                 version, header.correlation_id))
        elif api_key == find_coordinator.API_KEY:
            ctx.respond(_find_coordinator_error(request, version, error))
        else:
            answer = self.broker._error_answers[api_key]
            respond_in_slices(ctx, answer(ctx, request, error))

    # group actions --------------------------------------------------------------------------

    def group(self, group_id: str) -> dict[str, Any] | None:
        service = self.broker.groups.service
        group = service.group(group_id)
        if group is None:
            consumer = service.consumer.group(group_id)
            if consumer is None:
                return None
            # A consumer-protocol group (KIP-848): its epoch stands for the generation.
            return {"group_id": group_id, "type": "consumer", "state": consumer.state.value,
                    "generation_id": consumer.group_epoch, "protocol": None,
                    "leader_id": None,
                    "members": [{"member_id": m.member_id, "group_instance_id": m.instance_id,
                                 "client_id": m.client_id}
                                for m in consumer.members.values()]}
        return {"group_id": group_id, "type": "classic", "state": group.state.value,
                "generation_id": group.generation_id, "protocol": group.protocol_name,
                "leader_id": group.leader_id,
                "members": [{"member_id": m.member_id,
                             "group_instance_id": m.group_instance_id,
                             "client_id": m.client_id} for m in group.members.values()]}

    def _group_of(self, facts: dict[str, Any]) -> dict[str, Any] | None:
        group_id = facts["group_id"]
        return self.group(group_id) if isinstance(group_id, str) and group_id else None

    def _expire(self, group_id: str | None, member_id: str | None) -> bool:
        """End the member's session now: the session-expiry path of its group's protocol, as
        its deadline passing (a consumer group's member is fenced as by its session timer)."""
        groups = self.broker.groups
        if not group_id or not member_id:
            return False
        now = self.clock.now_ms()
        consumer = groups.service.consumer.group(group_id)
        if consumer is not None:
            if member_id not in consumer.members:
                return False
            consumer.session_deadlines[member_id] = now
            groups.on_timer(session_key(group_id, member_id), now)
            return True
        group = groups.service.group(group_id)
        member = group.members.get(member_id) if group is not None else None
        if member is None:
            return False
        member.session_deadline_ms = now
        groups.on_timer(rb.heartbeat_key(group_id, member_id), now)
        return True

    def _rebalance(self, group_id: str | None) -> bool:
        """Start a classic group's rebalance now. A consumer-protocol group is left alone: its
        coordinator computes a new target assignment only when its members, their
        subscriptions or the topics change, and a new epoch with none of those changed would
        hand every member the partitions it has."""
        groups = self.broker.groups
        if not group_id or groups.service.consumer.group(group_id) is not None:
            return False
        result = groups.service.rebalance_now(
            group_id, "rebalance requested by the test control endpoint", self.clock.now_ms())
        if result is None:
            return False
        groups.applier.apply(result)
        return True

    def _fail_group_log(self, payload: Any) -> tuple[int, Any]:
        """The next `times` group-log writes (`op`: write or fsync) fail with an I/O error, as
        a full or failing disk would make them."""
        fs = self.broker.groups.fs
        if not isinstance(fs, FaultyFileSystem):
            return 409, {"error": "the group log is not on a fault-injecting filesystem"}
        op = payload.get("op", "write")
        if op not in ("write", "fsync"):
            raise RuleError("op", f"expected write or fsync, got {op!r}")
        times = payload.get("times", 1)
        if isinstance(times, bool) or not isinstance(times, int) or times < 1:
            raise RuleError("times", f"expected an integer >= 1, got {times!r}")
        fs.fail_always(op, path="__consumer_offsets", times=times)
        log.warning("group-log failures injected", op=op, times=times)
        return 200, {"op": op, "times": times}

    # virtual time ---------------------------------------------------------------------------

    def advance(self, ms: int) -> int:
        """Move the clock `ms` ahead, firing due timers in deadline order as it goes: a timer
        armed by one that fires (a rebalance timeout after a session expiry) fires too when
        its deadline falls within the advance."""
        broker = self.broker
        target = self.clock.monotonic_ms() + ms
        while True:
            deadline = broker.wheel.next_deadline()
            now = self.clock.now_ms()
            step = None if deadline is None else deadline - now
            remaining = target - self.clock.monotonic_ms()
            if step is None or step > remaining:
                self.clock.offset_ms += max(remaining, 0)
                break
            # The wheel's next deadline is a lower bound (its tick): at least a millisecond a
            # step, so that the loop ends however the timers re-arm.
            self.clock.offset_ms += max(step, 1)
            broker.run_due_timers()
        broker.run_due_timers()
        asyncio.get_running_loop().create_task(broker.groups.expire_offsets())
        return self.clock.now_ms()

    # HTTP -----------------------------------------------------------------------------------

    async def start(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(self._serve, host, port)
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                keep = await self._one(reader, writer)
                if not keep:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError,
                ValueError):
            pass
        finally:
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        line = await reader.readline()
        if not line:
            return False
        method, _, rest = line.decode("latin-1").strip().partition(" ")
        path = rest.partition(" ")[0]
        headers: dict[str, str] = {}
        while True:
            header = (await reader.readline()).decode("latin-1").strip()
            if not header:
                break
            name, _, value = header.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0") or 0)
        if length > _MAX_BODY:
            await self._send(writer, 413, {"error": "body too large"}, False)
            return False
        body = await reader.readexactly(length) if length else b""
        keep = headers.get("connection", "").lower() != "close"
        peer = writer.get_extra_info("peername")
        if not self.allow_remote and not _loopback(peer[0] if peer else ""):
            await self._send(writer, 403, {"error": "the control endpoint serves loopback "
                                           "only (test.control.allow.remote)"}, False)
            return False
        if not hmac.compare_digest(headers.get("authorization", "").encode(),
                                   f"Bearer {self.token}".encode()):
            await self._send(writer, 401, {"error": "wrong or missing token "
                                           "(Authorization: Bearer <test.control.token>)"}, keep)
            return keep
        try:
            payload = json.loads(body) if body else {}
            status, answer = self._route(method, path.split("?")[0], payload)
        except RuleError as exc:
            status, answer = 400, {"error": str(exc), "field": exc.field}
        except (ValueError, KeyError, TypeError) as exc:
            status, answer = 400, {"error": f"bad request: {exc}"}
        await self._send(writer, status, answer, keep)
        return keep

    def _route(self, method: str, path: str, payload: Any) -> tuple[int, Any]:
        parts = [p for p in path.split("/") if p]
        routes: dict[tuple[str, str], Callable[[], tuple[int, Any]]] = {}
        if parts[:1] == ["faults"]:
            rule_id = int(parts[1]) if len(parts) > 1 else None
            routes = {
                ("GET", "list"): lambda: (200, [r.as_dict() for r in self.rules.values()]),
                ("POST", "list"): lambda: (201, self.add(payload).as_dict()),
                ("DELETE", "list"): lambda: (200, {"removed": self.remove(None)}),
                ("GET", "one"): lambda: ((200, self.rules[rule_id].as_dict())
                                         if rule_id in self.rules
                                         else (404, {"error": f"no rule {rule_id}"})),
                ("DELETE", "one"): lambda: ((200, {"removed": 1}) if self.remove(rule_id)
                                            else (404, {"error": f"no rule {rule_id}"})),
            }
            if len(parts) == 3 and parts[2] == "release" and method == "POST":
                rule = self.rules.get(rule_id) if rule_id is not None else None
                return ((200, {"released": self.release(rule)}) if rule is not None
                        else (404, {"error": f"no rule {rule_id}"}))
            handler = routes.get((method, "one" if rule_id is not None else "list"))
        elif parts == ["clock", "advance"] and method == "POST":
            ms = payload.get("ms")
            if isinstance(ms, bool) or not isinstance(ms, int) or ms < 0:
                raise RuleError("ms", f"expected milliseconds >= 0, got {ms!r}")
            return 200, {"now_ms": self.advance(ms)}
        elif parts == ["grouplog", "fail"] and method == "POST":
            return self._fail_group_log(payload)
        elif parts == ["clock"] and method == "GET":
            return 200, {"now_ms": self.clock.now_ms(), "offset_ms": self.clock.offset_ms}
        elif parts[:1] == ["groups"] and len(parts) >= 2:
            return self._group_route(method, parts[1], parts[2:], payload)
        else:
            handler = None
        if handler is None:
            return 404, {"error": f"no such endpoint: {method} {path}"}
        return handler()

    def _group_route(self, method: str, group_id: str, rest: list[str],
                     payload: Any) -> tuple[int, Any]:
        if not rest and method == "GET":
            described = self.group(group_id)
            return (200, described) if described else (404, {"error": "no such group"})
        if rest == ["events"] and method == "GET":
            return 200, list(self.events.get(group_id, ()))
        if rest == ["expire"] and method == "POST":
            member_id = payload.get("member_id")
            if not isinstance(member_id, str):
                raise RuleError("member_id", "required")
            expired = self._expire(group_id, member_id)
            return (200, {"expired": True}) if expired else (404, {"error": "no such member"})
        if rest == ["rebalance"] and method == "POST":
            if self.broker.groups.service.consumer.group(group_id) is not None:
                return 409, {"error": "a consumer-protocol group (KIP-848) has no forced "
                             "rebalance: its target assignment changes when a member joins, "
                             "leaves or changes its subscription, or the topics change; "
                             "expire a member or start one instead"}
            started = self._rebalance(group_id)
            return ((200, {"rebalancing": True}) if started
                    else (409, {"error": "the group has no members or is rebalancing"}))
        return 404, {"error": f"no such endpoint: {method} /groups/{group_id}/..."}

    async def _send(self, writer: asyncio.StreamWriter, status: int, answer: Any,
                    keep: bool) -> None:
        body = json.dumps(answer, default=str).encode()
        reason = {200: "OK", 201: "Created", 400: "Bad Request", 401: "Unauthorized",
                  403: "Forbidden", 404: "Not Found", 409: "Conflict",
                  413: "Payload Too Large"}.get(status, "")
        writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\n"
                     f"Connection: {'keep-alive' if keep else 'close'}\r\n\r\n".encode()
                     + body)
        await writer.drain()


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _find_coordinator_error(request: Any, version: int, error: ErrorCode) -> Any:
    cls = response_type(find_coordinator.API_KEY, version)
    if version >= 4:
        return build(cls, throttle_time=0, coordinators=[
            {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": error}
            for key in request.coordinator_keys])
    return build(cls, throttle_time=0, error_code=error,
                                  error_message=error.name, node_id=-1, host="", port=-1)
