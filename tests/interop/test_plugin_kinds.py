"""Every plugin kind dropped into a node's plugin directory and used by real clients against the
suite's Kafka: the five out-of-tree examples (examples/*, each under 60 lines, built with cargo
here), the panicking library (every kind panics on purpose and the node lives), and what a node
refuses at start (a typo in a plugin's table, a table for no plugin) with the plugin, the key and
the line.

| test | plugin (kind) | client |
|---|---|---|
| prefix authorizer | prefix-authorizer (authorizer) | kafka-python: its own topic yes, another user's TOPIC_AUTHORIZATION_FAILED |
| certificate mapping | principal-mapping (principal builder) | confluent-kafka over SASL_SSL with a client certificate: the mapped principal is what the ACLs (and the audit log) see |
| password rotation | file-password (login module) | confluent-kafka produces while the upstream password changes on Kafka and in the file |
| topic guard | topic-guard (forwarding policy) | confluent-kafka: produce to `audit.*` refused, other topics and fetches not |
| authentication log | auth-log (event subscriber) | kafka-python logins, good and bad |
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType)
from kafka import KafkaProducer
from kafka.errors import TopicAuthorizationFailedError

from clients import confluent_consume, kafka_python_conf, set_scram_password
from conftest import (PORTCULLIS_USERS, Gateway, PortcullisProcess, TlsFiles, _need, host_port, target,
                      toml_str)
from test_plugin_mechanism import built_library

pytestmark = pytest.mark.skipif(target() != "portcullis", reason="Portcullis-only: its plugin directory")

EXAMPLES = {
    "prefix-authorizer": ("portcullis-example-prefix-authorizer", "portcullis_example_prefix_authorizer"),
    "principal-mapping": ("portcullis-example-principal-mapping", "portcullis_example_principal_mapping"),
    "file-password": ("portcullis-example-file-login", "portcullis_example_file_login"),
    "topic-guard": ("portcullis-example-topic-guard", "portcullis_example_topic_guard"),
    "auth-log": ("portcullis-example-auth-log", "portcullis_example_auth_log"),
    "panicking": ("portcullis-example-panicking-plugin", "portcullis_example_panicking_plugin"),
    "bad-abi": ("portcullis-example-bad-abi-plugin", "portcullis_example_bad_abi_plugin"),
}


def start_node(launcher, name: str, libs: list[str], extra: str, *, users: dict[str, str] | None = None,
               upstream: dict | None = None, tls: TlsFiles | None = None, tls_lines: str = "",
               policy: str = "passthrough", start: bool = True) -> PortcullisProcess:
    """A Portcullis with the example libraries `libs` in its plugin directory, the forwarding
    policy `policy` and `extra` TOML appended to its configuration (sections that choose plugins,
    `[plugins.config.*]` tables)."""
    workdir = launcher.run_dir / f"portcullis-{name}"
    workdir.mkdir(parents=True, exist_ok=False)
    plugins = workdir / "plugins"
    plugins.mkdir()
    for lib in libs:
        shutil.copy(built_library(*EXAMPLES[lib]), plugins)
    p = PortcullisProcess(launcher.binary, workdir, name)
    up = upstream or {"bootstrap_servers": [launcher.kafka["KAFKA_BOOTSTRAP"]], "security_protocol": "PLAINTEXT"}
    p.write_config(upstream=up, tls=tls, plugin_dir=plugins)
    text = p.config.read_text()
    if tls is not None:
        text = text.replace('client_auth = "none"\n', tls_lines, 1)
    text = text.replace('[forwarding]\npolicy = "passthrough"', f'[forwarding]\npolicy = {toml_str(policy)}', 1)
    p.config.write_text(text + "\n" + extra + "\n")
    for user, password in (users or PORTCULLIS_USERS).items():
        p.scram_add(user, password, "SCRAM-SHA-512")
        p.scram_add(user, password, "SCRAM-SHA-256")
    if start:
        p.start()
        launcher.processes.append(p)
    return p


def gateway_of(p: PortcullisProcess, protocol: str = "SASL_PLAINTEXT", ca: Path | None = None,
               users: dict[str, str] | None = None) -> Gateway:
    return Gateway(name=p.name, bootstrap=p.bootstrap, security_protocol=protocol,
                   users=dict(users or PORTCULLIS_USERS), broker_addresses={}, hidden_ports=set(), ca_file=ca,
                   process=p)


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def kafka_admin(kafka_env) -> AdminClient:
    """Kafka's own admin (SASL as the super user admin), for users, ACLs and topics on Kafka."""
    return AdminClient({
        "bootstrap.servers": kafka_env["KAFKA_SASL_BOOTSTRAP"], "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": kafka_env["KAFKA_ADMIN_USER"],
        "sasl.password": kafka_env["KAFKA_ADMIN_PASSWORD"], "log_level": 3,
    })


