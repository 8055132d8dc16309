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
  while a producer keeps going, and renewed before their expiry when the broker's expiry is shorter
  than the maximum (a broker of the test's own, `delegation.token.expiry.time.ms`);
- `kafka-consumer-groups --describe --members` shows the client's CLIENT-ID, and Kafka's authorizer
  log names the real user for the group's requests;
- a service principal without CreateTokens fails the client's login with SASL_AUTHENTICATION_FAILED
  and a message naming the missing permission, and a log line that names the missing ACL.

The users (`dlg-*`) are this file's own, so the shared broker's other tests are unaffected.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
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
               policy: str = "delegated", delegated: dict | None = None, extra: str = "",
               libs: tuple[Path, ...] = ()) -> PortcullisProcess:
    workdir = launcher_dir / f"portcullis-{name}"
    workdir.mkdir(parents=True)
    (workdir / "plugins").mkdir()
    for lib in libs:
        shutil.copy(lib, workdir / "plugins")
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
    # Without the HMAC: a failing assertion prints the rows, and a token's HMAC is its password.
    return [{k: v for k, v in row.items() if k != "hmac"} for row in token_rows(r["out"])
            if row["owner"] == f"User:{owner}"]


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


def test_a_plugin_policy_over_the_c_abi_routes_with_the_clients_own_identity(
        node_factory, upstream_users, kafka_env, unique):
    """A forwarding policy loaded from a cdylib (examples/topic-guard, `upstream_identity =
    "delegated"`) routes upstream-bound requests with UpstreamIdentity::Delegated across the C ABI;
    with `[forwarding.delegated]` present the host gives each user its own upstream token, so Kafka
    authorizes the real user: dlg-cat, whom an upstream ACL lets write, produces; dlg-dan, whom none
    does, gets TOPIC_AUTHORIZATION_FAILED (the service principal may write nowhere, so neither could
    as the service). The plugin still screens: produce to `audit.*` is refused by it."""
    from test_plugin_kinds import EXAMPLES
    from test_plugin_mechanism import built_library
    tools: Tools = upstream_users
    topic, audit = unique("dlg-plugin-t"), f"audit.{unique('dlg-plugin')}"
    ka = kafka_conf(kafka_env, "admin")
    for t in (topic, audit):
        assert admin_outcome(ka, "create", t) == "ok"
    for t in (topic, audit):
        r = tools.run([("acl", ACL_COMMAND, kafka_env["KAFKA_ADMIN_USER"],
                        ["--add", "--allow-principal", "User:dlg-cat", "--operation", "Write", "--topic", t])])["acl"]
        assert r["rc"] == 0, r
    time.sleep(2)  # ACLs reach the broker's cache asynchronously
    guard = ('[plugins.config.topic-guard]\nrefuse_produce_to = "^audit\\\\."\n'
             'upstream_identity = "delegated"\n')
    node = node_factory("plugin-policy", policy="topic-guard", delegated={"idle_expire_ms": 600000}, extra=guard,
                        libs=(built_library(*EXAMPLES["topic-guard"]),))
    assert produce_one(conf(node, "dlg-cat"), topic) == "ok"
    assert produce_one(conf(node, "dlg-dan"), topic, timeout=10) == "TOPIC_AUTHORIZATION_FAILED"
    assert produce_one(conf(node, "dlg-cat"), audit, timeout=10) == "TOPIC_AUTHORIZATION_FAILED"
    owned = tokens_owned_by(tools, kafka_env, "dlg-cat")
    assert owned, "no upstream token owned by User:dlg-cat"
    # A plugin policy that asks for the delegated identity without [forwarding.delegated] gets no
    # upstream connection at all (never the service identity in its place).
    bare = node_factory("plugin-policy-bare", policy="topic-guard", extra=guard,
                        libs=(built_library(*EXAMPLES["topic-guard"]),))
    assert produce_one(conf(bare, "dlg-cat"), topic, timeout=8) != "ok"


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
    rate = 102_400
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
        """Produces 5 MB (the issue's numbers: 5 MB at 100 KiB/s); returns the rate over the last
        3 MB delivered (Kafka measures the rate over at least 10 of its 11 one-second quota
        windows, so the first ~1 MB passes at full speed) and the largest throttle time librdkafka
        saw in a response."""
        stats = []
        delivered = []
        p = Producer({**conf(node, "dlg-dan"), "linger.ms": 5, "batch.size": 65536,
                      "statistics.interval.ms": 500, "stats_cb": stats.append})
        payload = b"x" * 10_000
        total = 5_000_000

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
        first = int(len(delivered) * 2 / 5)
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


