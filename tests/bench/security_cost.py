"""What listener security costs the broker: heartbeat and OffsetCommit CPU over SASL_SSL
against PLAINTEXT, and the CPU of one SCRAM-SHA-256 authentication.

    python -m tests.bench.security_cost --seconds 5 --rounds 2

One broker with a PLAINTEXT, a SASL_PLAINTEXT and a SASL_SSL listener (a throwaway CA, a PEM
keystore, PLAIN and SCRAM-SHA-256 at 4096 iterations). For each protocol, `members` members of
one group join over raw frames (authenticating with PLAIN first on SASL_SSL), then each keeps
one heartbeat (then one OffsetCommit of one partition) in flight for `seconds`; the broker's
CPU (utime + stime from /proc) per request is reported. The load generator runs on uvloop, as
the other benchmarks do (`--client-loop asyncio` for the standard loop, whose TLS costs the
client far more), and `--rate` paces all members to the same request rate for every protocol
(the broker's CPU per request depends on the rate: fewer requests per wake-up cost more each).
Rounds alternate the protocols, and the best round of each is kept (other load on the machine
only adds). The SCRAM figure is the broker CPU of `handshakes` sequential connections on
SASL_PLAINTEXT that each authenticate with SCRAM-SHA-256, minus as many that only send
ApiVersions. Last, `connections` connections per protocol are opened (and authenticated) and
answered once more, and the broker's RSS per connection is reported. `--authorizer` turns the
standard authorizer on (the members are super users: every group request is checked and
allowed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import tempfile
import time
from pathlib import Path
from typing import Any

from scramp import ScramClient

from coordinator.security.scram_store import ScramStore, credential_from_password
from tests.bench import wire
from tests.bench.brokers import ProcStats
from tests.bench.members import Member, encode_offset_commit_v7
from tests.broker_process import BrokerProcess, free_port
from tests.tls_material import Pki

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_bench="bench-secret";')


async def _open(ports: dict[str, int], protocol: str, tls: ssl.SSLContext) -> wire.Connection:
    conn = await wire.Connection.open("127.0.0.1", ports[protocol],
                                      tls=tls if protocol == "SASL_SSL" else None)
    if protocol != "PLAINTEXT":
        assert (await conn.call(17, 1, {"mechanism": "PLAIN"})).error_code.value == 0
        reply = await conn.call(36, 2, {"auth_bytes": b"\0bench\0bench-secret"})
        assert reply.error_code.value == 0
    return conn


async def _closed_loop(send: Any, seconds: float, interval: float = 0.0,
                       work: float = 0.0, phase: float = 0.0) -> int:
    """One request in flight for `seconds`; with an `interval`, no faster than one per it,
    the first `phase` seconds after the start; after each answer `work` seconds of the
    client's CPU spent on nothing."""
    done = 0
    start = time.monotonic() + phase
    stop_at = start + seconds
    while (now := time.monotonic()) < stop_at:
        if interval:
            due = start + done * interval
            if due > now:
                await asyncio.sleep(due - now)
        await send()
        done += 1
        if work:
            busy_until = time.perf_counter() + work
            while time.perf_counter() < busy_until:
                pass
    return done