def create_topic(admin: AdminClient, topic: str) -> None:
    for f in admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)],
                                 operation_timeout=30).values():
        f.result(timeout=60)


def produce_outcome(conf: dict, topic: str, n: int = 5, timeout: float = 30) -> tuple[int, list[KafkaError]]:
    """Produces `n` records; returns (delivered, errors) — errors as librdkafka reports them."""
    errors: list[KafkaError] = []
    delivered = []

    def on_delivery(err, _msg):
        (errors.append(err) if err is not None else delivered.append(1))

    p = Producer({**conf, "acks": "all", "message.timeout.ms": int(timeout * 1000) - 5000,
                  "error_cb": errors.append})
    for i in range(n):
        p.produce(topic, key=str(i).encode(), value=b"v" * 10, on_delivery=on_delivery)
    p.flush(timeout)
    return len(delivered), errors


# ---- Authorizer ----------------------------------------------------------------------------------

def test_prefix_authorizer_gives_each_principal_its_own_topics(launcher, unique):
    p = start_node(launcher, "prefix-authorizer", ["prefix-authorizer"],
                   '[authorizer]\nplugin = "prefix-authorizer"\n')
    gw = gateway_of(p)
    own, other = f"alice.{unique('orders')}", f"carol.{unique('orders')}"
    conf = kafka_python_conf(gw, "SCRAM-SHA-512", *gw.user("alice"))
    producer = KafkaProducer(acks="all", max_block_ms=20000, **conf)
    try:
        producer.send(own, b"mine").get(timeout=30)
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send(other, b"not mine").get(timeout=30)
    finally:
        producer.close(timeout=5)
    # carol may use hers (and alice's topic is hers alone).
    conf = kafka_python_conf(gw, "PLAIN", *gw.user("carol"))
    producer = KafkaProducer(acks="all", max_block_ms=20000, **conf)
    try:
        producer.send(other, b"carol's").get(timeout=30)
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send(own, b"alice's").get(timeout=30)
    finally:
        producer.close(timeout=5)


# ---- Principal builder ---------------------------------------------------------------------------

def client_certificate(tls: TlsFiles, directory: Path, subject: str) -> tuple[Path, Path]:
    """A client certificate for `subject`, signed by the suite's test CA."""
    directory.mkdir(parents=True, exist_ok=True)

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True, timeout=60)

    run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "client.key")
    run("req", "-new", "-key", "client.key", "-subj", subject, "-out", "client.csr")
    (directory / "client.ext").write_text(
        "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n")
    run("x509", "-req", "-in", "client.csr", "-CA", str(tls.ca_cert), "-CAkey", str(tls.ca_cert.parent / "ca.key"),
        "-CAcreateserial", "-days", "2", "-sha256", "-extfile", "client.ext", "-out", "client.pem")
    return directory / "client.pem", directory / "client.key"