def assert_one_live_token(node: PortcullisProcess, listed: list[dict]) -> None:
    """Exactly one of the tokens Kafka `listed` for the principal is live. A replacement creates
    the new token before it expires the one it replaces (a connection opening meanwhile must still
    get a valid token), so a describe that lands between the two — with a 6-s lifetime a
    replacement comes every ~5 s, and the JVM tool can take that long on a loaded machine — lists
    both. The replaced one must then be reported expired at once; a token Portcullis lost track
    of never is."""
    def unexpired() -> list[dict]:
        log = node.log_tail(5000)
        return [t for t in listed
                if not re.search(rf"upstream delegation token expired.*token_id={re.escape(t['id'])}", log)]
    deadline = time.monotonic() + 10
    while len(unexpired()) > 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert listed and len(unexpired()) == 1, (listed, node.log_tail(30))


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
    assert_one_live_token(node, tokens_owned_by(tools, kafka_env, "dlg-ann"))
    node.stop()
    del held
    assert tokens_owned_by(tools, kafka_env, "dlg-ann") == []


GROUPS_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"


def authorizer_log() -> Path:
    """Kafka's authorizer audit log (`kafka.authorizer.logger`: denials at INFO, allows at DEBUG),
    which scripts/lib/kafka.sh writes to a file of its own in the broker's run directory."""
    import os
    run_dir = os.environ.get("KAFKA_RUN_DIR")
    assert run_dir, "KAFKA_RUN_DIR is not set (the suite's Kafka is started by scripts/lib/kafka.sh)"
    return Path(run_dir) / "kafka-authorizer.log"


def test_group_members_show_the_client_id_and_the_upstream_authorizes_the_real_user(
        node_factory, upstream_users, kafka_env, unique):
    """`kafka-consumer-groups --describe --members` through Portcullis shows the client's own
    CLIENT-ID (and a member id Kafka derived from it), and Kafka's authorizer log names
    `User:dlg-ann` for the group's requests — never Portcullis' service principal."""
    node = node_factory("members")
    tools: Tools = upstream_users
    a = kafka_env["KAFKA_ADMIN_USER"]
    topic, group, client_id = unique("dlg-mem-t"), unique("dlg-mem-g"), unique("dlg-ann-app")
    assert admin_outcome(kafka_conf(kafka_env, "admin"), "create", topic) == "ok"
    for i, args in enumerate((["--topic", topic], ["--group", group])):
        r = tools.run([(f"g{i}", ACL_COMMAND, a, ["--add", "--allow-principal", "User:dlg-ann",
                                                   "--operation", "All", *args])])[f"g{i}"]
        assert r["rc"] == 0, r
    time.sleep(1.5)
    log = authorizer_log()
    log_start = log.stat().st_size if log.exists() else 0
    assigned: list = []
    consumer = Consumer({**conf(node, "dlg-ann"), "group.id": group, "client.id": client_id,
                         "auto.offset.reset": "earliest", "session.timeout.ms": 30000})
    consumer.subscribe([topic], on_assign=lambda c, parts: assigned.extend(parts))
    try:
        deadline = time.monotonic() + 30
        while not assigned and time.monotonic() < deadline:
            consumer.poll(0.2)
        assert assigned, "the consumer never joined the group"
        admin_tools = Tools(tools.java, node.bootstrap, {"admin": USERS["admin"]}, Path(node.workdir))
        r = admin_tools.run([("m", GROUPS_COMMAND, "admin",
                              ["--describe", "--members", "--group", group])])["m"]
        assert r["rc"] == 0, r
        rows = [line.split() for line in r["out"].splitlines() if line.startswith(group + " ")]
        # GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS
        assert len(rows) == 1, r["out"]
        _, member_id, host, shown_client_id, partitions = rows[0]
        assert shown_client_id == client_id, r["out"]
        assert member_id.startswith(client_id + "-"), r["out"]
        assert host.lstrip("/") == "127.0.0.1" and partitions == "1", r["out"]
    finally:
        consumer.close()
    # The broker authorized the group's requests (JoinGroup, SyncGroup, Heartbeat, ...) as the user.
    resource = f"on resource = Group:LITERAL:{group} "
    deadline = time.monotonic() + 10
    lines: list[str] = []
    while time.monotonic() < deadline:
        with log.open(errors="replace") as f:
            f.seek(log_start)
            lines = [line for line in f.read().splitlines() if resource in line]
        if any("Principal = User:dlg-ann is Allowed operation = READ" in line for line in lines):
            break
        time.sleep(0.2)
    assert any("Principal = User:dlg-ann is Allowed operation = READ" in line for line in lines), \
        f"no allow for User:dlg-ann on the group in {log}:\n" + "\n".join(lines[-20:])
    users = {m.group(1) for line in lines if (m := re.search(r"Principal = (\S+) is", line))}
    assert f"User:{SERVICE}" not in users, users
    # A client of the shared broker that lists every group (ListGroups) is checked for DESCRIBE on
    # this one too — another parallel worker's, say — so only the other lines say who used it.
    acting = {m.group(1) for line in lines
              if "operation = DESCRIBE " not in line and (m := re.search(r"Principal = (\S+) is", line))}
    assert acting <= {"User:dlg-ann", "User:admin"}, acting