async def _load(broker: ProcStats, ports: dict[str, int], protocol: str, tls: ssl.SSLContext,
                members: int, seconds: float, round_no: int,
                rate: float = 0.0, work_us: float = 0.0) -> dict[str, float]:
    group = f"bench-{protocol}-{round_no}"
    conns = [await _open(ports, protocol, tls) for _ in range(members)]
    group_members = [Member(conn, group, session_ms=30_000, rebalance_ms=30_000, index=i)
                     for i, conn in enumerate(conns)]
    deadline = time.monotonic() + 60
    await asyncio.gather(*[m.join_and_sync(deadline) for m in group_members])
    result: dict[str, float] = {}
    for kind in ("heartbeat", "commit"):
        if kind == "heartbeat":
            senders = [m.heartbeat for m in group_members]
        else:
            frames = [encode_offset_commit_v7(group, m.generation, m.member_id, "bench",
                                              [(0, 1)]) for m in group_members]

            def commit_sender(conn: wire.Connection, frame: bytearray) -> Any:
                async def send() -> None:
                    await conn.send_raw(frame)
                return send

            senders = [commit_sender(c, f) for c, f in zip(conns, frames, strict=True)]
        cpu_before = broker.cpu_seconds()
        client_before = time.process_time()
        interval = members / rate if rate else 0.0
        # Paced members are spread evenly over the interval: started together, they would
        # send in bursts that the broker serves in one wake-up when the client is fast
        # (PLAINTEXT) and in several when its own TLS spreads them out, which measures the
        # client's speed rather than the broker's cost per request.
        counts = await asyncio.gather(*[
            _closed_loop(s, seconds, interval, work_us / 1e6, index * interval / members)
            for index, s in enumerate(senders)])
        cpu = broker.cpu_seconds() - cpu_before
        client_cpu = time.process_time() - client_before
        total = sum(counts)
        result[f"{kind}_per_s"] = total / seconds
        result[f"{kind}_cpu_us"] = cpu / total * 1e6
        # The load generator's own CPU (with --client-work-us, the work included).
        result[f"{kind}_client_cpu_us"] = client_cpu / total * 1e6
    for conn in conns:
        await conn.close()
    return result


async def _scram_cost(broker: ProcStats, ports: dict[str, int], handshakes: int) -> float:
    async def connect(authenticate: bool) -> None:
        conn = await wire.Connection.open("127.0.0.1", ports["SASL_PLAINTEXT"])
        await wire.api_versions(conn)
        if authenticate:
            await conn.call(17, 1, {"mechanism": "SCRAM-SHA-256"})
            client = ScramClient(["SCRAM-SHA-256"], "bench", "bench-secret")
            first = await conn.call(36, 2, {"auth_bytes": client.get_client_first().encode()})
            client.set_server_first(first.auth_bytes.decode())
            final = await conn.call(36, 2, {"auth_bytes": client.get_client_final().encode()})
            assert final.error_code.value == 0
        await conn.close()

    costs = []
    for authenticate in (False, True):
        before = broker.cpu_seconds()
        for _ in range(handshakes):
            await connect(authenticate)
        costs.append((broker.cpu_seconds() - before) / handshakes)
    return (costs[1] - costs[0]) * 1000


async def _connection_memory(broker: ProcStats, ports: dict[str, int], tls: ssl.SSLContext,
                             count: int) -> dict[str, float]:
    """The broker's RSS per open connection that has authenticated (on SASL_SSL) and been
    answered once more, by protocol: what an idle member's connection holds."""
    per_connection = {}
    for protocol in ("PLAINTEXT", "SASL_SSL"):
        before = broker.rss_bytes()
        conns = [await _open(ports, protocol, tls) for _ in range(count)]
        for conn in conns:
            await wire.api_versions(conn)
        per_connection[f"{protocol.lower()}_kb_per_connection"] = round(
            (broker.rss_bytes() - before) / count / 1024, 1)
        for conn in conns:
            await conn.close()
        await asyncio.sleep(0.5)
    return per_connection


