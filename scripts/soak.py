"""The soak of issue 25, driven by scripts/soak.sh (which starts Kafka and provides the binary).

Starts a cluster of Portcullis nodes on the kafka store (every client session re-authenticates
every 10 s: `connections_max_reauth_ms = 10000`), then for the whole run keeps up, all at once:

- confluent-kafka (librdkafka) idempotent producers, one per node, unique keys, acks=all;
- a confluent-kafka consumer group, one member per node;
- a kafka-python idempotent producer (a client without KIP-368 re-authentication: Portcullis
  closes its connection at the end of every session and it reconnects);
- an admin loop over the nodes: CreateAcls/DescribeAcls/DeleteAcls, DescribeConfigs, ListTopics
  (Metadata), AlterUserScramCredentials on a fixed set of users;
- a token loop over the nodes: CreateDelegationToken, a confluent-kafka producer logged in with
  the token over SCRAM, ExpireDelegationToken, and a check that the token no longer logs in;
- every FAILOVER minutes the current writer is killed (SIGKILL and SIGTERM in turn) and started
  again once another node has taken over.

Every 10 s it samples each node's RSS (/proc/PID/status VmRSS), open fds (/proc/PID/fd) and
security counters (its Prometheus endpoint) into samples.csv. At the end it checks, and exits 1
naming each failed check:
- every acknowledged record is in the topic exactly once (a fresh read of every partition), and
  the consumer group saw every one of them;
- 0 client errors: a failed delivery, a fatal client error, an authentication refused to a client
  that should get in, an admin or token call that still failed after retrying for RETRY_FOR s (a
  failover makes calls through the killed node, or forwarded to the dead writer, fail for a few
  seconds: a call retried successfully within that time is not an error);
- every node re-authenticated sessions all the time and none failed;
- RSS and open fds flat (±10 %): the median of the last 5 minutes vs the median of minutes 2-5
  (shorter runs scale these windows), compared by role over all nodes (the writer holds more
  connections than a follower, and it is a new process after every failover), and per process for
  every stretch one process held one role long enough;
- no ERROR line or panic in any node's log.

  python scripts/soak.py --minutes 30 --nodes 3 --failover-every 5 --run-dir DIR --out DIR
"""

from __future__ import annotations

import argparse
import base64
import csv
import os
import signal
import statistics
import struct
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "interop"))

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,  # noqa: E402
                                   AdminClient, ConfigResource, NewTopic, ResourcePatternType, ResourceType,
                                   ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion)

from cluster_support import Cluster, cluster_tls, node_principal, store_sections, wait_started  # noqa: E402
from conftest import PORTCULLIS_USERS, Launcher, PortcullisProcess, free_ports, toml_str  # noqa: E402
from kafka_wire import Conn, byte_array  # noqa: E402
from prometheus import COUNTERS, MetricsEndpoint, scrape, total  # noqa: E402

REAUTH_MS = 10_000
TOPIC = "soak-data"
PARTITIONS = 6
GROUP = "soak-group"
RETRY_FOR = 60.0          # seconds an admin or token call may keep failing across a failover
SAMPLE_EVERY = 10.0       # seconds between RSS/fd samples
FLAT_WITHIN = 0.10        # ±10 %
USER = "alice"            # a super user of the cluster (start_cluster's convention)
SCRAM_USERS = [f"soak-scram-{i}" for i in range(5)]  # a fixed set, so the state does not grow
API_CREATE_TOKEN, API_EXPIRE_TOKEN = 38, 40


# --------------------------------------------------------------------------------------------------
# What the run observed


@dataclass
class Ledger:
    """Errors and counts from every thread (one lock: the rates are low)."""
    started: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)
    errors: list[str] = field(default_factory=list)
    transient: Counter = field(default_factory=Counter)  # retried/reconnected, not errors
    counts: Counter = field(default_factory=Counter)
    acked: dict[str, bytes] = field(default_factory=dict)  # key -> value, acknowledged
    failovers: list[str] = field(default_factory=list)

    def now(self) -> float:
        return time.monotonic() - self.started

    def error(self, what: str) -> None:
        with self.lock:
            self.errors.append(f"t={self.now():.0f}s {what}")
        print(f"ERROR t={self.now():.0f}s {what}", flush=True)

    def count(self, what: str, n: int = 1) -> None:
        with self.lock:
            self.counts[what] += n

    def retried(self, what: str) -> None:
        with self.lock:
            self.transient[what] += 1

    def ack(self, key: str, value: bytes) -> None:
        with self.lock:
            self.acked[key] = value


def value_for(key: str) -> bytes:
    """Values derived from keys, so a record delivered under the wrong key is caught."""
    return f"{key}|{'v' * 60}|{key[::-1]}".encode()


# --------------------------------------------------------------------------------------------------
# The cluster (start_cluster's layout, plus re-authentication, metrics and librdkafka token logins)


@dataclass
class SoakCluster:
    cluster: Cluster
    metrics: list[MetricsEndpoint]

    @property
    def nodes(self) -> list[PortcullisProcess]:
        return self.cluster.nodes