def first_client_error(c: dict, timeout: float = 20) -> KafkaError | None:
    """Starts a confluent-kafka producer and returns the first error librdkafka reports (error_cb),
    or None if none arrives within `timeout`."""
    errors: list[KafkaError] = []
    p = Producer({**c, "error_cb": errors.append})
    deadline = time.monotonic() + timeout
    while not errors and time.monotonic() < deadline:
        p.poll(0.2)
    return errors[0] if errors else None


def test_service_without_create_tokens_fails_the_login_with_a_clear_error(
        node_factory, upstream_users, kafka_env, caplog):
    """The upstream refuses to create dlg-ben's token (the service principal has no CreateTokens):
    dlg-ben's authentication fails with SASL_AUTHENTICATION_FAILED and a message naming the missing
    permission, as real clients show it (the connection is answered, not just dropped), and the
    Portcullis log names the missing ACL and the command that grants it."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaError as PyKafkaError

    node = node_factory("bare", service=(NO_TOKENS, NO_TOKENS_PW))
    needs = "needs CreateTokens on User:dlg-ben"
    # librdkafka: an authentication error (not a transport error from a dropped connection).
    error = first_client_error(conf(node, "dlg-ben"))
    assert error is not None, "no error reported"
    assert error.code() == KafkaError._AUTHENTICATION, (error.name(), error.str())
    assert "DELEGATION_TOKEN_AUTHORIZATION_FAILED" in error.str() and needs in error.str(), error.str()
    # kafka-python: the SaslAuthenticate error (code 58) with the same message, which it logs (its
    # constructor does not raise; the log is what its user sees).
    with caplog.at_level(logging.ERROR, logger="kafka.conn"):
        try:
            KafkaProducer(bootstrap_servers=node.bootstrap, security_protocol="SASL_PLAINTEXT",
                          sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="dlg-ben",
                          sasl_plain_password=USERS["dlg-ben"], api_version_auto_timeout_ms=5_000,
                          request_timeout_ms=5_000, max_block_ms=5_000).close(timeout=5)
        except PyKafkaError:
            pass
    refused = [r.getMessage() for r in caplog.records if "SaslAuthenticationFailedError" in r.getMessage()]
    assert refused and needs in refused[0], [r.getMessage() for r in caplog.records]
    log = node.log_tail(100)
    assert re.search(r"DELEGATION_TOKEN_AUTHORIZATION_FAILED.*lacks CreateTokens on the User resource named 'User:dlg-ben'", log), log
    assert "--operation CreateTokens" in log
    assert "its authentication fails" in log
    assert tokens_owned_by(upstream_users, kafka_env, "dlg-ben") == []



def token_times(java, bootstrap: str, admin: tuple[str, str], owner: str) -> list[dict]:
    """The tokens owned by `owner` as Kafka's DescribeDelegationToken returns them (Admin client,
    tests/interop/java/DescribeTokenTimes.java): id, issued, expiry, max in ms."""
    r = java.run("DescribeTokenTimes", bootstrap, admin[0], admin[1], owner, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]


@pytest.mark.long
def test_tokens_are_renewed_upstream_before_they_expire(run_dir, java, kafka_env, unique, tmp_path):
    """A broker of this test's own whose tokens expire 20 s after issue or renewal
    (`delegation.token.expiry.time.ms`) but may live 5 min: Portcullis renews the token before each
    expiry (RenewDelegationToken) and Kafka's DescribeDelegationToken shows the same token with its
    expiry moved forward each time, while a producer keeps going past the first two expiries."""
    import os
    from own_kafka import OwnKafka

    if target() != "portcullis":
        pytest.skip("Portcullis only")
    kafka = OwnKafka(run_dir / f"kafka-dlg-renew-{time.monotonic_ns()}", {"delegation.token.expiry.time.ms": "20000"})
    kafka.start()
    node = None
    try:
        own_env = {**kafka_env, "KAFKA_SASL_BOOTSTRAP": kafka.env["KAFKA_SASL_BOOTSTRAP"]}
        (tmp_path / "tools").mkdir()
        tools = setup_upstream(java, own_env, tmp_path / "tools")
        a = kafka_env["KAFKA_ADMIN_USER"]
        topic = unique("dlg-renew")
        assert admin_outcome(kafka_conf(own_env, "admin"), "create", topic) == "ok"
        r = tools.run([("g", ACL_COMMAND, a, ["--add", "--allow-principal", "User:dlg-ann",
                                               "--operation", "All", "--topic", topic])])["g"]
        assert r["rc"] == 0, r
        time.sleep(1.5)
        node = start_node(run_dir / "delegated", Path(os.environ["PORTCULLIS_BIN"]), own_env,
                          f"renew-{time.monotonic_ns()}", delegated={"token_lifetime_ms": 300_000})
        admin = (a, kafka_env["KAFKA_ADMIN_PASSWORD"])
        errors: list = []
        delivered: list = []
        p = Producer({**conf(node, "dlg-ann"), "linger.ms": 20})
        p.produce(topic, b"v", on_delivery=lambda err, msg: (errors if err else delivered).append(err or 1))
        assert p.flush(30) == 0 and errors == [], errors
        [first] = token_times(java, own_env["KAFKA_SASL_BOOTSTRAP"], admin, "dlg-ann")
        read_ms = time.time() * 1000
        # Issued to expire 20 s later and to live 5 min. On a loaded machine the first flush and the
        # Java tool's start can take past the renewal point (80 % of 20 s): then the expiry read is
        # one renewal later, no more than 20 s after the read (seen on CI: 36.4 s after issue).
        life = first["expiry"] - first["issued"]
        assert life == 20_000 or 20_000 < life and first["expiry"] <= read_ms + 20_000, first
        assert first["max"] - first["issued"] == 300_000, first
        # Keep producing past the first expiry (renewed at ~80 % of it, Kafka's refresh rule) and the
        # second; the token must never lapse.
        expiries = [first["expiry"]]
        start = time.monotonic()
        while time.monotonic() - start < 45:
            p.produce(topic, b"v", on_delivery=lambda err, msg: (errors if err else delivered).append(err or 1))
            p.poll(0.5)
            if time.monotonic() - start > 15 * len(expiries):
                [now] = token_times(java, own_env["KAFKA_SASL_BOOTSTRAP"], admin, "dlg-ann")
                assert now["id"] == first["id"], ("renewed, never replaced", first, now)
                expiries.append(now["expiry"])
        assert p.flush(30) == 0 and errors == [], errors[:5]
        [last] = token_times(java, own_env["KAFKA_SASL_BOOTSTRAP"], admin, "dlg-ann")
        assert last["id"] == first["id"], (first, last)
        expiries.append(last["expiry"])
        # Each renewal moved the expiry forward (Kafka renews by at most its expiry time, 20 s), and
        # the token is now valid past the first two expiries.
        assert expiries == sorted(expiries) and len(set(expiries)) >= 3, expiries
        assert last["expiry"] > first["expiry"] + 20_000 and last["max"] == first["max"], (first, last)
        log = node.log_tail(400)
        assert log.count("upstream delegation token renewed") >= 2, log[-3000:]
        assert log.count("upstream delegation token created") == 1, log[-3000:]
        del p
    finally:
        if node is not None:
            node.stop()
        kafka.stop()
