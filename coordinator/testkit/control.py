"""The Python handle of a broker's test control endpoint (`RebalancedBroker.control`): faults,
virtual time, group waiters and the group's journal events. Plain HTTP, so it drives any
broker started with `test.control.listener`, also one in a container."""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from typing import Any

_POLL_SECONDS = 0.01
# The events that end a rebalance (forensics/journal_pass.py ends it on the same three).
_REBALANCE_ENDS = frozenset({"group_stabilized", "group_empty", "group_dead"})


class ControlError(RuntimeError):
    pass


class Fault:
    """An installed rule: its counts, a waiter and removal."""

    def __init__(self, control: Control, rule: dict[str, Any]) -> None:
        self.control = control
        self.id: int = rule["id"]
        self.rule = rule

    def state(self) -> dict[str, Any]:
        return self.control._call("GET", f"/faults/{self.id}")

    @property
    def hits(self) -> int:
        """How many times the rule's action ran."""
        return int(self.state()["hits"])

    @property
    def matches(self) -> int:
        """How many requests matched the rule's selectors (acted on or not)."""
        return int(self.state()["matches"])

    def wait(self, hits: int = 1, timeout: float = 10.0) -> int:
        """Wait until the action ran at least `hits` times; the count."""
        count = 0
        deadline = time.monotonic() + timeout
        while (count := self.hits) < hits:
            if time.monotonic() > deadline:
                raise TimeoutError(f"fault {self.id} hit {count} times, not {hits}, in "
                                   f"{timeout} s")
            time.sleep(_POLL_SECONDS)
        return count

    def release(self) -> int:
        """Handle the requests a "hold" rule holds now; how many."""
        return int(self.control._call("POST", f"/faults/{self.id}/release", {})["released"])

    def remove(self) -> None:
        """Remove the rule; requests it holds are handled."""
        self.control._call("DELETE", f"/faults/{self.id}", missing_ok=True)

    def __enter__(self) -> Fault:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


