"""The upstream login and live reconfiguration (issue 23): Portcullis' own login to Kafka's SASL
listener changes by reload, for new upstream connections only.

A node logs in upstream as Kafka's super user `admin` (the built-in password login); a
kafka-python producer produces through it. A reload makes the login a Kafka user of the test's
own that holds no ACL: a new client's produce is refused by Kafka (TOPIC_AUTHORIZATION_FAILED,
its upstream connection is that user's), while the producer that was already there goes on
producing (its upstream connection logged in as admin and is kept). A reload that chooses the
`file-password` login module (examples/file-login, dropped into the plugin directory), reading
admin's password from a file, makes new clients produce again; one naming no such module is
refused naming `upstream.login.plugin`, and the running login goes on.
"""

from __future__ import annotations

import os
import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic, ScramMechanism
from kafka import KafkaProducer
from kafka.errors import TopicAuthorizationFailedError

from clients import kafka_python_conf, set_scram_password
from conftest import PORTCULLIS_USERS, toml_value
from reload_support import ReloadNode, Settings
from test_plugin_mechanism import built_library

pytestmark = pytest.mark.portcullis_only


def kafka_admin(kafka_env) -> AdminClient:
    return AdminClient({
        "bootstrap.servers": kafka_env["KAFKA_SASL_BOOTSTRAP"], "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": kafka_env["KAFKA_ADMIN_USER"],
        "sasl.password": kafka_env["KAFKA_ADMIN_PASSWORD"], "log_level": 3,
    })


def create_topic(admin: AdminClient, topic: str) -> None:
    for f in admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)],
                                 operation_timeout=30).values():
        f.result(timeout=60)


def admin_login(kafka_env) -> dict:
    """`[upstream]` logging in to Kafka's SASL listener as its super user."""
    return {"bootstrap_servers": [kafka_env["KAFKA_SASL_BOOTSTRAP"]], "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-512", "username": kafka_env["KAFKA_ADMIN_USER"],
            "password": kafka_env["KAFKA_ADMIN_PASSWORD"]}


def producer_of(node: ReloadNode) -> KafkaProducer:
    return KafkaProducer(acks="all", max_block_ms=20000,
                         **kafka_python_conf(node.gateway(), "SCRAM-SHA-512", "alice", PORTCULLIS_USERS["alice"]))


def produces(producer: KafkaProducer, topic: str) -> bool:
    """True when the record is acknowledged, False when Kafka refuses the topic."""
    try:
        producer.send(topic, b"x").get(timeout=30)
        return True
    except TopicAuthorizationFailedError:
        return False


def new_client_produces(node: ReloadNode, topic: str) -> bool:
    producer = producer_of(node)
    try:
        return produces(producer, topic)
    finally:
        producer.close(timeout=5)


def test_the_upstream_login_changed_by_reload_applies_to_new_upstream_connections(
        launcher, kafka_env, run_dir, unique):
    admin = kafka_admin(kafka_env)
    nobody, nobody_password = f"no-acl-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    set_scram_password(admin, nobody, nobody_password)
    topic = unique("reload-login")
    create_topic(admin, topic)

    upstream = admin_login(kafka_env)
    name = unique("reload-login")
    plugins = run_dir / f"{name}-plugins"
    plugins.mkdir()
    node = ReloadNode(launcher, name, Settings(upstream=upstream, plugin_dir=plugins))
    first = producer_of(node)
    try:
        assert produces(first, topic)

        # The built-in password login, as a user Kafka grants nothing.
        node.write(Settings(upstream={**upstream, "username": nobody, "password": nobody_password},
                            plugin_dir=plugins))
        r = node.reload()
        assert r.returncode == 0, r.stdout + r.stderr
        assert "upstream.username" in r.stdout and "upstream.password" in r.stdout, r.stdout
        assert nobody_password not in r.stdout + r.stderr
        assert not new_client_produces(node, topic)
        # The producer that was there keeps its upstream connection, logged in as admin.
        assert produces(first, topic)

        # A login module dropped into the plugin directory: admin's password from a file.
        password_file = run_dir / f"{name}.password"
        password_file.write_text(kafka_env["KAFKA_ADMIN_PASSWORD"] + "\n")
        library = built_library("portcullis-example-file-login", "portcullis_example_file_login")
        tmp = plugins / "libfile_login.so.tmp"
        tmp.write_bytes(library.read_bytes())
        os.replace(tmp, plugins / "libfile_login.so")
        plugin_upstream = {k: v for k, v in upstream.items() if k not in ("username", "password", "sasl_mechanism")}

        def with_module(module: str) -> Settings:
            return Settings(upstream=plugin_upstream, plugin_dir=plugins, tail=(
                f"\n[upstream.login]\nplugin = {toml_value(module)}\n\n[plugins.config.file-password]\n"
                f"username = {toml_value(kafka_env['KAFKA_ADMIN_USER'])}\n"
                f"password_file = {toml_value(str(password_file))}\n"
                'mechanism = "SCRAM-SHA-512"\ncheck_interval_ms = 60000\n'))

        # ReloadNode writes [upstream] before the tail, so the tail's [upstream.login] belongs to it.
        node.write(with_module("file-password"))
        r = node.reload()
        assert r.returncode == 0, r.stdout + r.stderr
        assert "libfile_login.so (loaded)" in r.stdout and "upstream.login" in r.stdout, r.stdout
        assert new_client_produces(node, topic)

        node.write(with_module("no-such-login"))
        r = node.reload()
        said = r.stdout + r.stderr
        assert r.returncode != 0 and "upstream.login.plugin" in said and "file-password" in said, said
        assert new_client_produces(node, topic)
        assert produces(first, topic)
    finally:
        first.close(timeout=5)


