"""Live reconfiguration (issue 23): a running Portcullis reads its configuration again — on a
replaced TLS file with no trigger, on SIGHUP, on `portcullis reload` — and applies it whole or not
at all, without dropping a connection.

Each test runs a Portcullis of its own (reload_support.ReloadNode: free loopback ports, its own
directory and CA), so the reload counters and the configuration belong to that test alone and the
file may run in parallel with the others.
"""

from __future__ import annotations

import json
import shutil
import threading
import time

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from clients import confluent_conf, confluent_consume, confluent_create_topic, confluent_produce, value_for
from conftest import PORTCULLIS_USERS, free_ports, make_tls_files
from kafka_wire import ERROR_UNSUPPORTED_SASL_MECHANISM, Closed, Conn
from reauth_support import ReauthConn
from cluster_support import cluster_tls, store_sections
from reload_support import ReloadNode, Settings, wait_for, cluster_fingerprints, replace_file, served_serial, server_cert

pytestmark = pytest.mark.portcullis_only

ROTATION_DEADLINE_S = 10.0  # issue 23: a replaced file is served within 10 s, with no trigger
ROTATIONS = 3


def metadata_ok(conf: dict) -> bool:
    """A new connection logs in and gets the cluster's metadata."""
    admin = AdminClient(conf)
    try:
        admin.list_topics(timeout=10)
        return True
    except KafkaException:
        return False


class KeepProducing:
    """A confluent-kafka producer that produces one record every 10 ms on its own thread, and
    keeps every error it is told about (delivery reports and librdkafka's error callback)."""

    def __init__(self, conf: dict, topic: str):
        self.errors: list[str] = []
        self.sent: dict[str, bytes] = {}
        self.delivered = 0
        self.topic = topic
        self.producer = Producer({**conf, "acks": "all", "linger.ms": 5,
                                  "error_cb": lambda e: self.errors.append(f"error_cb: {e}")})
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def on_delivery(self, err, msg):
        if err is not None:
            self.errors.append(f"delivery: {err}")
        else:
            self.delivered += 1

    def run(self):
        i = 0
        while not self.stop.is_set():
            key = f"rot-{i}"
            self.sent[key] = value_for(key)
            self.producer.produce(self.topic, key=key.encode(), value=self.sent[key], on_delivery=self.on_delivery)
            self.producer.poll(0.01)
            i += 1

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(timeout=30)
        self.producer.flush(60)


def test_certificates_replaced_on_disk_are_served_within_10s_while_a_producer_keeps_producing(
        launcher, run_dir, unique):
    name = unique("reload-rotate")
    tls = make_tls_files(run_dir / f"{name}-ca")
    live = run_dir / f"{name}-live"  # the files the node serves, replaced in place below
    live.mkdir()
    shutil.copy(tls.server_cert, live / "cert.pem")
    shutil.copy(tls.server_key, live / "key.pem")
    node = ReloadNode(launcher, name, Settings(tls=tls, cert_file=live / "cert.pem", key_file=live / "key.pem"))
    host, port = "127.0.0.1", node.process.listener_port
    serials = [served_serial(host, port, tls.ca_cert)]
    rotations = []
    for i in range(ROTATIONS):
        serial = 0x5EC0_4D00 + 100 * i + (time.time_ns() % 100)
        assert serial not in serials
        serials.append(serial)
        rotations.append((serial, *server_cert(tls, run_dir / f"{name}-next-{i}", serial)))

    gw = node.gateway(ca_file=tls.ca_cert)
    conf = confluent_conf(gw, "SCRAM-SHA-512", *gw.user("alice"))
    topic = unique("reload-rotate")
    confluent_create_topic(conf, topic, partitions=1)
    picked_up = []
    with KeepProducing(conf, topic) as producing:
        wait_for(lambda: producing.delivered >= 50, 30, "the producer delivers before the rotation")
        for serial, new_cert, new_key in rotations:
            replaced_at = time.monotonic()
            replace_file(new_key, live / "key.pem")
            replace_file(new_cert, live / "cert.pem")
            wait_for(lambda: served_serial(host, port, tls.ca_cert) == serial, ROTATION_DEADLINE_S,
                     f"a new TLS handshake sees the certificate with serial {serial}")
            picked_up.append(round(time.monotonic() - replaced_at, 1))
            delivered_at_rotation = producing.delivered
            # The producer's connections (accepted with an older certificate) carry on.
            wait_for(lambda: producing.delivered >= delivered_at_rotation + 50, 30,
                     "the producer keeps delivering after the rotation")
    assert producing.errors == [], producing.errors[:5]
    assert producing.delivered == len(producing.sent)
    assert node.reloads("applied") >= ROTATIONS
    print(f"each new certificate served {picked_up} s after its files were replaced; "
          f"{producing.delivered} records, 0 errors")
    # Every acknowledged record is there, exactly once (a new consumer: a new TLS handshake).
    got = confluent_consume(conf, topic, unique("reload-rotate-group"), len(producing.sent))
    assert got == producing.sent