def test_principal_mapping_maps_the_client_certificate_and_acls_see_the_mapped_principal(
        launcher, tls_files, kafka_env, unique, run_dir):
    users = {**PORTCULLIS_USERS, "admin": "admin-through-portcullis"}
    audit = launcher.run_dir / "portcullis-principal-mapping-audit.jsonl"
    p = start_node(
        launcher, "principal-mapping", ["principal-mapping"],
        '[principal]\nplugin = "principal-mapping"\n\n'
        '[plugins.config.principal-mapping]\n'
        'rules = ["RULE:^CN=([^,]+),OU=apps,.*$/$1/L", "DEFAULT"]\n\n'
        '[authorizer]\nplugin = "acl"\nsuper_users = ["User:admin"]\n\n'
        f'[audit]\nfile = {toml_str(str(audit))}\nlog_allowed = true\n',
        users=users, tls=tls_files,
        tls_lines=f'client_auth = "requested"\nca_file = {toml_str(str(tls_files.ca_cert))}\n')
    cert, key = client_certificate(tls_files, run_dir / "client-cert", "/C=DE/O=example/OU=apps/CN=Svc-Orders")
    topic = unique("mapped")
    create_topic(kafka_admin(kafka_env), topic)
    gw = gateway_of(p, "SASL_SSL", tls_files.ca_cert, users)

    def conf(user: str, with_cert: bool) -> dict:
        c = {"bootstrap.servers": gw.bootstrap, "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
             "sasl.username": user, "sasl.password": users[user], "ssl.ca.location": str(tls_files.ca_cert),
             "log_level": 3}
        if with_cert:
            c.update({"ssl.certificate.location": str(cert), "ssl.key.location": str(key)})
        return c

    # Through Portcullis' own CreateAcls: the certificate's principal may write, nobody else.
    admin = AdminClient(conf("admin", False))
    for op in (AclOperation.WRITE, AclOperation.DESCRIBE):
        binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:svc-orders", "*", op,
                             AclPermissionType.ALLOW)
        for f in admin.create_acls([binding], request_timeout=30).values():
            f.result()

    delivered, errors = produce_outcome(conf("alice", True), topic)
    assert (delivered, errors) == (5, []), [e.str() for e in errors]
    # The same SASL login without the certificate is User:alice, who has no ACL.
    delivered, errors = produce_outcome(conf("alice", False), topic, n=1, timeout=15)
    assert delivered == 0
    assert any(e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for e in errors), [e.str() for e in errors]

    def audited() -> list[dict] | None:
        """The audit lines about the topic, once both the allowed write and a denial are there."""
        if not audit.exists():
            return None
        lines = [json.loads(line) for line in audit.read_text().splitlines()]
        about = [line for line in lines if topic in line.get("resource", "")]
        done = any(x["decision"] == "ALLOWED" and x["operation"] == "WRITE" for x in about) and \
            any(x["decision"] == "DENIED" for x in about)
        return about if done else None

    about = wait_for(audited, 10, "the audit lines of the allowed write and the denial")
    assert {x["principal"] for x in about if x["decision"] == "ALLOWED"} == {"User:svc-orders"}, about
    # Without the certificate even Describe is denied (so the client never gets as far as a write).
    assert {x["principal"] for x in about if x["decision"] == "DENIED"} == {"User:alice"}, about


# ---- Login module ----------------------------------------------------------------------------------