async def run(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="security-cost-"))
    pki = Pki.create(root / "pki")
    server_pem = pki.issue("server", server=True, CN="localhost")
    ScramStore(root / "data").write({"bench": {"SCRAM-SHA-256": credential_from_password(
        "SCRAM-SHA-256", "bench-secret", 4096)}})
    ports = {name: free_port() for name in ("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL")}
    broker = BrokerProcess(root / "data", port=ports["PLAINTEXT"], settings={
        "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "ssl.keystore.location": str(server_pem),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        "offsets.commit.fsync": "100",
        **({"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS;User:bench"} if args.authorizer else {}),
    }).start()
    assert broker.proc is not None
    stats = ProcStats(broker.proc.pid)
    tls = ssl.create_default_context(cafile=str(pki.ca_path))
    try:
        setup = await wire.Connection.open("127.0.0.1", ports["PLAINTEXT"])
        await wire.group_log_loaded(setup)
        await setup.call(19, 4, {"topics": [{"name": "bench", "num_partitions": 1,
                                             "replication_factor": 1, "assignments": [],
                                             "configs": []}], "timeout": 5000})
        await setup.close()
        best: dict[str, dict[str, float]] = {}
        for round_no in range(args.rounds):
            for protocol in ("PLAINTEXT", "SASL_SSL"):
                figures = await _load(stats, ports, protocol, tls, args.members, args.seconds,
                                      round_no, args.rate,
                                      args.client_work_us if protocol == "PLAINTEXT" else 0.0)
                kept = best.setdefault(protocol, figures)
                for key, value in figures.items():
                    kept[key] = (min(kept[key], value) if key.endswith("_us")
                                 else max(kept[key], value))
        scram_ms = await _scram_cost(stats, ports, args.handshakes)
        memory = (await _connection_memory(stats, ports, tls, args.connections)
                  if args.connections else {})
    finally:
        broker.stop()
    ratios = {f"{kind}_cpu_ratio": round(best["SASL_SSL"][f"{kind}_cpu_us"]
                                         / best["PLAINTEXT"][f"{kind}_cpu_us"], 2)
              for kind in ("heartbeat", "commit")}
    return {"best": {p: {k: round(v, 1) for k, v in f.items()} for p, f in best.items()},
            **ratios, "scram_sha_256_4096_broker_cpu_ms": round(scram_ms, 2),
            **({"rss": memory} if memory else {})}


def gate_cost(repeat: int = 5, number: int = 200_000) -> dict[str, float]:
    """The authorizer's cost per request alone: the checked Heartbeat (READ GROUP) and
    OffsetCommit (READ GROUP, READ TOPIC of one topic) handlers that do nothing, against the
    bare one (best of `repeat`), with PREFIXED and LITERAL ALLOW bindings."""
    import timeit

    from coordinator.security.acls import AclBinding, AclStore, Authorizer, Operation
    from coordinator.security.authorization import GroupGate, _offset_commit_topics, _single

    class Connection:
        principal = "User:alice"
        client_host = "/127.0.0.1"

    class Context:
        connection = Connection()
        client_host = "/127.0.0.1"
        version = 7

    class Topic:
        name = "bench"
        partitions = ()

    class Request:
        group_id = "billing-1"
        topics = (Topic(),)

    store = AclStore(Path(tempfile.mkdtemp(prefix="acl-cost-")))
    store.replace([AclBinding(3, "billing-", 4, "User:alice", "*", 3, 3),
                   AclBinding(2, "bench", 3, "User:alice", "*", 3, 3)])
    gate = GroupGate(Authorizer(store, (), False))

    def bare(ctx: Any, request: Any) -> None:
        return None

    ctx, request = Context(), Request()

    def best_us(handler: Any) -> float:
        def call() -> None:
            handler(ctx, request)

        return min(timeit.repeat(call, number=number, repeat=repeat)) / number * 1e6

    base = best_us(bare)
    return {"heartbeat_check_us": round(best_us(_single(gate, 12, Operation.READ, bare))
                                        - base, 3),
            "commit_check_us": round(best_us(_offset_commit_topics(gate, bare)) - base, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--handshakes", type=int, default=50)
    parser.add_argument("--connections", type=int, default=500,
                        help="then open this many connections on each protocol and report the "
                             "broker's RSS per connection (0: skip)")
    parser.add_argument("--rate", type=float, default=0.0,
                        help="requests per second of all members together (default: as fast "
                             "as each member's one request in flight goes)")
    parser.add_argument("--client-work-us", type=float, default=0.0,
                        help="on PLAINTEXT, the load generator spends this much CPU after each "
                             "answer (what a TLS client spends on its records), to see how the "
                             "client's own cost moves the broker's figure on a shared machine")
    parser.add_argument("--client-loop", choices=("uvloop", "asyncio"), default="uvloop",
                        help="the load generator's event loop")
    parser.add_argument("--authorizer", action="store_true",
                        help="with the standard authorizer (every group request checked)")
    parser.add_argument("--gate-only", action="store_true",
                        help="only time the authorizer's check of one group request")
    args = parser.parse_args(argv)
    if args.gate_only:
        print(json.dumps(gate_cost(), indent=1))
        return 0
    if args.client_loop == "uvloop":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            print(json.dumps(runner.run(run(args)), indent=1))
    else:
        print(json.dumps(asyncio.run(run(args)), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