def test_with_the_delegated_policy_a_changed_upstream_login_is_refused_and_needs_a_restart(
        launcher, kafka_env, run_dir, unique):
    """`delegated` names its service principal after the login's credential at start, so under it
    a reload that changes the login (here the password) is refused naming the key, nothing of it
    applies, and the node goes on serving with the login it started with."""
    topic = unique("reload-login-delegated")
    create_topic(kafka_admin(kafka_env), topic)
    upstream = admin_login(kafka_env)
    delegated = '\n[forwarding]\npolicy = "delegated"\n'
    name = unique("reload-login-delegated")
    node = ReloadNode(launcher, name, Settings(upstream=upstream, tail=delegated))
    before = node.reloads("refused")
    node.write(Settings(upstream={**upstream, "password": "another-password"}, tail=delegated))
    r = node.reload()
    said = r.stdout + r.stderr
    assert r.returncode != 0, said
    assert "upstream.password" in said and "restart" in said, said
    assert "another-password" not in said
    assert node.reloads("refused") == before + 1
    # Still the login it started with: a new client's session gets its delegated upstream
    # connection, and its request an answer from Kafka (allowed or not, it is Kafka's).
    producer = producer_of(node)
    try:
        produces(producer, topic)
    finally:
        producer.close(timeout=5)


def test_with_the_kafka_store_a_rotated_upstream_password_reaches_the_stores_clients(
        launcher, kafka_env, run_dir, unique):
    """With `[store] kind = "kafka"` the store's own librdkafka clients (tail, election, status,
    writer) log in upstream with `[upstream]`'s user and password too. The node logs in to Kafka's
    REAUTH listener (sessions of 5 s, so each client re-authenticates every ~4.5 s) as a user of
    this test's own; its password is rotated on Kafka and by reload. Ten seconds later — two
    re-authentications of every client — the store still writes and applies a mutation, which it
    could not with the old password (Kafka refuses it at each client's next re-authentication and
    reconnection)."""
    from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                       ResourcePatternType, ResourceType, UserScramCredentialDeletion)

    from cluster_support import admin_conf, cluster_tls, store_sections
    from conftest import free_ports
    from reload_support import wait_for

    from reauth_support import reauth_kafka_bootstrap

    reauth_bootstrap = reauth_kafka_bootstrap()
    admin = kafka_admin(kafka_env)
    user = f"store-rotation-{uuid.uuid4().hex[:8]}"
    first, second = uuid.uuid4().hex, uuid.uuid4().hex

    def set_password(password: str) -> None:
        set_scram_password(admin, user, password)

    set_password(first)
    # What the store needs on Kafka: its topics, its groups, its transactional id, idempotence.
    grants = [AclBinding(kind, name, ResourcePatternType.LITERAL, f"User:{user}", "*", AclOperation.ALL,
                         AclPermissionType.ALLOW)
              for kind, name in ((ResourceType.TOPIC, "*"), (ResourceType.GROUP, "*"),
                                 (ResourceType.TRANSACTIONAL_ID, "*"), (ResourceType.BROKER, "kafka-cluster"))]
    for f in admin.create_acls(grants).values():
        f.result(timeout=30)
    node = None
    try:
        cluster_id = unique("reload-store-login")
        (inter_node_port,) = free_ports(1)
        tail = store_sections(cluster_tls(run_dir / cluster_id), cluster_id=cluster_id,
                              node_name=f"{cluster_id}-node-1", listener_port=inter_node_port)
        upstream = {"bootstrap_servers": [reauth_bootstrap], "security_protocol": "SASL_PLAINTEXT",
                    "sasl_mechanism": "SCRAM-SHA-512", "username": user, "password": first}
        node = ReloadNode(launcher, cluster_id, Settings(upstream=upstream, tail=tail, super_users=["User:alice"]))
        through_node = AdminClient(admin_conf(node.process, log_level=3))

        def mutation_applies(topic: str) -> None:
            """An ACL written through the node: the store's writer commits it, its tail applies it
            (the node answers only then), and DescribeAcls on the node shows it."""
            binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:bob", "*",
                                 AclOperation.READ, AclPermissionType.ALLOW)
            for f in through_node.create_acls([binding], request_timeout=30).values():
                f.result(timeout=40)
            shown = through_node.describe_acls(
                AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, None, None,
                                 AclOperation.ANY, AclPermissionType.ANY), request_timeout=30).result(timeout=40)
            assert binding in shown, shown

        mutation_applies(unique("store-login-before"))
        # Rotation: Kafka first, then the node (a re-authentication in between fails once, and the
        # client logs in again with what the reload gave it).
        set_password(second)
        node.write(Settings(upstream={**upstream, "password": second}, tail=tail, super_users=["User:alice"]))
        r = node.reload()
        said = r.stdout + r.stderr
        assert r.returncode == 0, said
        assert "upstream.password" in r.stdout, r.stdout
        assert first not in said and second not in said

        def clients_that_took_them() -> set[str]:
            return {c for line in node.process.log_tail(400).splitlines() if "reloaded credentials" in line
                    for c in ("tail", "election", "status", "writer") if f"client={c} " in line + " "}

        wait_for(lambda: clients_that_took_them() == {"tail", "election", "status", "writer"}, 10,
                 "every client of the store takes the reloaded credentials")
        time.sleep(10)
        mutation_applies(unique("store-login-after"))
        log = node.process.log_tail(2000)
        assert first not in log and second not in log
    finally:
        if node is not None:
            node.process.stop()
        for f in admin.delete_acls([AclBindingFilter(g.restype, g.name, g.resource_pattern_type, g.principal,
                                                     g.host, g.operation, g.permission_type)
                                    for g in grants]).values():
            f.result(timeout=30)
        for f in admin.alter_user_scram_credentials(
                [UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_512)]).values():
            f.result(timeout=30)