def start_soak_cluster(launcher: Launcher, n: int) -> SoakCluster:
    """As cluster_support.start_cluster, with three additions it has no parameters for: a session
    lifetime of REAUTH_MS, a Prometheus endpoint per node, and token logins without the `tokenauth`
    extension (librdkafka cannot send it)."""
    tls = cluster_tls(launcher.run_dir)
    cluster_id = f"soak-{os.getpid()}-{time.time_ns() % 10**10}"
    cluster_ports = free_ports(n)
    metrics_ports = free_ports(n)
    super_users = ["User:alice"] + [node_principal(f"{cluster_id}-node-{i + 1}") for i in range(n)]
    nodes, metrics = [], []
    for i in range(n):
        workdir = launcher.run_dir / f"portcullis-soak-{i + 1}"
        (workdir / "plugins").mkdir(parents=True)
        p = PortcullisProcess(launcher.binary, workdir, f"soak-{i + 1}")
        p.write_config(upstream={"bootstrap_servers": [launcher.kafka["KAFKA_BOOTSTRAP"]],
                                 "security_protocol": "PLAINTEXT"}, tls=None, plugin_dir=workdir / "plugins")
        text = p.config.read_text()
        for old, new in (("\nid = 1\n", f"\nid = {i + 1}\n"),
                         ("\n[listener]\n", f"\n[listener]\nconnections_max_reauth_ms = {REAUTH_MS}\n")):
            if text.count(old) != 1:
                raise RuntimeError(f"unexpected config layout in {p.config}: {old!r}")
            text = text.replace(old, new, 1)
        text += store_sections(tls, cluster_id=cluster_id, node_name=f"{cluster_id}-node-{i + 1}",
                               listener_port=cluster_ports[i])
        text += ("\n[authorizer]\nplugin = \"acl\"\n"
                 f"super_users = [{', '.join(toml_str(u) for u in super_users)}]\n"
                 "allow_everyone_if_no_acl_found = false\n"
                 "\n[delegation_tokens]\nsecret = \"soak-token-secret\"\n"
                 "accept_token_without_extension = true\n"
                 f"\n[telemetry]\nprometheus_address = {toml_str(f'127.0.0.1:{metrics_ports[i]}')}\n")
        p.config.write_text(text)
        p.config.chmod(0o600)  # it holds the token secret
        nodes.append(p)
        metrics.append(MetricsEndpoint(f"127.0.0.1:{metrics_ports[i]}"))
    for user, password in PORTCULLIS_USERS.items():  # into the cluster's topic, before any node starts
        nodes[0].scram_add(user, password, "SCRAM-SHA-512")
        nodes[0].scram_add(user, password, "SCRAM-SHA-256")
    for p in nodes:
        p.start(wait=False)
        launcher.processes.append(p)
    for p in nodes:
        wait_started(p)
    cluster = Cluster(nodes, cluster_id, f"__portcullis_{cluster_id}", tls, cluster_ports)
    return SoakCluster(cluster, metrics)


def client_conf(node: PortcullisProcess, user: str = USER, password: str | None = None,
                mechanism: str = "SCRAM-SHA-512", **extra) -> dict:
    return {"bootstrap.servers": node.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user,
            "sasl.password": PORTCULLIS_USERS[user] if password is None else password,
            "log_level": 2, **extra}


def refused_login(err: KafkaError) -> bool:
    """A login Portcullis refused. librdkafka also reports a connection lost during the SASL
    exchange as _AUTHENTICATION ("... handshake failed: Local: Broker transport failure"), which
    happens when a node is killed mid-login: that one it retries, like any lost connection. (The
    node logs tell a refusal apart for certain: scan_logs.)"""
    return err.code() == KafkaError._AUTHENTICATION and "transport failure" not in err.str()


def error_cb(ledger: Ledger, who: str):
    """librdkafka's error callback: fatal errors and refused logins are errors; the rest (a broker
    down during a failover, a connection closed) librdkafka recovers from by itself."""
    def on_error(err: KafkaError) -> None:
        if err.fatal() or refused_login(err):
            ledger.error(f"{who}: {err}")
        else:
            ledger.retried(f"{who}: {err.name()}")
    return on_error


# --------------------------------------------------------------------------------------------------
# Data path


class Stoppable(threading.Thread):
    def __init__(self, name: str, ledger: Ledger):
        super().__init__(name=name, daemon=True)
        self.ledger = ledger
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            self.loop()
        except Exception as e:  # noqa: BLE001 - a worker that dies is an error of the run
            self.ledger.error(f"{self.name} died: {e!r}")

    def loop(self) -> None:
        raise NotImplementedError