def test_broken_reloads_are_refused_with_the_key_named_and_a_good_one_applies(launcher, run_dir, unique):
    name = unique("reload-refuse")
    tls = make_tls_files(run_dir / f"{name}-ca")
    other_cert, other_key = server_cert(tls, run_dir / f"{name}-other", 4242)
    audit = run_dir / f"{name}-audit.jsonl"
    audit_section = f"\n[audit]\nfile = {json.dumps(str(audit))}\n"
    good = Settings(tls=tls, tail=audit_section)
    node = ReloadNode(launcher, name, good)
    host, port = "127.0.0.1", node.process.listener_port
    serial = served_serial(host, port, tls.ca_cert)
    conf = confluent_conf(node.gateway(ca_file=tls.ca_cert), "SCRAM-SHA-512", *node.gateway().user("alice"))
    assert metadata_ok(conf)
    (other_port,) = free_ports(1)

    good_text = node.text(good)
    broken = [
        ("a TOML syntax error", good_text + "\n[listener\n", ["line"]),
        ("an unknown key", node.text(Settings(tls=tls, tail=audit_section, extra_listener="bogus_key = 1")),
         ["listener.bogus_key"]),
        ("a missing certificate file",
         node.text(Settings(tls=tls, tail=audit_section, cert_file=run_dir / f"{name}-missing.pem")),
         ["listener.tls.cert_file"]),
        ("a key that is not the certificate's", node.text(Settings(tls=tls, tail=audit_section, key_file=other_key)),
         ["listener.tls.key_file"]),
        ("a key that needs a restart", node.text(Settings(tls=tls, tail=audit_section, address_port=other_port)),
         ["listener.address", "restart"]),
    ]
    for i, (what, text, named) in enumerate(broken, start=1):
        node.write_text(text)
        r = node.reload()
        said = r.stdout + r.stderr
        assert r.returncode != 0, f"{what}: reload exited 0: {said}"
        assert "refused" in said, f"{what}: {said}"
        for word in named:
            assert word in said, f"{what}: {word!r} not in {said!r}"
        assert node.reloads("refused") == i, what
        # The old configuration still serves: its certificate, its port, its logins.
        assert served_serial(host, port, tls.ca_cert) == serial, what
        assert metadata_ok(conf), what
    assert node.reloads("applied") == 0
    assert other_cert.exists()

    # A good reload after them applies.
    node.write(Settings(tls=tls, tail=audit_section, mechanisms=["SCRAM-SHA-512", "SCRAM-SHA-256"]))
    r = node.reload()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "applied" in r.stdout and "listener.sasl_mechanisms" in r.stdout, r.stdout
    assert node.reloads("applied") == 1
    assert metadata_ok(conf)

    # The audit log says why each was refused, and what the good one changed.
    def reload_records():
        lines = audit.read_text().splitlines() if audit.exists() else []
        return [r for r in map(json.loads, lines) if r.get("event") == "config_reload"]

    records = wait_for(lambda: (lambda rs: rs if len(rs) == len(broken) + 1 else None)(reload_records()), 5,
                       "one audit record per reload")
    assert [r["result"] for r in records] == ["refused"] * len(broken) + ["applied"]
    for record, (what, _, named) in zip(records, broken):
        assert all(word in record["reason"] for word in named), (what, record)
    assert records[-1]["changed"] == ["listener.sasl_mechanisms"], records[-1]
    assert records[-1]["trigger"] == "admin"


