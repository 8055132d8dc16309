"""The `delegated` forwarding policy (issue 14): the upstream sees the client's own principal.

Portcullis' upstream is the suite Kafka's SASL listener (StandardAuthorizer, delegation tokens on),
logged in as a service user `dlg-svc` that holds only CreateTokens/DescribeTokens on every `User`
(`kafka-acls ... --user-principal '*'`). For each client principal Portcullis creates a token owned by
it and opens that principal's upstream connections with it (SCRAM, tokenauth=true), so:

- Kafka's ACLs decide as the real user: with `authorizer = "upstream"` a differential of produce,
  consume and admin cases gives the same outcome through Portcullis as straight against Kafka;
- a per-user quota set through Portcullis throttles the real user (and not through `passthrough`);
- 50 concurrent logins of one principal create exactly one upstream token;
- the token is expired upstream when the principal's credential is deleted in Portcullis, when the
  principal is idle, and when Portcullis stops; tokens are replaced before their maximum lifetime
  while a producer keeps going;
- a service principal without CreateTokens gives a log line that names the missing ACL.

The users (`dlg-*`) are this file's own, so the shared broker's other tests are unaffected.
"""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType
from confluent_kafka.admin import UserScramCredentialDeletion, ScramMechanism

from conftest import PortcullisProcess, target, toml_str
from test_delegation_tokens import ACL_COMMAND, TOKEN_COMMAND, Tools, token_rows

pytestmark = pytest.mark.portcullis_only

CONFIG_COMMAND = "org.apache.kafka.tools.ConfigCommand"
SERVICE, SERVICE_PW = "dlg-svc", "dlg-svc-secret"
NO_TOKENS, NO_TOKENS_PW = "dlg-svc-bare", "dlg-svc-bare-secret"
# Client users: in Portcullis (its passwords) and, for the differential, in Kafka (other passwords).
USERS = {"dlg-ann": "ann-pw", "dlg-ben": "ben-pw", "dlg-cat": "cat-pw", "dlg-dan": "dan-pw",
         "admin": "admin-through-portcullis"}
KAFKA_PW = {u: f"{u}-kafka" for u in ("dlg-ann", "dlg-ben")}


def setup_upstream(java, kafka_env, work: Path) -> Tools:
    """Kafka-side setup, as the admin: the service users and their ACLs, the differential's users."""
    admin = Tools(java, kafka_env["KAFKA_SASL_BOOTSTRAP"],
                  {kafka_env["KAFKA_ADMIN_USER"]: kafka_env["KAFKA_ADMIN_PASSWORD"]}, work)
    a = kafka_env["KAFKA_ADMIN_USER"]
    scram = lambda user, pw: ["--alter", "--add-config", f"SCRAM-SHA-512=[iterations=4096,password={pw}]",  # noqa: E731
                              "--entity-type", "users", "--entity-name", user]
    steps = [("svc", CONFIG_COMMAND, a, scram(SERVICE, SERVICE_PW)),
             ("bare", CONFIG_COMMAND, a, scram(NO_TOKENS, NO_TOKENS_PW))]
    steps += [(u, CONFIG_COMMAND, a, scram(u, pw)) for u, pw in KAFKA_PW.items()]
    # The documented grant (docs/configuration.md): CreateTokens and DescribeTokens on every user.
    steps.append(("grant", ACL_COMMAND, a, ["--add", "--allow-principal", f"User:{SERVICE}",
                                            "--operation", "CreateTokens", "--operation", "DescribeTokens",
                                            "--user-principal", "*"]))
    results = admin.run(steps)
    for label, r in results.items():
        assert r["rc"] == 0, f"{label}: {r}"
    # SCRAM credentials and ACLs reach the broker's caches asynchronously.
    time.sleep(2)
    return admin


@pytest.fixture(scope="module")
def upstream_users(kafka_env, java, tmp_path_factory):
    if target() != "portcullis":
        pytest.skip("Portcullis only")
    return setup_upstream(java, kafka_env, tmp_path_factory.mktemp("dlg-tools"))