class ConfluentProducer(Stoppable):
    """An idempotent librdkafka producer through one node, RATE records a second."""

    def __init__(self, node: PortcullisProcess, index: int, ledger: Ledger, rate: int):
        super().__init__(f"producer-{index}", ledger)
        self.node, self.index, self.rate = node, index, rate

    def loop(self) -> None:
        p = Producer(client_conf(self.node, **{"enable.idempotence": True, "acks": "all", "linger.ms": 20,
                                               "error_cb": error_cb(self.ledger, self.name)}))
        seq = 0
        while not self.stop.is_set():
            tick = time.monotonic()
            for _ in range(self.rate):
                seq += 1
                key = f"c{self.index}-{seq}"
                p.produce(TOPIC, key=key.encode(), value=value_for(key), on_delivery=self.delivered)
            p.poll(0)
            self.stop.wait(max(0.0, 1.0 - (time.monotonic() - tick)))
        left = p.flush(300)  # librdkafka's message.timeout.ms (300 s) bounds the retries anyway
        if left:
            self.ledger.error(f"{self.name}: {left} records not delivered at the end")

    def delivered(self, err, msg) -> None:
        if err is not None:
            self.ledger.error(f"{self.name}: delivery failed: {err}")
        else:
            self.ledger.ack(msg.key().decode(), msg.value())
            self.ledger.count("records acknowledged (confluent-kafka)")


class KafkaPythonProducer(Stoppable):
    """kafka-python's idempotent producer: it never re-authenticates, so Portcullis closes its
    connection when the session ends (every 10 s) and it reconnects and retries."""

    def __init__(self, node: PortcullisProcess, ledger: Ledger, rate: int):
        super().__init__("kafka-python-producer", ledger)
        self.node, self.rate = node, rate

    def loop(self) -> None:
        from kafka import KafkaProducer  # noqa: PLC0415 - only this thread uses kafka-python
        p = KafkaProducer(bootstrap_servers=self.node.bootstrap, security_protocol="SASL_PLAINTEXT",
                          sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=USER,
                          sasl_plain_password=PORTCULLIS_USERS[USER], enable_idempotence=True, acks="all",
                          retries=2**31 - 1, delivery_timeout_ms=300_000, request_timeout_ms=20_000,
                          linger_ms=20)
        seq = 0
        while not self.stop.is_set():
            tick = time.monotonic()
            for _ in range(self.rate):
                seq += 1
                key = f"kp-{seq}"
                f = p.send(TOPIC, key=key.encode(), value=value_for(key))
                f.add_callback(self.delivered, key).add_errback(self.failed, key)
            self.stop.wait(max(0.0, 1.0 - (time.monotonic() - tick)))
        p.flush(timeout=300)
        p.close(timeout=30)

    def delivered(self, key: str, _metadata) -> None:
        self.ledger.ack(key, value_for(key))
        self.ledger.count("records acknowledged (kafka-python)")

    def failed(self, key: str, exc) -> None:
        self.ledger.error(f"{self.name}: delivery of {key} failed: {exc!r}")


class GroupConsumer(Stoppable):
    """One member of the consumer group, through one node; counts every key it reads."""

    def __init__(self, node: PortcullisProcess, index: int, ledger: Ledger):
        super().__init__(f"consumer-{index}", ledger)
        self.node = node
        self.seen: Counter = Counter()
        self.lock = threading.Lock()

    def loop(self) -> None:
        c = Consumer(client_conf(self.node, **{"group.id": GROUP, "auto.offset.reset": "earliest",
                                               "error_cb": error_cb(self.ledger, self.name)}))
        c.subscribe([TOPIC])
        try:
            while not self.stop.is_set():
                for m in c.consume(500, timeout=0.5):
                    if m.error():
                        if m.error().fatal():
                            self.ledger.error(f"{self.name}: {m.error()}")
                        else:
                            self.ledger.retried(f"{self.name}: {m.error().name()}")
                        continue
                    with self.lock:
                        self.seen[m.key().decode()] += 1
        finally:
            c.close()

    def keys(self) -> Counter:
        with self.lock:
            return Counter(self.seen)


# --------------------------------------------------------------------------------------------------
# Admin and token loops


def retrying(ledger: Ledger, what: str, call) -> tuple[bool, object]:
    """Runs `call()` until it returns or RETRY_FOR seconds have passed (then it is an error):
    (whether it succeeded, what it returned). Each success is counted under `what`."""
    deadline = time.monotonic() + RETRY_FOR
    while True:
        try:
            value = call()
            ledger.count(what)
            return True, value
        except Exception as e:  # noqa: BLE001 - retried, reported if it never succeeds
            if time.monotonic() >= deadline:
                ledger.error(f"{what}: still failing after {RETRY_FOR:.0f}s: {e!r}")
                return False, None
            ledger.retried(what)
            time.sleep(1.0)