def test_a_mechanism_removed_by_sighup_is_refused_to_new_logins_and_at_the_next_reauthentication(launcher, unique):
    settings = Settings(reauth_ms=60_000)
    node = ReloadNode(launcher, unique("reload-mech"), settings)
    host, port = "127.0.0.1", node.process.listener_port
    password = PORTCULLIS_USERS["alice"]
    session = ReauthConn(host, port)
    try:
        session.login_plain("alice", password)
        assert session.metadata_v1()

        node.write(Settings(reauth_ms=60_000, mechanisms=["SCRAM-SHA-512", "SCRAM-SHA-256"]))
        node.sighup()
        wait_for(lambda: node.reloads("applied") == 1, 10, "the SIGHUP reload is applied")

        # A new login with the removed mechanism: UNSUPPORTED_SASL_MECHANISM and the enabled list.
        with Conn(host, port) as fresh:
            error, enabled = fresh.sasl_handshake("PLAIN")
        assert error == ERROR_UNSUPPORTED_SASL_MECHANISM
        assert enabled == ["SCRAM-SHA-512", "SCRAM-SHA-256"]

        # The session that logged in with it is not closed by the reload...
        time.sleep(1.5)
        assert session.metadata_v1()
        # ...but its re-authentication with it is refused, and the connection is closed.
        error, enabled = session.sasl_handshake("PLAIN")
        assert error == ERROR_UNSUPPORTED_SASL_MECHANISM
        assert enabled == ["SCRAM-SHA-512", "SCRAM-SHA-256"]
        session.wait_closed(timeout=5)
    finally:
        session.close()


def test_a_super_user_added_by_reload_is_one_for_a_new_connection(launcher, unique):
    node = ReloadNode(launcher, unique("reload-super"), Settings(super_users=["User:admin"]))
    gw = node.gateway()
    carol = confluent_conf(gw, "SCRAM-SHA-512", *gw.user("carol"))
    topic = unique("reload-super")
    # carol has no ACL: Portcullis' authorizer refuses her the topic.
    with pytest.raises(KafkaException):
        confluent_create_topic(carol, topic, partitions=1)

    node.write(Settings(super_users=["User:admin", "User:carol"]))
    r = node.reload()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "authorizer.super_users" in r.stdout, r.stdout

    confluent_create_topic(carol, topic, partitions=1)
    sent = confluent_produce(carol, topic, 20)
    assert confluent_consume(carol, topic, unique("reload-super-group"), len(sent)) == sent