def test_file_login_rotates_the_upstream_password_without_dropping_clients(
        launcher, kafka_env, unique, monkeypatch):
    """Portcullis authenticates to Kafka's REAUTH listener (sessions of 5 s, so upstream connections
    re-authenticate every ~4.5 s) as a user of its own whose password lives in a file. The password
    changes on Kafka (AlterUserScramCredentials) and in the file while a producer runs through
    Portcullis: the login module re-reads the file on the host's refresh schedule, and every
    upstream re-authentication after the change uses the new password — the old one no longer
    works on Kafka, so one that did not would lose its connection and the client's."""
    reauth = _need("KAFKA_SASL_REAUTH_BOOTSTRAP")
    user = f"rotating-{uuid.uuid4().hex[:8]}"
    first, second = uuid.uuid4().hex, uuid.uuid4().hex
    admin = kafka_admin(kafka_env)

    def set_password(password: str) -> None:
        set_scram_password(admin, user, password)

    set_password(first)
    topic = unique("rot")
    acls = [AclBinding(ResourceType.TOPIC, "rot-", ResourcePatternType.PREFIXED, f"User:{user}", "*",
                       AclOperation.ALL, AclPermissionType.ALLOW),
            AclBinding(ResourceType.GROUP, "rot-", ResourcePatternType.PREFIXED, f"User:{user}", "*",
                       AclOperation.ALL, AclPermissionType.ALLOW),
            AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, f"User:{user}", "*",
                       AclOperation.ALL, AclPermissionType.ALLOW)]
    for f in admin.create_acls(acls, request_timeout=30).values():
        f.result()
    create_topic(admin, topic)

    password_file = launcher.run_dir / f"{user}.password"
    password_file.write_text(first + "\n")
    monkeypatch.setenv("RUST_LOG", "info,portcullis_host::server::upstream=debug")
    p = start_node(
        launcher, "file-login", ["file-password"],
        '[upstream.login]\nplugin = "file-password"\n\n'
        '[plugins.config.file-password]\n'
        f'username = {toml_str(user)}\npassword_file = {toml_str(str(password_file))}\n'
        'mechanism = "SCRAM-SHA-512"\ncheck_interval_ms = 2000\n',
        upstream={"bootstrap_servers": [reauth], "security_protocol": "SASL_PLAINTEXT"})
    monkeypatch.delenv("RUST_LOG")
    gw = gateway_of(p)
    user_a, password_a = gw.user("alice")
    conf = {"bootstrap.servers": gw.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user_a, "sasl.password": password_a,
            "log_level": 3}

    stats: list[dict] = []
    errors: list[KafkaError] = []
    failures: list[str] = []
    delivered: list[str] = []
    producer = Producer({**conf, "acks": "all", "linger.ms": 0, "statistics.interval.ms": 1000,
                         "stats_cb": lambda s: stats.append(json.loads(s)), "error_cb": errors.append})

    def on_delivery(err, msg):
        (failures.append(str(err)) if err is not None else delivered.append(msg.key().decode()))

    changed_at = None
    start = time.monotonic()
    sent = 0
    while time.monotonic() - start < 26:
        if changed_at is None and time.monotonic() - start > 6:
            set_password(second)
            tmp = password_file.with_suffix(".new")
            tmp.write_text(second + "\n")
            tmp.replace(password_file)
            changed_at = time.monotonic()
        producer.produce(topic, key=f"k{sent}".encode(), value=b"x" * 20, on_delivery=on_delivery)
        sent += 1
        producer.poll(0.1)
    assert producer.flush(30) == 0
    producer.poll(1.5)  # a last statistics report

    assert not failures, failures[:5]
    assert not errors, [e.str() for e in errors[:5]]
    assert len(delivered) == sent
    # No connection of the client to Portcullis was lost (librdkafka's own counters).
    brokers = [b for b in stats[-1]["brokers"].values() if b.get("nodeid", -1) >= 0]
    assert brokers and all(b["disconnects"] == 0 for b in brokers), \
        [(b["name"], b["connects"], b["disconnects"]) for b in brokers]
    got = confluent_consume(conf, topic, f"{topic}-check", sent)
    assert set(got) == {f"k{i}" for i in range(sent)}

    log = p.log_path.read_text(errors="replace")
    # The plugin logged through the host, under its name; the host's scheduler refreshed it.
    assert re.search(r"INFO .*the upstream password changed.*plugin=\"?file-password", log) or \
        re.search(r"INFO .*plugin=\"?file-password\"?.*the upstream password changed", log), log[-3000:]
    assert "upstream credential refreshed" in log
    # Upstream sessions were re-authenticated after the change (and only the new password works).
    reauths = len(re.findall(r"upstream session re-authenticated", log))
    assert reauths >= 3, f"{reauths} upstream re-authentications in the run"
    assert not re.search(r"\b(WARN|ERROR)\b", log), [l for l in log.splitlines() if "WARN" in l or "ERROR" in l][:5]

    # The control: Kafka refuses the old password now.
    old = Producer({"bootstrap.servers": reauth, "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user, "sasl.password": first,
                    "log_level": 0, "error_cb": errors.append})
    wait_for(lambda: old.poll(0.2) is not None or any(e.code() == KafkaError._AUTHENTICATION for e in errors),
             15, "Kafka refusing the old password")
    del old


# ---- Forwarding policy -----------------------------------------------------------------------------