class AdminLoop(Stoppable):
    """Mutations and reads through each node in turn; the mutations leave the state as it was
    (every ACL created is deleted, the same few SCRAM users are rewritten), so RSS may stay flat."""

    def __init__(self, nodes: list[PortcullisProcess], ledger: Ledger):
        super().__init__("admin", ledger)
        self.nodes = nodes

    def loop(self) -> None:
        admins = [AdminClient(client_conf(n, **{"error_cb": error_cb(self.ledger, f"admin-{i + 1}")}))
                  for i, n in enumerate(self.nodes)]
        n = 0
        while not self.stop.is_set():
            n += 1
            self.round(admins[n % len(admins)], n)
            self.stop.wait(1.0)

    def round(self, admin: AdminClient, n: int) -> None:
        led = self.ledger
        name = f"soak-acl-{n}"
        binding = AclBinding(ResourceType.TOPIC, name, ResourcePatternType.LITERAL, "User:soak", "*",
                             AclOperation.READ, AclPermissionType.ALLOW)
        matching = AclBindingFilter(ResourceType.TOPIC, name, ResourcePatternType.LITERAL, None, None,
                                    AclOperation.ANY, AclPermissionType.ANY)
        resource = ConfigResource(ConfigResource.Type.TOPIC, TOPIC)
        user = SCRAM_USERS[n % len(SCRAM_USERS)]
        upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                              f"pw-{n}".encode(), salt=f"salt-{n}".encode())
        retrying(led, "admin: CreateAcls",
                 lambda: admin.create_acls([binding], request_timeout=15)[binding].result(timeout=20))
        # A follower applies the ACL when it reads it from the store: a moment later, at most.
        retrying(led, "admin: DescribeAcls", lambda: self.expect(
            admin.describe_acls(matching, request_timeout=15).result(timeout=20), name))
        retrying(led, "admin: DeleteAcls",
                 lambda: admin.delete_acls([matching], request_timeout=15)[matching].result(timeout=20))
        retrying(led, "admin: DescribeConfigs",
                 lambda: admin.describe_configs([resource], request_timeout=15)[resource].result(timeout=20))
        retrying(led, "admin: ListTopics", lambda: self.listed(admin))
        retrying(led, "admin: AlterUserScramCredentials",
                 lambda: admin.alter_user_scram_credentials([upsert], request_timeout=15)[user].result(timeout=20))

    @staticmethod
    def listed(admin: AdminClient) -> None:
        if TOPIC not in admin.list_topics(timeout=15).topics:
            raise AssertionError(f"{TOPIC} not listed")

    @staticmethod
    def expect(bindings, name: str) -> bool:
        if not any(b.name == name for b in bindings):
            raise AssertionError(f"ACL on {name} not described yet")
        return True


def create_token(node: PortcullisProcess) -> tuple[str, bytes]:
    """CreateDelegationToken v1 over the raw wire (neither Python client has the API): (id, hmac)."""
    with Conn("127.0.0.1", node.listener_port, timeout=20) as c:
        c.authenticate_plain(USER, PORTCULLIS_USERS[USER])
        # renewers: none; max_lifetime_ms: -1 (the server's maximum)
        r = c.call(API_CREATE_TOKEN, 1, struct.pack(">i", 0) + struct.pack(">q", -1))
        error = r.int16()
        r.string(), r.string(), r.int64(), r.int64(), r.int64()  # owner, issue/expiry/max timestamps
        token_id, hmac = r.string(), r.bytes_()
        if error != 0:
            raise RuntimeError(f"CreateDelegationToken error {error}")
        return token_id, hmac


def expire_token(node: PortcullisProcess, hmac: bytes) -> None:
    """ExpireDelegationToken v1 with expiry_time_period_ms = -1: expires it now."""
    with Conn("127.0.0.1", node.listener_port, timeout=20) as c:
        c.authenticate_plain(USER, PORTCULLIS_USERS[USER])
        r = c.call(API_EXPIRE_TOKEN, 1, byte_array(hmac) + struct.pack(">q", -1))
        error = r.int16()
        if error != 0:
            raise RuntimeError(f"ExpireDelegationToken error {error}")


def token_login(node: PortcullisProcess, token_id: str, hmac: bytes, timeout: float) -> str:
    """What a librdkafka login with the token gets within `timeout` s: "in", "refused", or
    "no answer" (the node is down: a failover)."""
    errors: list[KafkaError] = []
    conf = client_conf(node, token_id, base64.b64encode(hmac).decode(), "SCRAM-SHA-256",
                       error_cb=errors.append)
    admin = AdminClient(conf)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=1)
            return "in"
        except Exception:  # noqa: BLE001 - not in (yet)
            admin.poll(0.1)
            if any(refused_login(e) for e in errors):
                return "refused"
    return "no answer"