def test_allow_everyone_if_no_acl_found_changed_by_reload_applies_to_the_next_request(launcher, unique):
    """Kafka's `allow.everyone.if.no.acl.found` switched on and off again by SIGHUP: carol, who has
    no ACL, is refused a topic that has none, then allowed it on the connection she already has,
    then refused again.

    librdkafka remembers a topic its Metadata answer refused and fails `produce()` at once until
    its next metadata refresh (every 500 ms here), so each outcome is awaited over a few refreshes
    (against Kafka itself the client behaves the same)."""
    node = ReloadNode(launcher, unique("reload-everyone"), Settings(super_users=["User:alice"]))
    gw = node.gateway()
    alice = confluent_conf(gw, "SCRAM-SHA-512", *gw.user("alice"))  # a super user
    topic = unique("reload-everyone")
    confluent_create_topic(alice, topic, partitions=1)
    carol = Producer({**confluent_conf(gw, "SCRAM-SHA-512", *gw.user("carol")),
                      "message.timeout.ms": 10000, "retries": 0,
                      "topic.metadata.refresh.interval.ms": 500})

    def produce() -> str:
        out: list[str] = []
        try:
            carol.produce(topic, b"v", on_delivery=lambda err, msg: out.append(err.name() if err else "ok"))
        except KafkaException as e:  # refused from the client's own metadata cache
            return e.args[0].name()
        carol.flush(15)
        return out[0] if out else "no-delivery-report"

    def outcome(expected: str, what: str) -> None:
        seen: list[str] = []
        deadline = time.monotonic() + 10
        while not seen or seen[-1] != expected:
            assert time.monotonic() < deadline, f"not within 10 s: {what}; last outcomes {seen[-5:]}"
            if seen:
                time.sleep(0.1)
            seen.append(produce())

    outcome("TOPIC_AUTHORIZATION_FAILED", "carol refused before any reload")
    for allow, expected in ((True, "ok"), (False, "TOPIC_AUTHORIZATION_FAILED")):
        before = node.reloads("applied")
        node.write(Settings(super_users=["User:alice"], allow_everyone=allow))
        node.sighup()
        wait_for(lambda: node.reloads("applied") > before, 10, "the reload")
        outcome(expected, f"carol's produce with allow_everyone_if_no_acl_found = {allow}")
    carol.flush(5)


def test_cluster_status_shows_each_nodes_config_fingerprint(launcher, run_dir, unique):
    """Two nodes of one kafka-store cluster with the same shared configuration show the same
    fingerprint; a reload of one of them shows as drift, and the same reload of the other ends it."""
    cluster_id = unique("reload-fp")
    tls = cluster_tls(run_dir / cluster_id)  # a CA of this test's own: safe beside other workers
    shared_plugins = run_dir / f"{cluster_id}-plugins"
    shared_plugins.mkdir()
    nodes, settings = [], []
    for i in (1, 2):
        (inter_node_port,) = free_ports(1)
        tail = store_sections(tls, cluster_id=cluster_id, node_name=f"{cluster_id}-node-{i}",
                              listener_port=inter_node_port)
        s = Settings(node_id=i, tail=tail, plugin_dir=shared_plugins, super_users=["User:admin"])
        settings.append(s)
        # The users go into the cluster's topic once, before any node runs (cluster_support does
        # the same): node 2's `scram add` would race with node 1's election as writer.
        nodes.append(ReloadNode(launcher, f"{cluster_id}-{i}", s, add_users=i == 1))

    def both_reported():
        got = cluster_fingerprints(nodes[0].binary, nodes[0].config)
        return got if set(got) == {1, 2} and "-" not in got.values() else None

    start = wait_for(both_reported, 30, "both nodes report a fingerprint")
    assert start[1] == start[2], start

    settings[0].super_users = ["User:admin", "User:carol"]
    nodes[0].write(settings[0])
    r = nodes[0].reload()
    assert r.returncode == 0, r.stdout + r.stderr
    new = r.stdout.split("fingerprint ")[-1].strip()
    assert new != start[1]
    drift = wait_for(lambda: (lambda g: g if g[1] == new else None)(cluster_fingerprints(nodes[0].binary, nodes[0].config)),
                     10, "node 1 reports its new fingerprint")
    assert drift[2] == start[2], drift

    settings[1].super_users = ["User:admin", "User:carol"]
    nodes[1].write(settings[1])
    nodes[1].sighup()
    wait_for(lambda: cluster_fingerprints(nodes[0].binary, nodes[0].config) == {1: new, 2: new}, 10,
             "node 2 reports the same fingerprint after the same reload")