def test_topic_guard_refuses_produce_to_matching_topics(launcher, kafka_env, unique):
    p = start_node(launcher, "topic-guard", ["topic-guard"],
                   '[plugins.config.topic-guard]\nrefuse_produce_to = "^audit\\\\."\n', policy="topic-guard")
    assert 'policy = "topic-guard"' in p.config.read_text()
    gw = gateway_of(p)
    guarded, free = f"audit.{unique('events')}", unique("orders")
    admin = kafka_admin(kafka_env)
    create_topic(admin, guarded)
    # What is already in the guarded topic (written to Kafka directly) may still be read.
    direct = Producer({"bootstrap.servers": kafka_env["KAFKA_BOOTSTRAP"], "log_level": 3})
    for i in range(3):
        direct.produce(guarded, key=f"k{i}".encode(), value=b"before")
    assert direct.flush(30) == 0

    conf = {"bootstrap.servers": gw.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice", "sasl.password": gw.users["alice"],
            "log_level": 3}
    delivered, errors = produce_outcome(conf, guarded, n=1, timeout=15)
    assert delivered == 0
    assert any(e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for e in errors), [e.str() for e in errors]
    assert produce_outcome(conf, free) == (5, [])
    got = confluent_consume(conf, guarded, unique("reader"), 3)
    assert set(got) == {"k0", "k1", "k2"}


# ---- Event subscriber -------------------------------------------------------------------------------

def test_auth_log_appends_every_authentication_outcome(launcher):
    log = launcher.run_dir / "auth-log.jsonl"
    p = start_node(launcher, "auth-log", ["auth-log"],
                   '[[events.subscribers]]\nplugin = "auth-log"\n\n'
                   f'[plugins.config.auth-log]\npath = {toml_str(str(log))}\n')
    gw = gateway_of(p)
    conf = kafka_python_conf(gw, "SCRAM-SHA-512", *gw.user("alice"))
    producer = KafkaProducer(**conf)
    producer.close(timeout=5)
    bad = kafka_python_conf(gw, "PLAIN", "carol", "not-her-password")
    with pytest.raises(Exception):  # noqa: B017 - kafka-python retries, then gives up one way or another
        KafkaProducer(max_block_ms=3000, reconnect_backoff_max_ms=500, **bad).partitions_for("x")

    def lines():
        if not log.exists():
            return None
        parsed = [json.loads(line) for line in log.read_text().splitlines()]
        ok = [x for x in parsed if x["event"] == "SessionAuthenticated" and x["principal"] == "User:alice"]
        failed = [x for x in parsed if x["event"] == "AuthenticationFailed" and x["mechanism"] == "PLAIN"]
        return parsed if ok and failed else None

    parsed = wait_for(lines, 15, "a success and a failure in the log")
    assert all(x["client"] == "127.0.0.1" for x in parsed), parsed
    ok = next(x for x in parsed if x["event"] == "SessionAuthenticated")
    assert ok["mechanism"] == "SCRAM-SHA-512"


# ---- Panics are contained ---------------------------------------------------------------------------

def test_panicking_plugins_fail_closed_and_the_node_lives(launcher, unique):
    users = {**PORTCULLIS_USERS, "panicky": "panicky-through-portcullis"}
    p = start_node(launcher, "panicking-kinds", ["panicking"],
                   '[authorizer]\nplugin = "panic-authorizer"\n\n'
                   '[principal]\nplugin = "panic-principal"\n\n'
                   '[[events.subscribers]]\nplugin = "panic-events"\n',
                   users=users)
    gw = gateway_of(p, users=users)
    conf = {"bootstrap.servers": gw.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": users["alice"],
            "log_level": 3}
    # The authorizer panics on this topic: that request is denied, the node serves the next.
    delivered, errors = produce_outcome(conf, unique("panic"), n=1, timeout=15)
    assert delivered == 0
    assert any(e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for e in errors), [e.str() for e in errors]
    assert produce_outcome(conf, unique("calm")) == (5, [])
    # The principal builder panics for this user: the login fails, others still get in.
    from clients import confluent_expect_auth_failure  # noqa: PLC0415
    confluent_expect_auth_failure({**conf, "sasl.username": "panicky", "sasl.password": users["panicky"]})
    assert produce_outcome(conf, unique("calm")) == (5, [])
    assert p.alive()
    log = p.log_path.read_text(errors="replace")
    assert "authorizer plugin failed" in log
    assert "panicked" in log  # the principal builder's panic, reported as a failed login
    assert "event subscriber plugin failed" in log