class TokenLoop(Stoppable):
    """Creates a token through one node, produces with it through the next, expires it through the
    one after, and checks the next login with it is refused."""

    def __init__(self, nodes: list[PortcullisProcess], ledger: Ledger):
        super().__init__("tokens", ledger)
        self.nodes = nodes

    def loop(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            self.round(n)
            self.stop.wait(3.0)

    def round(self, n: int) -> None:
        led = self.ledger
        k = len(self.nodes)
        creator, user, expirer = self.nodes[n % k], self.nodes[(n + 1) % k], self.nodes[(n + 2) % k]
        ok, token = retrying(led, "tokens: CreateDelegationToken", lambda: create_token(creator))
        if not ok:
            return
        token_id, hmac = token
        conf = client_conf(user, token_id, base64.b64encode(hmac).decode(), "SCRAM-SHA-256",
                           **{"enable.idempotence": True, "acks": "all",
                              "error_cb": self.login_errors(led, f"token-producer-{n}")})
        p = Producer(conf)
        keys = [f"tok{n}-{i}" for i in range(20)]
        failed: list[str] = []
        for key in keys:
            p.produce(TOPIC, key=key.encode(), value=value_for(key),
                      on_delivery=lambda err, msg: failed.append(str(err)) if err else
                      (led.ack(msg.key().decode(), msg.value()), led.count("records acknowledged (token)")))
        left = p.flush(120)
        del p
        if left or failed:
            led.error(f"token producer {n}: {left} undelivered, failures {failed[:3]}")
        if not retrying(led, "tokens: ExpireDelegationToken", lambda: expire_token(expirer, hmac))[0]:
            return
        for i, node in enumerate(self.nodes):
            self.check_refused(node, i + 1, token_id, hmac)

    def check_refused(self, node: PortcullisProcess, number: int, token_id: str, hmac: bytes) -> None:
        """Revocation: a node refuses the expired token within 10 s (a follower applies the expiry
        when it reads it from the store); a node down in a failover is asked again later."""
        led = self.ledger
        expired_at = time.monotonic()
        while True:
            outcome = token_login(node, token_id, hmac, 10.0)
            if outcome == "refused":
                led.count("tokens: refused after expiry (node logins)")
                return
            waited = time.monotonic() - expired_at
            if (outcome == "in" and waited > 10.0) or waited > RETRY_FOR:
                led.error(f"token {token_id} on node {number} {waited:.0f}s after its expiry: {outcome}")
                return
            led.retried(f"tokens: login after expiry: {outcome}")
            time.sleep(0.5)

    @staticmethod
    def login_errors(ledger: Ledger, who: str):
        """A token just created may not have reached a follower yet: a refused login there is
        retried by librdkafka (the delivery still has to succeed), so it is transient here."""
        def on_error(err: KafkaError) -> None:
            if err.fatal():
                ledger.error(f"{who}: {err}")
            else:
                ledger.retried(f"{who}: {err.name()}")
        return on_error


# --------------------------------------------------------------------------------------------------
# Sampling


@dataclass
class Sample:
    t: float
    node: int
    pid: int
    role: str  # writer, follower, or ? (no writer at that moment: a failover)
    rss_kb: int
    fds: int
    counters: dict[str, int]


def proc_rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def node_counters(m: MetricsEndpoint) -> dict[str, int]:
    """The security counters of prometheus.py, and the sessions open now."""
    samples = scrape(m)
    counters = {name: int(total(samples, series, **labels)) for name, (series, labels) in COUNTERS.items()}
    counters["sessions_active"] = int(total(samples, "portcullis_sessions_active"))
    return counters


def current_writer(cluster: Cluster) -> int | None:
    """The writer's index per `portcullis cluster status`, or None (none now, or status failed)."""
    try:
        lines = cluster.status().splitlines()
    except Exception:  # noqa: BLE001 - e.g. during a failover
        return None
    for line in lines[2:]:
        parts = line.split()
        if len(parts) >= 3 and parts[2] == "writer":
            return int(parts[0]) - 1
    return None


class Sampler(Stoppable):
    FIELDS = ["t_s", "node", "pid", "role", "rss_kb", "fds", "successful_authentication", "successful_reauthentication",
              "failed_reauthentication", "expired_connections_killed", "failed_authentication", "sessions_active"]

    def __init__(self, sc: SoakCluster, ledger: Ledger, path: Path):
        super().__init__("sampler", ledger)
        self.sc, self.path = sc, path
        self.samples: list[Sample] = []

    def loop(self) -> None:
        with open(self.path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(self.FIELDS)
            while True:
                for s in self.sample_all():
                    self.samples.append(s)
                    w.writerow([f"{s.t:.1f}", s.node, s.pid, s.role, s.rss_kb, s.fds] +
                               [s.counters.get(k, "") for k in self.FIELDS[6:]])
                f.flush()
                if self.stop.wait(SAMPLE_EVERY):
                    return

    def sample_all(self) -> list[Sample]:
        out = []
        # The writer holds more (its store producer's connections): samples are compared by role.
        writer = current_writer(self.sc.cluster)
        for i, (p, m) in enumerate(zip(self.sc.nodes, self.sc.metrics)):
            if not p.alive():
                continue  # killed by the failover, being restarted
            pid = p.proc.pid
            try:
                rss, fds = proc_rss_kb(pid), len(os.listdir(f"/proc/{pid}/fd"))
                counters = node_counters(m)
            except Exception:  # noqa: BLE001 - it died or restarts between the calls
                continue
            role = "?" if writer is None else "writer" if writer == i else "follower"
            out.append(Sample(self.ledger.now(), i + 1, pid, role, rss, fds, counters))
        return out


# --------------------------------------------------------------------------------------------------
# Failover


def failover(sc: SoakCluster, ledger: Ledger, number: int) -> None:
    """Kills the writer (SIGKILL on odd rounds, SIGTERM on even), waits for another node to take
    over, then starts it again, as test_cluster_chaos does."""
    writer = sc.cluster.writer(timeout=60)
    victim = sc.nodes[writer]
    how = signal.SIGKILL if number % 2 else signal.SIGTERM
    at = time.monotonic()
    victim.stopping = True  # on purpose
    victim.proc.send_signal(how)
    victim.proc.wait(timeout=60)
    others = [i for i in range(len(sc.nodes)) if i != writer]
    successor = sc.cluster.writer(timeout=60, among=others)
    took = time.monotonic() - at
    victim.stopping = False
    victim.start(wait=False)
    wait_started(victim, timeout=120)
    line = (f"t={ledger.now():.0f}s failover {number}: {how.name} node {writer + 1} (writer); node "
            f"{successor + 1} writer after {took:.1f}s; node {writer + 1} back after "
            f"{time.monotonic() - at:.1f}s")
    ledger.failovers.append(line)
    print(line, flush=True)


# --------------------------------------------------------------------------------------------------
# Checks


def read_topic(node: PortcullisProcess) -> Counter:
    """Every key in the topic, read from the start of every partition to its end (a fresh
    consumer, no group), with each value checked against its key."""
    c = Consumer(client_conf(node, **{"group.id": f"soak-check-{time.time_ns()}", "enable.auto.commit": False,
                                      "enable.partition.eof": True}))
    seen: Counter = Counter()
    try:
        md = c.list_topics(TOPIC, timeout=30)
        parts = list(md.topics[TOPIC].partitions)
        c.assign([TopicPartition(TOPIC, p, 0) for p in parts])
        at_end: set[int] = set()
        deadline = time.monotonic() + 600
        while len(at_end) < len(parts):
            if time.monotonic() > deadline:
                raise RuntimeError("could not read the whole topic within 600 s")
            for m in c.consume(1000, timeout=1.0):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        at_end.add(m.partition())
                        continue
                    raise RuntimeError(f"reading the topic back: {m.error()}")
                key = m.key().decode()
                if m.value() != value_for(key):
                    raise RuntimeError(f"record {key} holds another value: {m.value()[:80]!r}")
                seen[key] += 1
    finally:
        c.close()
    return seen


def check_records(ledger: Ledger, in_topic: Counter, consumed: Counter) -> list[str]:
    failures = []
    acked = set(ledger.acked)
    missing = acked - set(in_topic)
    twice = {k: n for k, n in in_topic.items() if n > 1}
    unknown = set(in_topic) - acked  # in the topic, but its producer was told it failed
    not_consumed = acked - set(consumed)
    if missing:
        failures.append(f"records: {len(missing)} acknowledged records not in the topic, e.g. {sorted(missing)[:5]}")
    if twice:
        failures.append(f"records: {len(twice)} records in the topic more than once, e.g. {list(twice.items())[:5]}")
    if unknown:
        failures.append(f"records: {len(unknown)} unacknowledged records in the topic, e.g. {sorted(unknown)[:5]}")
    if not_consumed:
        failures.append(f"records: the consumer group never read {len(not_consumed)} acknowledged records, "
                        f"e.g. {sorted(not_consumed)[:5]}")
    return failures


def incarnations(samples: list[Sample], node: int) -> list[list[Sample]]:
    """A node's samples split by process (a failover restarts it as a new process)."""
    out: dict[int, list[Sample]] = {}
    for s in samples:
        if s.node == node:
            out.setdefault(s.pid, []).append(s)
    return list(out.values())


METRICS = (("RSS", lambda s: s.rss_kb / 1024, " MiB"), ("fds", lambda s: s.fds, ""))


def compare(label: str, base: list[Sample], last: list[Sample]) -> tuple[list[str], list[str]]:
    """Median RSS and fds of `base` vs `last`: (report lines, failures)."""
    lines, failures = [], []
    for what, get, unit in METRICS:
        b, e = statistics.median(map(get, base)), statistics.median(map(get, last))
        change = (e - b) / b if b else 0.0
        ok = abs(change) <= FLAT_WITHIN
        lines.append(f"{label}: {what} {b:.1f}{unit} -> {e:.1f}{unit} ({change:+.1%}) {'ok' if ok else 'NOT FLAT'}")
        if not ok:
            failures.append(f"flat: {label}: {what} {b:.1f} -> {e:.1f} ({change:+.1%}, limit ±10 %)")
    return lines, failures


def flatness(samples: list[Sample], nodes: int, run_s: float, warmup: float, baseline_end: float, final: float
             ) -> tuple[list[str], list[str]]:
    """(report lines, failures). The writer is killed every few minutes and restarted as a new
    process, and a writer holds more connections than a follower, so two comparisons:
    - by role, over every node: the samples of [warmup, baseline_end] of the run vs its last
      `final` seconds (the processes are interchangeable: same binary, same configuration);
    - by process and role, for each stretch one process held one role long enough: its
      [warmup, baseline_end] vs its last `final` seconds."""
    lines, failures = [], []
    for role in ("follower", "writer"):
        base = [s for s in samples if s.role == role and warmup <= s.t <= baseline_end]
        last = [s for s in samples if s.role == role and s.t >= run_s - final]
        if not base or not last:
            failures.append(f"flat: no {role} samples in the windows compared")
            continue
        got = compare(f"every {role}", base, last)
        lines += got[0]
        failures += got[1]
    for node in range(1, nodes + 1):
        for inc in incarnations(samples, node):
            stretches: list[list[Sample]] = []
            for s in inc:
                if s.role == "?":
                    continue  # during a failover: no role to compare with
                if stretches and stretches[-1][-1].role == s.role:
                    stretches[-1].append(s)
                else:
                    stretches.append([s])
            for st in stretches:
                born, died = st[0].t, st[-1].t
                label = f"node {node} pid {st[0].pid} {st[0].role} {born / 60:.1f}-{died / 60:.1f} min"
                if died - born < baseline_end + final:
                    lines.append(f"{label}: too short to compare; RSS {st[0].rss_kb / 1024:.1f} -> "
                                 f"{st[-1].rss_kb / 1024:.1f} MiB, fds {st[0].fds} -> {st[-1].fds}")
                    continue
                got = compare(label, [s for s in st if warmup <= s.t - born <= baseline_end],
                              [s for s in st if s.t >= died - final])
                lines += got[0]
                failures += got[1]
    return lines, failures


def scan_logs(nodes: list[PortcullisProcess]) -> tuple[list[str], list[str]]:
    """Every node's log: ERROR lines, panics and refused logins other than the tokens' (which the
    token loop causes on purpose once a token is expired, and which a follower that has not read a
    new token yet answers too) are failures; WARN lines are reported by kind."""
    lines, failures = [], []
    for p in nodes:
        warns: Counter = Counter()
        refused_tokens = 0
        for line in p.log_path.read_text(errors="replace").splitlines():
            parts = line.split(None, 2)
            level = parts[1] if len(parts) > 1 else ""
            if "authentication failed" in line:
                if 'reason="Token Authentication failed' in line:
                    refused_tokens += 1
                else:
                    failures.append(f"log: {p.name}: {line[:300]}")
            elif level == "ERROR" or "panicked" in line:
                failures.append(f"log: {p.name}: {line[:300]}")
            elif level == "WARN":
                warns[parts[2][:160]] += 1
        lines.append(f"{p.name}: {refused_tokens} token logins refused")
        lines += [f"{p.name}: {n} x WARN {w}" for w, n in warns.most_common(10)]
    return lines, failures


def reauth_report(samples: list[Sample], nodes: int) -> tuple[list[str], list[str]]:
    """Re-authentications per node (summed over its processes: a restart resets the counters),
    and their rate; failed re-authentications are failures, and so is a node that re-authenticated
    less than once per session lifetime (every client holds at least one connection to it)."""
    lines, failures = [], []
    for node in range(1, nodes + 1):
        ok = bad = killed = 0
        alive_s = 0.0
        sessions = statistics.mean([s.counters["sessions_active"] for s in samples if s.node == node] or [0])
        for inc in incarnations(samples, node):
            last = inc[-1].counters
            ok += last["successful_reauthentication"]
            bad += last["failed_reauthentication"]
            killed += last["expired_connections_killed"]
            alive_s += inc[-1].t - inc[0].t
        per_10s = ok / (alive_s / 10) if alive_s else 0.0
        per_session = per_10s / sessions if sessions else 0.0
        lines.append(f"node {node}: {ok} re-authentications ({per_10s:.1f} per 10 s; {sessions:.1f} sessions open "
                     f"on average, so {per_session:.2f} per session per 10 s), {bad} failed, "
                     f"{killed} expired sessions closed (kafka-python does not re-authenticate)")
        if bad:
            failures.append(f"reauth: node {node} had {bad} failed re-authentications")
        if per_10s < 1.0:
            failures.append(f"reauth: node {node} re-authenticated only {per_10s:.2f} times per 10 s")
    return lines, failures


# --------------------------------------------------------------------------------------------------
# The run


def create_topic(node: PortcullisProcess) -> None:
    admin = AdminClient(client_conf(node))
    admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)],
                        operation_timeout=30, request_timeout=30)[TOPIC].result(timeout=60)