def test_a_java_producer_on_a_removed_mechanism_is_refused_at_its_next_reauthentication(launcher, java, run_dir,
                                                                                        unique):
    """Kafka's Java producer, logged in with PLAIN and re-authenticating every ~5 s (85-95 % of a
    6 s session), keeps producing across a SIGHUP reload that removes PLAIN until its next
    re-authentication, which Portcullis refuses (then it cannot log in again)."""
    from prometheus import security_counters  # noqa: PLC0415

    reauth_ms = 6000
    name = unique("reload-java")
    node = ReloadNode(launcher, name, Settings(reauth_ms=reauth_ms))
    user, password = "alice", PORTCULLIS_USERS["alice"]
    props = run_dir / f"{name}.properties"
    props.write_text(
        f"bootstrap.servers={node.process.bootstrap}\n"
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{user}" password="{password}";\n'
        "max.block.ms=5000\n"
        "delivery.timeout.ms=10000\nrequest.timeout.ms=5000\n"
    )
    topic = unique("reload-java")
    result = {}
    runner = threading.Thread(
        target=lambda: result.update(r=java.run("ReauthProducer", "produce", str(props), topic, "22", "50",
                                                timeout=180)),
        daemon=True)
    runner.start()
    # It logged in and re-authenticated with PLAIN at least once: it is a re-authenticating client.
    wait_for(lambda: security_counters(node.metrics)["successful_reauthentication"] >= 1, 30,
             "the Java producer re-authenticates with PLAIN")

    node.write(Settings(reauth_ms=reauth_ms, mechanisms=["SCRAM-SHA-512", "SCRAM-SHA-256"]))
    node.sighup()
    wait_for(lambda: node.reloads("applied") == 1, 10, "the SIGHUP reload is applied")
    at_reload = security_counters(node.metrics)
    # Its next re-authentication (within one session lifetime of the reload) is refused.
    wait_for(lambda: security_counters(node.metrics)["failed_reauthentication"] > at_reload["failed_reauthentication"],
             reauth_ms / 1000 + 3, "the re-authentication with the removed mechanism is refused")
    runner.join(timeout=200)
    r = result["r"]
    assert r.stdout.strip(), f"ReauthProducer printed nothing ({r.returncode}):\n{r.stderr[-3000:]}"
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    print(f"Java producer: {summary}")
    # Records acknowledged before the refusal, and errors after it: the producer saw the refusal.
    assert summary["acked"] > 0, summary
    assert r.returncode != 0 and summary["failed"] > 0, summary
    # Kafka's own client names the refusal, with the enabled list.
    assert "UnsupportedSaslMechanismException" in summary["first_error"], summary
    assert "[SCRAM-SHA-512, SCRAM-SHA-256]" in summary["first_error"], summary
    assert summary["client_metrics"]["failed-reauthentication-total"] >= 1, summary
    # The reload itself closed nothing: no session was expired or revoked by it.
    assert at_reload["expired_connections_killed"] == 0 and at_reload["revoked_connections_closed"] == 0, at_reload


def test_limits_and_the_session_lifetime_change_by_reload_without_closing_a_connection(launcher, unique):
    """`[limits] max_connections_per_ip` lowered: the connections already open stay, the next one
    from that address is closed at once. `connections_max_reauth_ms` lowered: an existing session
    keeps its lifetime until it re-authenticates, and gets the new one then."""
    node = ReloadNode(launcher, unique("reload-limits"), Settings(reauth_ms=60_000))
    host, port = "127.0.0.1", node.process.listener_port
    password = PORTCULLIS_USERS["alice"]
    first, second = ReauthConn(host, port), ReauthConn(host, port)
    try:
        assert first.login_plain("alice", password).session_lifetime_ms == 60_000
        second.login_plain("alice", password)

        node.write(Settings(reauth_ms=3_000, tail="\n[limits]\nmax_connections_per_ip = 1\n"))
        r = node.reload()
        assert r.returncode == 0, r.stdout + r.stderr
        assert "limits.max_connections_per_ip" in r.stdout and "listener.connections_max_reauth_ms" in r.stdout, \
            r.stdout

        # Both connections (two from one address, over the new limit) are still served.
        assert first.metadata_v1() and second.metadata_v1()
        # A third one from that address is closed at once, without an answer.
        with Conn(host, port) as third:
            assert third.wait_closed(timeout=5) == b""
        # The session lifetime given at the next re-authentication is the new one.
        time.sleep(1.1)  # KIP-368: at least 1 s after the last authentication
        assert first.login_plain("alice", password).session_lifetime_ms == 3_000
        assert first.metadata_v1()
    finally:
        first.close()
        second.close()