def start_node(launcher_dir: Path, binary: Path, kafka_env, name: str, *, service=(SERVICE, SERVICE_PW),
               policy: str = "delegated", delegated: dict | None = None, extra: str = "") -> PortcullisProcess:
    workdir = launcher_dir / f"portcullis-{name}"
    workdir.mkdir(parents=True)
    (workdir / "plugins").mkdir()
    p = PortcullisProcess(binary, workdir, name)
    p.write_config(upstream={"bootstrap_servers": [kafka_env["KAFKA_SASL_BOOTSTRAP"]],
                             "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512",
                             "username": service[0], "password": service[1]},
                   tls=None, plugin_dir=workdir / "plugins")
    text = p.config.read_text().replace('policy = "passthrough"', f'policy = "{policy}"')
    if delegated:
        text += "\n[forwarding.delegated]\n" + "".join(
            f"{k} = {toml_str(v) if isinstance(v, str) else v}\n" for k, v in delegated.items())
    p.config.write_text(text + "\n" + extra)
    for user, pw in USERS.items():
        p.scram_add(user, pw, "SCRAM-SHA-512")
    p.start()
    return p


@pytest.fixture
def node_factory(upstream_users, run_dir, kafka_env, request):
    import os
    binary = Path(os.environ["PORTCULLIS_BIN"])
    nodes: list[PortcullisProcess] = []

    def make(name: str, **kw) -> PortcullisProcess:
        p = start_node(run_dir / "delegated", binary, kafka_env, f"{name}-{len(nodes)}-{time.monotonic_ns()}", **kw)
        nodes.append(p)
        return p

    yield make
    for p in nodes:
        p.stop()


def conf(node: PortcullisProcess, user: str, **extra) -> dict:
    c = {"bootstrap.servers": node.bootstrap, "security.protocol": "SASL_PLAINTEXT",
         "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user, "sasl.password": USERS[user],
         "log_level": 3}
    c.update(extra)
    return c