class Control:
    def __init__(self, url: str, token: str) -> None:
        parsed = urllib.parse.urlsplit(url)
        try:
            port = parsed.port
        except ValueError:
            port = None
        if parsed.scheme != "http" or not parsed.hostname or port is None:
            raise ValueError(f"not a test control endpoint: {url!r} (expected http://HOST:PORT)")
        self.url = url
        self.host = parsed.hostname
        self.port = port
        self.token = token
        self._connection: http.client.HTTPConnection | None = None

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _call(self, method: str, path: str, body: Any = None, *,
              missing_ok: bool = False, shape: type = dict) -> Any:
        """The endpoint's answer to `method path`: a JSON object (`shape` dict) or array
        (list); anything else means the URL is not a test control endpoint."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        for attempt in (1, 2):
            if self._connection is None:
                self._connection = http.client.HTTPConnection(self.host, self.port, timeout=30)
            try:
                self._connection.request(method, path, body=data, headers=headers)
                response = self._connection.getresponse()
                body_bytes = response.read()
                break
            except (ConnectionError, http.client.HTTPException) as exc:
                self.close()  # a kept-alive connection the broker closed: once more
                if attempt == 2:
                    raise ControlError(f"cannot reach the test control endpoint at {self.url}: "
                                       f"{exc.strerror or exc}" if isinstance(exc, OSError)
                                       else f"{self.url}: {exc!r}") from None
            except OSError as exc:  # timed out, no route, ...
                self.close()
                raise ControlError(f"cannot reach the test control endpoint at {self.url}: "
                                   f"{exc.strerror or exc}") from None
        status = response.status
        try:
            payload = json.loads(body_bytes or b"null")
        except ValueError:
            raise ControlError(f"{self.url} is not a test control endpoint: {method} {path} "
                               f"answered HTTP {status} without JSON") from None
        if status < 300:
            if isinstance(payload, shape):
                return payload
            raise ControlError(f"{self.url} is not a test control endpoint: {method} {path} "
                               f"answered HTTP {status} with {_kind(payload, shape)}")
        if not isinstance(payload, dict) or "error" not in payload:  # the endpoint's errors
            raise ControlError(f"{self.url} is not a test control endpoint: {method} {path} "
                               f"answered HTTP {status} with {_kind(payload, dict)}")
        if status == 400:
            raise ValueError(payload["error"])
        if status == 401:
            raise PermissionError(payload["error"])
        if status == 404 and missing_ok:
            return None
        raise ControlError(f"{method} {path}: {status} {payload['error']}")

    def _field(self, payload: dict[str, Any], name: str, method: str, path: str) -> Any:
        if name not in payload:
            raise ControlError(f"{self.url} is not a test control endpoint: {method} {path} "
                               f"answered without {name!r}")
        return payload[name]

    # faults ---------------------------------------------------------------------------------

    def add_fault(self, rule: dict[str, Any] | None = None, **parts: Any) -> Fault:
        """Install a rule (coordinator/testkit/faults.py): a dict, or its parts as keywords
        (`match=`, `action=`, `trigger=`, `for_ms=`). A malformed rule raises ValueError."""
        spec = dict(rule or {}, **parts)
        answer = self._call("POST", "/faults", spec)
        self._field(answer, "id", "POST", "/faults")
        return Fault(self, answer)

    def faults(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/faults", shape=list))

    def clear_faults(self) -> int:
        return int(self._field(self._call("DELETE", "/faults"), "removed", "DELETE", "/faults"))

    def fail_group_log(self, times: int = 1, op: str = "write") -> None:
        """The broker's next `times` group-log writes (or fsyncs: `op="fsync"`) fail with an
        I/O error. A failed write answers the requests it carried with an error; a failed
        fsync stops the broker (fail-stop), as a real disk error does."""
        self._call("POST", "/grouplog/fail", {"op": op, "times": times})

    # virtual time ---------------------------------------------------------------------------

    def advance(self, ms: int) -> int:
        """Move the broker's clock `ms` ahead: timers due meanwhile fire, in order. Returns
        the broker's time after it."""
        return int(self._call("POST", "/clock/advance", {"ms": ms})["now_ms"])

    def now_ms(self) -> int:
        return int(self._call("GET", "/clock")["now_ms"])

    # groups ---------------------------------------------------------------------------------

    def group(self, group_id: str) -> dict[str, Any] | None:
        """The group (classic or consumer protocol): state, generation, members; None if none."""
        return self._call("GET", f"/groups/{urllib.parse.quote(group_id, safe='')}",
                          missing_ok=True)

    def events(self, group_id: str) -> list[dict[str, Any]]:
        """The group's journal events since the broker started (journal field names)."""
        return list(self._call("GET", f"/groups/{urllib.parse.quote(group_id, safe='')}"
                               "/events", shape=list))

    def expire_member(self, group_id: str, member_id: str) -> None:
        """End the member's session now, as if its session timeout had passed (either
        protocol: a consumer group's member is fenced by its session-expiry path)."""
        self._call("POST", f"/groups/{urllib.parse.quote(group_id, safe='')}/expire",
                   {"member_id": member_id})

    def rebalance(self, group_id: str) -> None:
        """Start a classic group's rebalance now. A consumer-protocol (KIP-848) group has no
        forced rebalance (its assignment moves when members, subscriptions or topics do):
        ControlError."""
        self._call("POST", f"/groups/{urllib.parse.quote(group_id, safe='')}/rebalance", {})

    def wait_for_group(self, group_id: str, *, state: str = "Stable",
                       members: int | None = None, timeout: float = 30.0) -> dict[str, Any]:
        """Wait until the group is in `state` (with `members` members, if given)."""
        deadline = time.monotonic() + timeout
        seen: dict[str, Any] | None = None
        while True:
            seen = self.group(group_id)
            if (seen is not None and seen["state"] == state
                    and (members is None or len(seen["members"]) == members)):
                return seen
            if time.monotonic() > deadline:
                raise TimeoutError(f"group {group_id} not {state} with {members} members in "
                                   f"{timeout} s: {seen}")
            time.sleep(_POLL_SECONDS)

    def _wait_event(self, group_id: str, what: str, wanted: Any, timeout: float,
                    after: int) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            for index, event in enumerate(self.events(group_id)):
                if index >= after and wanted(event):
                    return event
            if time.monotonic() > deadline:
                raise TimeoutError(f"group {group_id}: no {what} in {timeout} s")
            time.sleep(_POLL_SECONDS)

    def wait_for_rebalance(self, group_id: str, *, after_generation: int = -1,
                           timeout: float = 30.0) -> dict[str, Any]:
        """Wait until a rebalance of the group completed (it became Stable) with a generation
        above `after_generation`; the `group_stabilized` event."""
        return self._wait_event(
            group_id, "completed rebalance",
            lambda e: e["event_type"] == "group_stabilized"
            and e.get("generation", e.get("generation_id", -1)) > after_generation,
            timeout, 0)

    def wait_for_member_removed(self, group_id: str, *, member_id: str | None = None,
                                cause: str | None = None,
                                timeout: float = 30.0) -> dict[str, Any]:
        """Wait until a member (any, or `member_id`) was removed (with `cause`: leave,
        session_expiry, rebalance_timeout, fenced, max_size, disconnect; docs/events.md); the
        `member_removed` event."""
        return self._wait_event(
            group_id, f"member removed ({cause or 'any cause'})",
            lambda e: e["event_type"] == "member_removed"
            and (member_id is None or e.get("member_id") == member_id)
            and (cause is None or e.get("cause") == cause), timeout, 0)

    def pauses(self, group_id: str) -> list[int]:
        """Each rebalance's paused time in ms: from `rebalance_started` to the event that ends
        it - `group_stabilized`, or `group_empty` / `group_dead` when the group emptied or was
        deleted in it, as the forensics report and the group page end it (a rebalance still
        running counts up to now)."""
        paused: list[int] = []
        started: int | None = None
        for event in self.events(group_id):
            kind = event["event_type"]
            if kind == "rebalance_started" and started is None:
                started = int(event["ts_ms"])
            elif kind in _REBALANCE_ENDS and started is not None:
                paused.append(int(event["ts_ms"]) - started)
                started = None
        if started is not None:
            paused.append(self.now_ms() - started)
        return paused

    def assert_max_pause(self, group_id: str, ms: int) -> int:
        """Fail (AssertionError) if one of the group's rebalances paused it longer than `ms`;
        the longest pause."""
        pauses = self.pauses(group_id)
        longest = max(pauses, default=0)
        assert longest <= ms, (f"group {group_id} paused {longest} ms (> {ms} ms) in a "
                               f"rebalance; pauses: {pauses}")
        return longest


def _kind(payload: Any, shape: type) -> str:
    """What a JSON answer was, for a one-line error."""
    if payload is None:
        return "no JSON body"
    wanted = "an array" if shape is list else "an object"
    return f"a JSON {type(payload).__name__} where {wanted} was expected"