def test_upstream_tls_changed_by_reload_applies_to_new_upstream_connections_only(launcher, run_dir, unique):
    """Portcullis connects to Kafka's SSL listener (client certificate required). A reload that
    makes it trust another CA leaves the open upstream connection working and fails the next one
    (the broker's certificate no longer verifies); reloading the right CA again serves new clients."""
    import os  # noqa: PLC0415

    name = unique("reload-upstream-tls")
    good_tls = {"ca_file": os.environ["KAFKA_TLS_CA"], "cert_file": os.environ["KAFKA_TLS_CLIENT_CERT"],
                "key_file": os.environ["KAFKA_TLS_CLIENT_KEY"]}
    upstream = {"bootstrap_servers": [os.environ["KAFKA_SSL_BOOTSTRAP"]], "security_protocol": "SSL"}
    other_ca = make_tls_files(run_dir / f"{name}-other-ca").ca_cert
    node = ReloadNode(launcher, name, Settings(upstream=upstream, upstream_tls=good_tls))
    host, port = "127.0.0.1", node.process.listener_port
    password = PORTCULLIS_USERS["alice"]

    def new_session() -> ReauthConn:
        c = ReauthConn(host, port)
        c.login_plain("alice", password)
        return c

    open_before = new_session()
    try:
        assert open_before.metadata_v1()  # its upstream connection is open now

        node.write(Settings(upstream=upstream, upstream_tls={**good_tls, "ca_file": str(other_ca)}))
        r = node.reload()
        assert r.returncode == 0, r.stdout + r.stderr
        assert "upstream.tls.ca_file" in r.stdout, r.stdout

        assert open_before.metadata_v1()  # the open upstream connection carries on
        after = new_session()
        try:
            with pytest.raises(Closed):  # its upstream handshake fails: the client is closed
                after.metadata_v1()
        finally:
            after.close()

        node.write(Settings(upstream=upstream, upstream_tls=good_tls))
        r = node.reload()
        assert r.returncode == 0, r.stdout + r.stderr
        again = new_session()
        try:
            assert again.metadata_v1()
        finally:
            again.close()
    finally:
        open_before.close()


def test_forwarding_deny_api_keys_changed_by_reload_apply_to_new_connections(launcher, unique):
    """`[forwarding] deny_api_keys` gains CreateTopics (19) by reload: a new connection's
    CreateTopics is refused as Kafka refuses an unauthorized one, other APIs are served; the key
    removed again, topics can be created again."""
    def forwarding(keys: str) -> Settings:
        return Settings(tail=f'\n[forwarding]\npolicy = "passthrough"\ndeny_api_keys = {keys}\n')

    node = ReloadNode(launcher, unique("reload-deny"), forwarding("[]"))
    gw = node.gateway()
    conf = confluent_conf(gw, "SCRAM-SHA-512", *gw.user("alice"))
    topic = unique("reload-deny")
    confluent_create_topic(conf, topic, partitions=1)

    node.write(forwarding("[19]"))
    r = node.reload()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "forwarding.deny_api_keys" in r.stdout, r.stdout
    with pytest.raises(KafkaException) as refused:
        confluent_create_topic(conf, unique("reload-deny-refused"), partitions=1)
    assert "AUTHORIZATION_FAILED" in str(refused.value), refused.value
    sent = confluent_produce(conf, topic, 5)  # the other APIs are still forwarded

    node.write(forwarding("[]"))
    r = node.reload()
    assert r.returncode == 0, r.stdout + r.stderr
    confluent_create_topic(conf, unique("reload-deny-again"), partitions=1)
    assert confluent_consume(conf, topic, unique("reload-deny-group"), len(sent)) == sent