# ---- Refusals at start --------------------------------------------------------------------------------

def check_config(launcher, name: str, libs: list[str], extra: str) -> subprocess.CompletedProcess:
    p = start_node(launcher, name, libs, extra, start=False)
    return subprocess.run([str(p.binary), "check-config", "--config", str(p.config)], capture_output=True,
                          text=True, timeout=60)


def test_a_typo_in_a_plugin_table_refuses_the_start_naming_the_plugin_the_key_and_the_line(launcher):
    r = check_config(launcher, "typo", ["prefix-authorizer"],
                     '[authorizer]\nplugin = "prefix-authorizer"\n\n'
                     '[plugins.config.prefix-authorizer]\nseperator = "-"\n')
    assert r.returncode == 1, r.stdout + r.stderr
    config = (launcher.run_dir / "portcullis-typo" / "portcullis.toml").read_text().splitlines()
    line = next(i for i, text in enumerate(config, 1) if text.startswith("seperator"))
    assert f"line {line}, column 1 (`plugins.config.prefix-authorizer.seperator`): " \
           "plugin prefix-authorizer: unknown field `seperator`" in r.stderr, r.stderr
    assert r.stderr.count("unknown field") == 1, r.stderr  # said once, not once per error layer

    r = check_config(launcher, "wrong-type", ["file-password"],
                     '[plugins.config.file-password]\nusername = "u"\npassword_file = "/nonexistent"\n'
                     'mechanism = "PLAIN"\ncheck_interval_ms = "soon"\n')
    assert r.returncode == 1
    assert "(`plugins.config.file-password.check_interval_ms`): plugin file-password: invalid type" in r.stderr, \
        r.stderr
    assert "soon" not in r.stderr, "a value is never quoted back (it could be a secret)"

    r = check_config(launcher, "no-such-plugin", ["topic-guard"], '[plugins.config.topic-gaurd]\nx = 1\n')
    assert r.returncode == 1
    assert "plugins.config.topic-gaurd: no plugin named `topic-gaurd`" in r.stderr, r.stderr
    assert "topic-guard" in r.stderr  # among the known plugins

    r = check_config(launcher, "unknown-kind-choice", ["topic-guard"], '[principal]\nplugin = "topic-guard"\n')
    assert r.returncode == 1
    assert "principal.plugin: no principal builder plugin named `topic-guard`; available: default" in r.stderr, \
        r.stderr


def test_plugins_lists_every_plugin_with_its_kind_version_file_and_configuration(launcher):
    p = start_node(launcher, "listing", list(EXAMPLES),
                   '[plugins.config.topic-guard]\nrefuse_produce_to = "^audit"\n\n'
                   '[plugins.config.principal-mapping]\nrules = ["DEFAULT"]\n', start=False)
    r = subprocess.run([str(p.binary), "plugins", "--config", str(p.config)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    out = r.stdout

    def line(name: str) -> str:
        found = [x for x in out.splitlines() if x.split() and x.split()[0] == name]
        assert len(found) == 1, f"{name}: {found}\n{out}"
        return found[0]

    for name, kind in [("prefix-authorizer", "authorizer"), ("principal-mapping", "principal builder"),
                       ("topic-guard", "forwarding policy"), ("panic-events", "event subscriber"),
                       ("panic-login", "login module"), ("X-PANIC", "SASL mechanism")]:
        text = line(name)
        assert kind in text and "plugin API 0.1.0" in text and ".so" in text, text
        assert "config: valid" in text, text
    # Plugins whose table is missing or wrong are listed with the reason.
    assert "config: INVALID" in line("file-password") and "missing field `username`" in line("file-password")
    assert "config: INVALID" in line("auth-log")
    assert "policy topic-guard" in line("topic-guard")
    # The built-ins of every kind are there too, and the wrong-ABI library is refused.
    for name in ("acl", "default", "password", "passthrough", "SCRAM-SHA-512"):
        assert "built in" in line(name)
    assert "libportcullis_example_bad_abi_plugin.so: ABI version 1, this host speaks 2" in out
