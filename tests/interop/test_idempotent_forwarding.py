"""Forwarded mutations are applied once (issue 25, item 1): the cluster's writer is killed with
SIGKILL again and again (IDEMPOTENT_KILLS, default 50; restarted each time) while client threads
send CreateDelegationToken, RenewDelegationToken and CreateAcls through followers.

A writer killed after applying a mutation and before answering makes the follower retry it on the
next writer; without the request ids that retry created a second token. Each create names a renewer
of its own (`User:<prefix>-<client>-<n>`), so every token in the cluster is attributable to one
attempt. At the end, through a node: every acknowledged token exists exactly once (with the id the
client was given), no attempt has two tokens, every acknowledged ACL exists.

The clients speak the wire protocol with the suite's `kafka_wire.Conn` (no Python client has the
delegation-token APIs; Kafka's CLI is a JVM per call): v1 requests, PLAIN logins, one connection
per client, re-opened on another follower when its node goes away.
"""

from __future__ import annotations

import os
import random
import re
import struct
import threading
import time
from collections import Counter

import pytest
from confluent_kafka.admin import (AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType)

from cluster_support import Cluster, admin_conf, start_cluster, wait_for, wait_started
from conftest import PORTCULLIS_USERS
from kafka_wire import Closed, Conn, byte_array, string

pytestmark = [pytest.mark.portcullis_only, pytest.mark.long]

KILLS = int(os.environ.get("IDEMPOTENT_KILLS", "50"))
CLIENTS = 6
CREATE_TOKEN, RENEW_TOKEN, DESCRIBE_TOKENS, CREATE_ACLS = 38, 39, 41, 30
# Longer than the followers' forward timeout (30 s): the follower answers first.
CLIENT_TIMEOUT = 45.0


class Shared:
    """What the main thread tells the clients: which node writes (clients avoid it)."""

    def __init__(self, n: int):
        self.lock = threading.Lock()
        self.writer = 0
        self.n = n

    def follower(self) -> int:
        with self.lock:
            choices = [i for i in range(self.n) if i != self.writer]
        return random.choice(choices)