def wait_consumed(ledger: Ledger, consumers: list[GroupConsumer], timeout: float) -> Counter:
    deadline = time.monotonic() + timeout
    while True:
        seen: Counter = Counter()
        for c in consumers:
            seen.update(c.keys())
        if set(ledger.acked) <= set(seen) or time.monotonic() > deadline:
            return seen
        time.sleep(1.0)


def run(args) -> int:
    ledger = Ledger()
    out = Path(args.out)
    kafka = {k: os.environ[k] for k in ("KAFKA_BOOTSTRAP", "KAFKA_ADMIN_USER", "KAFKA_ADMIN_PASSWORD")}
    launcher = Launcher(Path(os.environ["PORTCULLIS_BIN"]), Path(args.run_dir), kafka)
    workers: list[Stoppable] = []
    try:
        sc = start_soak_cluster(launcher, args.nodes)
        nodes = sc.nodes
        print(f"cluster of {len(nodes)} nodes up; writer: node {sc.cluster.writer() + 1}", flush=True)
        create_topic(nodes[0])
        ledger.started = time.monotonic()
        sampler = Sampler(sc, ledger, out / "samples.csv")
        consumers = [GroupConsumer(n, i + 1, ledger) for i, n in enumerate(nodes)]
        producers: list[Stoppable] = [ConfluentProducer(n, i + 1, ledger, args.rate) for i, n in enumerate(nodes)]
        producers.append(KafkaPythonProducer(nodes[-1], ledger, max(1, args.rate // 2)))
        loops = [AdminLoop(nodes, ledger), TokenLoop(nodes, ledger)]
        workers = [sampler, *consumers, *producers, *loops]
        for w in workers:
            w.start()

        end = ledger.started + args.minutes * 60
        next_failover = ledger.started + args.failover_every * 60
        number = 0
        while time.monotonic() < end:
            if time.monotonic() >= next_failover:
                number += 1
                failover(sc, ledger, number)
                next_failover += args.failover_every * 60
            time.sleep(1.0)
            dead = [p.name for p in nodes if p.died_unexpectedly()]
            if dead:
                for p in nodes:
                    p.crash_reported = p.crash_reported or p.name in dead
                ledger.error(f"nodes exited on their own: {dead}")
            print_progress(ledger)

        print(f"t={ledger.now():.0f}s stopping the load", flush=True)
        for w in [*producers, *loops]:
            w.stop.set()
        for w in [*producers, *loops]:
            w.join(timeout=360)
            if w.is_alive():
                ledger.error(f"{w.name} did not stop within 360 s")
        consumed = wait_consumed(ledger, consumers, 180)
        for w in [*consumers, sampler]:
            w.stop.set()
            w.join(timeout=60)
        in_topic = read_topic(nodes[0])
        return report(args, ledger, nodes, sampler.samples, in_topic, consumed, out)
    finally:
        for w in workers:
            w.stop.set()
        problems = launcher.stop_all()
        for line in problems:
            print(f"at the end: {line}", flush=True)


_last_progress = [0.0]


def print_progress(ledger: Ledger) -> None:
    if ledger.now() - _last_progress[0] < 60:
        return
    _last_progress[0] = ledger.now()
    with ledger.lock:
        acked, errors = len(ledger.acked), len(ledger.errors)
        retried = sum(ledger.transient.values())
    print(f"t={ledger.now():.0f}s {acked} records acknowledged, {errors} errors, {retried} retried/transient",
          flush=True)


def report(args, ledger: Ledger, nodes: list[PortcullisProcess], samples: list[Sample], in_topic: Counter,
           consumed: Counter, out: Path) -> int:
    scale = min(1.0, args.minutes / 30)  # a shorter run compares shorter windows
    warmup, baseline_end, final = 120 * scale, 300 * scale, 300 * scale
    flat_lines, flat_failures = flatness(samples, args.nodes, ledger.now(), warmup, baseline_end, final)
    log_lines, log_failures = scan_logs(nodes)
    reauth_lines, reauth_failures = reauth_report(samples, args.nodes)
    failures = check_records(ledger, in_topic, consumed) + flat_failures + reauth_failures + log_failures
    if ledger.errors:
        failures.append(f"errors: {len(ledger.errors)} client errors, e.g. {ledger.errors[:5]}")
    lines = [
        f"soak: {args.minutes} min, {args.nodes} nodes, failover every {args.failover_every} min, "
        f"ran {ledger.now() / 60:.1f} min",
        f"records acknowledged: {len(ledger.acked)}; in the topic: {sum(in_topic.values())} "
        f"({len(in_topic)} distinct); read by the group: {sum(consumed.values())} ({len(consumed)} distinct)",
        *[f"{k}: {v}" for k, v in sorted(ledger.counts.items())],
        f"client errors: {len(ledger.errors)}",
        *[f"  {e}" for e in ledger.errors[:20]],
        f"retried / transient (not errors): {sum(ledger.transient.values())}",
        *[f"  {k}: {v}" for k, v in ledger.transient.most_common(15)],
        f"failovers: {len(ledger.failovers)}", *[f"  {f}" for f in ledger.failovers],
        "re-authentication:", *[f"  {line}" for line in reauth_lines],
        f"RSS and fds (median of {warmup / 60:.1f}-{baseline_end / 60:.1f} min vs the last {final / 60:.1f} min):",
        *[f"  {line}" for line in flat_lines],
        f"node logs: {len(log_failures)} ERROR/panic lines", *[f"  {line}" for line in log_lines],
        "result: " + ("PASS" if not failures else "FAIL"), *[f"  FAILED {f}" for f in failures],
    ]
    text = "\n".join(lines)
    (out / "summary.txt").write_text(text + "\n")
    print(text, flush=True)
    return 0 if not failures else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--failover-every", type=float, default=5, help="minutes")
    ap.add_argument("--rate", type=int, default=20, help="records a second per confluent-kafka producer")
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    # soak.sh stops the driver with SIGTERM (also on Ctrl-C, which reaches the driver as well):
    # unwind, so every node is stopped. Later signals are ignored, so that the second of those
    # two cannot cut the stopping of the nodes short.
    def on_term(signum, _frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    try:
        return run(args)
    except KeyboardInterrupt as e:
        print(f"interrupted ({e}): stopped the nodes", flush=True)
        return 130


if __name__ == "__main__":
    sys.exit(main())