def kafka_conf(kafka_env, user: str, **extra) -> dict:
    pw = kafka_env["KAFKA_ADMIN_PASSWORD"] if user == "admin" else KAFKA_PW[user]
    c = {"bootstrap.servers": kafka_env["KAFKA_SASL_BOOTSTRAP"], "security.protocol": "SASL_PLAINTEXT",
         "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user, "sasl.password": pw, "log_level": 3}
    c.update(extra)
    return c


def tokens_owned_by(tools: Tools, kafka_env, owner: str) -> list[dict]:
    r = tools.run([("d", TOKEN_COMMAND, kafka_env["KAFKA_ADMIN_USER"],
                    ["--describe", "--owner-principal", f"User:{owner}"])])["d"]
    assert r["rc"] == 0, r
    return [row for row in token_rows(r["out"]) if row["owner"] == f"User:{owner}"]


def produce_one(c: dict, topic: str, timeout: float = 20) -> str:
    """Produces one record; returns 'ok' or the error's name."""
    p = Producer({**c, "message.timeout.ms": int(timeout * 1000), "retries": 0})
    out: list[str] = []
    p.produce(topic, b"v", on_delivery=lambda err, msg: out.append("ok" if err is None else err.name()))
    p.flush(timeout + 5)
    return out[0] if out else "no-delivery-report"


def consume_outcome(c: dict, topic: str, group: str, timeout: float = 15) -> str:
    """Subscribes with `group` and polls: 'ok' once a record or the end of the partition is seen,
    else the first error's name."""
    consumer = Consumer({**c, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.partition.eof": True, "session.timeout.ms": 6000})
    consumer.subscribe([topic])
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None:
                continue
            if m.error() is None or m.error().code() == KafkaError._PARTITION_EOF:
                return "ok"
            return m.error().name()
        return "timeout"
    finally:
        consumer.close()


def admin_outcome(c: dict, what: str, name: str) -> str:
    admin = AdminClient(c)
    try:
        if what == "create":
            f = admin.create_topics([NewTopic(name, 1, 1)], request_timeout=15)[name]
        elif what == "describe-configs":
            res = ConfigResource(ResourceType.TOPIC, name)
            f = admin.describe_configs([res], request_timeout=15)[res]
        elif what == "delete":
            f = admin.delete_topics([name], request_timeout=15)[name]
        else:
            raise ValueError(what)
        f.result(timeout=30)
        return "ok"
    except KafkaException as e:
        return e.args[0].name()


def test_upstream_acls_decide_as_the_real_user(node_factory, upstream_users, kafka_env, unique):
    """Differential: the same cases straight against Kafka (as the user) and through Portcullis
    (`authorizer = "upstream"`, the user's token); the outcomes must be identical, and differ per
    user (so the upstream really saw the user, not the service principal)."""
    # Portcullis' own authorizer holds no ACL (it would deny everything): with "upstream" it is not
    # asked for upstream-bound requests, Kafka decides alone.
    local_acls = '[authorizer]\nplugin = "acl"\n'
    node = node_factory("acl", delegated={"authorizer": "upstream"}, extra=local_acls)
    tools: Tools = upstream_users
    a = kafka_env["KAFKA_ADMIN_USER"]
    t_ann, t_ben, t_none = unique("dlg-ann-t"), unique("dlg-ben-t"), unique("dlg-nobody-t")
    g_ann = unique("dlg-ann-g")
    ka = kafka_conf(kafka_env, "admin")
    for t in (t_ann, t_ben, t_none):
        assert admin_outcome(ka, "create", t) == "ok"
    acl = lambda *args: ("acl", ACL_COMMAND, a, ["--add", *args])  # noqa: E731
    steps = [
        acl("--allow-principal", "User:dlg-ann", "--operation", "Write", "--operation", "Read",
            "--operation", "Describe", "--operation", "DescribeConfigs", "--topic", t_ann),
        acl("--allow-principal", "User:dlg-ann", "--operation", "Read", "--group", g_ann),
        acl("--allow-principal", "User:dlg-ben", "--operation", "Write", "--topic", t_ben),
        acl("--allow-principal", "User:dlg-ben", "--operation", "Create", "--topic", "dlg-ben-new",
            "--resource-pattern-type", "prefixed"),
    ]
    for i, s in enumerate(steps):
        r = tools.run([(f"s{i}", *s[1:])])[f"s{i}"]
        assert r["rc"] == 0, r
    time.sleep(2)
    cases = []
    for user in ("dlg-ann", "dlg-ben"):
        for topic in (t_ann, t_ben, t_none):
            cases.append((user, "produce", topic))
            cases.append((user, "describe-configs", topic))
        cases.append((user, "consume", t_ann))
        cases.append((user, "consume", t_ben))
        cases.append((user, "create", "dlg-ben-new"))
        cases.append((user, "create", "dlg-ann-new"))
    outcomes = {}
    for n, (user, op, topic) in enumerate(cases):
        row = []
        for side, c in (("kafka", kafka_conf(kafka_env, user)), ("portcullis", conf(node, user))):
            name = f"{topic}-{unique('x')}" if op == "create" else topic
            if op == "produce":
                row.append(produce_one(c, topic))
            elif op == "consume":
                row.append(consume_outcome(c, topic, g_ann))
            else:
                row.append(admin_outcome(c, op, name))
        outcomes[(user, op, topic)] = row
    assert len(cases) >= 20
    differing = {k: v for k, v in outcomes.items() if v[0] != v[1]}
    assert not differing, f"Kafka vs Portcullis: {differing}\nall: {outcomes}"
    # The upstream told the users apart (the service principal would have been denied everything).
    assert outcomes[("dlg-ann", "produce", t_ann)] == ["ok", "ok"]
    assert outcomes[("dlg-ben", "produce", t_ann)][1] == "TOPIC_AUTHORIZATION_FAILED"
    assert outcomes[("dlg-ben", "produce", t_ben)] == ["ok", "ok"]
    # With authorizer = "local" (the default) Portcullis' own authorizer still decides first.
    local = node_factory("acl-local", extra=local_acls)
    assert produce_one(conf(local, "dlg-ann"), t_ann, timeout=10) == "TOPIC_AUTHORIZATION_FAILED"


def test_one_token_for_fifty_concurrent_logins_then_revoked_on_credential_delete(
        node_factory, upstream_users, kafka_env, unique):
    node = node_factory("single-flight")
    tools: Tools = upstream_users
    assert tokens_owned_by(tools, kafka_env, "dlg-cat") == []
    topic = unique("dlg-sf")
    assert admin_outcome(kafka_conf(kafka_env, "admin"), "create", topic) == "ok"
    r = tools.run([("g", ACL_COMMAND, kafka_env["KAFKA_ADMIN_USER"],
                    ["--add", "--allow-principal", "User:dlg-cat", "--operation", "All", "--topic", topic])])["g"]
    assert r["rc"] == 0, r
    time.sleep(1.5)
    results: list[str] = []
    barrier = threading.Barrier(50)

    def one():
        barrier.wait()
        results.append(produce_one(conf(node, "dlg-cat"), topic))

    threads = [threading.Thread(target=one) for _ in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == ["ok"] * 50, results
    owned = tokens_owned_by(tools, kafka_env, "dlg-cat")
    assert len(owned) == 1, owned
    assert owned[0]["requester"] == f"User:{SERVICE}", owned
    assert node.log_tail(400).count("upstream delegation token created") == 1

    # Deleting dlg-cat's credential in Portcullis expires the upstream token at once.
    admin = AdminClient(conf(node, "admin"))
    before = node.log_size()
    for f in admin.alter_user_scram_credentials(
            [UserScramCredentialDeletion("dlg-cat", ScramMechanism.SCRAM_SHA_512)]).values():
        f.result(30)
    deleted_at = time.monotonic()
    while time.monotonic() - deleted_at < 1.0:
        if "Revoked" in node.log_since(before, 200) and "upstream delegation token expired" in node.log_since(before, 200):
            break
        time.sleep(0.02)
    else:
        pytest.fail(f"not expired within 1 s:\n{node.log_since(before, 50)}")
    assert tokens_owned_by(tools, kafka_env, "dlg-cat") == []


def test_quota_applies_to_the_real_user(node_factory, upstream_users, kafka_env, unique):
    """producer_byte_rate for dlg-dan set through Portcullis throttles dlg-dan through `delegated`,
    not through `passthrough` (where the upstream sees the service principal)."""
    rate = 204_800
    delegated = node_factory("quota")
    topic = unique("dlg-quota")
    assert admin_outcome(kafka_conf(kafka_env, "admin"), "create", topic) == "ok"
    tools: Tools = upstream_users
    for svc in ("dlg-dan", SERVICE):
        r = tools.run([("g", ACL_COMMAND, kafka_env["KAFKA_ADMIN_USER"],
                        ["--add", "--allow-principal", f"User:{svc}", "--operation", "Write", "--topic", topic])])["g"]
        assert r["rc"] == 0, r
    # The quota goes through Portcullis (AlterClientQuotas, as admin's own token upstream).
    r = Tools(tools.java, delegated.bootstrap, {"admin": USERS["admin"]}, Path(delegated.workdir)).run(
        [("q", CONFIG_COMMAND, "admin", ["--alter", "--add-config", f"producer_byte_rate={rate}",
                                          "--entity-type", "users", "--entity-name", "dlg-dan"])])["q"]
    assert r["rc"] == 0 and "Completed" in r["out"], r
    time.sleep(2)

    def run(node) -> tuple[float, float]:
        """Produces 4 MB; returns the rate over the last 1.5 MB delivered (Kafka's quota window is
        11 s, so the first ~11 s worth of bytes pass at full speed) and the largest throttle time
        librdkafka saw in a response."""
        stats = []
        delivered = []
        p = Producer({**conf(node, "dlg-dan"), "linger.ms": 5, "batch.size": 65536,
                      "statistics.interval.ms": 500, "stats_cb": stats.append})
        payload = b"x" * 10_000
        total = 4_000_000

        def on_delivery(err, msg):
            assert err is None, err
            delivered.append(time.monotonic())

        for _ in range(total // len(payload)):
            while True:
                try:
                    p.produce(topic, payload, on_delivery=on_delivery)
                    p.poll(0)
                    break
                except BufferError:
                    p.poll(0.05)
        p.flush(120)
        time.sleep(1)
        p.poll(0)
        first = int(len(delivered) * 2.5 / 4)
        rate = (len(delivered) - first) * len(payload) / (delivered[-1] - delivered[first])
        max_throttle = 0.0
        for s in stats:
            for b in json.loads(s).get("brokers", {}).values():
                max_throttle = max(max_throttle, b.get("throttle", {}).get("max", 0))
        return rate, max_throttle

    measured, throttle_ms = run(delegated)
    assert throttle_ms > 0, f"no throttle_time_ms reported ({measured:.0f} B/s)"
    assert abs(measured - rate) / rate <= 0.2, f"{measured:.0f} B/s vs quota {rate}"
    passthrough = node_factory("quota-passthrough", policy="passthrough")
    free, free_throttle = run(passthrough)
    assert free > rate * 2 and free_throttle == 0, (free, free_throttle)


def test_idle_and_shutdown_expiry_and_replacement(node_factory, upstream_users, kafka_env, unique):
    tools: Tools = upstream_users
    topic = unique("dlg-life")
    assert admin_outcome(kafka_conf(kafka_env, "admin"), "create", topic) == "ok"
    r = tools.run([("g", ACL_COMMAND, kafka_env["KAFKA_ADMIN_USER"],
                    ["--add", "--allow-principal", "User:dlg-ann", "--operation", "All", "--topic", topic])])["g"]
    assert r["rc"] == 0, r
    # 6 s maximum lifetime: every token is replaced before its end while a producer keeps going.
    node = node_factory("life", delegated={"token_lifetime_ms": 6000, "idle_expire_ms": 3000})
    errors: list[str] = []
    delivered = []
    p = Producer({**conf(node, "dlg-ann"), "linger.ms": 20})
    start = time.monotonic()
    while time.monotonic() - start < 18:
        p.produce(topic, b"v", on_delivery=lambda err, msg: (errors if err else delivered).append(err or 1))
        p.poll(0.1)
    p.flush(30)
    assert errors == [] and len(delivered) > 100, (errors[:5], len(delivered))
    created = node.log_tail(2000).count("upstream delegation token created")
    assert created >= 3, f"expected a replacement every ~5 s, saw {created} creations"
    # Idle: the producer is gone; after idle_expire_ms the token is expired upstream.
    del p
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and "Idle" not in node.log_tail(200):
        time.sleep(0.2)
    assert "Idle" in node.log_tail(200), node.log_tail(40)
    assert tokens_owned_by(tools, kafka_env, "dlg-ann") == []
    # Shutdown: a fresh token held by an open producer, then SIGTERM expires it upstream.
    held = Producer(conf(node, "dlg-ann"))
    held.produce(topic, b"v")
    assert held.flush(30) == 0
    assert len(tokens_owned_by(tools, kafka_env, "dlg-ann")) == 1
    node.stop()
    del held
    assert tokens_owned_by(tools, kafka_env, "dlg-ann") == []


def test_service_without_create_tokens_names_the_missing_acl(node_factory, upstream_users, kafka_env, unique):
    node = node_factory("bare", service=(NO_TOKENS, NO_TOKENS_PW))
    outcome = produce_one(conf(node, "dlg-ben"), unique("dlg-bare"), timeout=8)
    assert outcome != "ok"
    log = node.log_tail(100)
    assert re.search(r"DELEGATION_TOKEN_AUTHORIZATION_FAILED.*lacks CreateTokens on the User resource named 'User:dlg-ben'", log), log
    assert "--operation CreateTokens" in log
    assert tokens_owned_by(upstream_users, kafka_env, "dlg-ben") == []