class Client(threading.Thread):
    def __init__(self, cluster: Cluster, shared: Shared, index: int, prefix: str, stop: threading.Event):
        super().__init__(name=f"idempotent-client-{index}", daemon=True)
        self.cluster, self.shared, self.index, self.prefix, self.stop = cluster, shared, index, prefix, stop
        self.attempted: list[str] = []  # renewers of every create sent
        self.tokens: dict[str, str] = {}  # acknowledged creates: renewer -> token id
        self.renewed = 0
        self.acls: list[str] = []  # acknowledged ACL topics
        self.timeouts = 0  # answers with REQUEST_TIMED_OUT (outcome unknown)
        self.conn: Conn | None = None

    def connect(self) -> Conn:
        if self.conn is None:
            node = self.cluster.nodes[self.shared.follower()]
            conn = Conn("127.0.0.1", node.listener_port, timeout=CLIENT_TIMEOUT)
            try:
                conn.authenticate_plain("alice", PORTCULLIS_USERS["alice"])
            except BaseException:
                conn.close()
                raise
            self.conn = conn
        return self.conn

    def drop(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            try:
                self.cycle(n)
            except (Closed, OSError, AssertionError, ValueError):
                # Its node went away (or is not up yet): nothing in flight was acknowledged.
                self.drop()
                time.sleep(0.1)
        self.drop()

    def cycle(self, n: int) -> None:
        renewer = f"{self.prefix}-{self.index}-{n}"
        self.attempted.append(renewer)
        r = self.connect().call(CREATE_TOKEN, 1, struct.pack(">i", 1) + string("User") + string(renewer)
                                + struct.pack(">q", -1))
        error = r.int16()
        r.string(), r.string(), r.int64(), r.int64(), r.int64()
        token_id, hmac = r.string(), r.bytes_()
        if error == 0:
            self.tokens[renewer] = token_id
            renewed = self.connect().call(RENEW_TOKEN, 1, byte_array(hmac) + struct.pack(">q", 3_600_000))
            if renewed.int16() == 0:
                self.renewed += 1
        elif error == 7:
            self.timeouts += 1
        creation = (struct.pack(">i", 1) + struct.pack(">b", 2) + string(renewer) + struct.pack(">b", 3)
                    + string(f"User:{renewer}") + string("*") + struct.pack(">bb", 3, 3))
        r = self.connect().call(CREATE_ACLS, 1, creation)
        r.int32()  # throttle
        results = r.array(lambda x: (x.int16(), x.string()))
        if results and results[0][0] == 0:
            self.acls.append(renewer)


def writer_term(cluster: Cluster) -> tuple[int, int] | None:
    """(node index, term) of the writer `cluster status` names, if any."""
    first = cluster.status().splitlines()[0]
    m = re.search(r"writer: node (\d+) at \S+ \(term (\d+)\)", first)
    return (int(m.group(1)) - 1, int(m.group(2))) if m else None


def tokens_by_renewer(cluster: Cluster, node: int) -> dict[str, list[str]]:
    """Every token of the cluster (alice is a super user: Describe shows her all), by renewer."""
    with Conn("127.0.0.1", cluster.nodes[node].listener_port, timeout=60) as conn:
        conn.authenticate_plain("alice", PORTCULLIS_USERS["alice"])
        r = conn.call(DESCRIBE_TOKENS, 1, struct.pack(">i", -1))
        assert r.int16() == 0

        def token(x):
            x.string(), x.string(), x.int64(), x.int64(), x.int64()
            token_id = x.string()
            x.bytes_()
            renewers = x.array(lambda y: (y.string(), y.string()))
            return token_id, renewers

        found: dict[str, list[str]] = {}
        for token_id, renewers in r.array(token):
            for _, name in renewers:
                found.setdefault(name, []).append(token_id)
        return found


def test_killing_the_writer_50_times_never_applies_a_forwarded_mutation_twice(launcher, unique):
    started = time.monotonic()
    cluster = start_cluster(launcher, "idem", 3)
    prefix = unique("idem")
    shared = Shared(3)
    shared.writer, term = writer_term_within(cluster, None)
    stop = threading.Event()
    clients = [Client(cluster, shared, i, prefix, stop) for i in range(CLIENTS)]
    for c in clients:
        c.start()
    kills = 0
    try:
        for _ in range(KILLS):
            # Writes flow again (through the new writer) before the next kill.
            before = acknowledged(clients)
            wait_for("writes acknowledged since the last kill", lambda: acknowledged(clients) > before + 5, 90, 0.02)
            # Somewhere in a mutation's path: deciding, appending, recording the answer, answering.
            time.sleep(random.uniform(0.0, 0.4))
            victim = cluster.nodes[shared.writer]
            victim.stopping = True
            victim.proc.kill()
            victim.proc.wait(timeout=30)
            kills += 1
            victim.stopping = False
            victim.start(wait=False)
            writer, term = writer_term_within(cluster, term)
            with shared.lock:
                shared.writer = writer
            wait_started(victim)
        time.sleep(1.0)
    finally:
        stop.set()
        for c in clients:
            c.join(timeout=CLIENT_TIMEOUT + 15)
    assert all(not c.is_alive() for c in clients), "a client is still waiting for an answer"
    check(cluster, clients, prefix, kills, started)


def writer_term_within(cluster: Cluster, after: int | None, timeout: float = 60.0) -> tuple[int, int]:
    """The writer with a term after `after` (a new activation), within `timeout` seconds."""
    found, _ = wait_for("a new writer", lambda: (lambda w: w if w and (after is None or w[1] > after) else None)(
        writer_term(cluster)), timeout, 0.2)
    return found


def acknowledged(clients: list[Client]) -> int:
    return sum(len(c.tokens) + len(c.acls) for c in clients)


def check(cluster: Cluster, clients: list[Client], prefix: str, kills: int, started: float) -> None:
    attempted = [r for c in clients for r in c.attempted]
    acked = {r: t for c in clients for r, t in c.tokens.items()}
    acked_acls = [t for c in clients for t in c.acls]
    node = writer_term_within(cluster, None)[0]
    # Every node follows the log; the one asked has applied what the writer acknowledged once it
    # answers a write of its own after the clients stopped.
    found, _ = wait_for("every acknowledged token described",
                        lambda: (lambda f: f if all(r in f for r in acked) else None)(tokens_by_renewer(cluster, node)),
                        30, 0.5)
    ours = {r: ids for r, ids in found.items() if r.startswith(prefix)}
    duplicates = {r: ids for r, ids in ours.items() if len(ids) > 1}
    wrong = {r: (t, ours.get(r)) for r, t in acked.items() if ours.get(r) != [t]}
    unattributed = sorted(set(ours) - set(attempted))
    unacknowledged_applied = [r for r in ours if r not in acked]
    everything = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    admin = AdminClient(admin_conf(cluster.nodes[node]))
    bindings = admin.describe_acls(everything, request_timeout=60).result(timeout=90)
    acl_counts = Counter(b.name for b in bindings if b.name.startswith(prefix))
    missing_acls = [t for t in acked_acls if acl_counts[t] != 1]
    took = time.monotonic() - started
    print(f"{kills} kills in {took:.0f}s; {len(attempted)} creates sent, {len(acked)} acknowledged "
          f"({sum(c.renewed for c in clients)} renewed), {sum(c.timeouts for c in clients)} answered "
          f"REQUEST_TIMED_OUT, {len(unacknowledged_applied)} applied without an acknowledgement; "
          f"{len(acked_acls)} ACLs acknowledged; duplicates: {len(duplicates)} tokens, "
          f"{len(missing_acls)} ACLs missing")
    assert kills == KILLS
    assert acked and acked_acls, "nothing was acknowledged"
    assert not duplicates, f"{len(duplicates)} creates applied twice: {list(duplicates.items())[:5]}"
    assert not wrong, f"acknowledged tokens missing or different: {list(wrong.items())[:5]}"
    assert not unattributed, unattributed[:5]
    assert not missing_acls, missing_acls[:5]
