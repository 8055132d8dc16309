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


class StoreNode:
    """A one-node kafka-store cluster whose store logs in upstream with `upstream` (and
    `upstream_tls`): a ReloadNode, an admin client through it, and the store's log lines."""

    CLIENTS = {"tail", "election", "status", "writer"}

    def __init__(self, launcher, run_dir, unique, name: str, upstream: dict, upstream_tls: dict | None = None):
        from cluster_support import admin_conf, cluster_tls, store_sections
        from conftest import free_ports

        cluster_id = unique(name)
        (inter_node_port,) = free_ports(1)
        self.tail = store_sections(cluster_tls(run_dir / cluster_id), cluster_id=cluster_id,
                                   node_name=f"{cluster_id}-node-1", listener_port=inter_node_port)
        self.node = ReloadNode(launcher, cluster_id, self.settings(upstream, upstream_tls))
        self.admin = AdminClient(admin_conf(self.node.process, log_level=3))

    def settings(self, upstream: dict, upstream_tls: dict | None = None) -> Settings:
        return Settings(upstream=upstream, upstream_tls=upstream_tls, tail=self.tail, super_users=["User:alice"])

    def mutation_applies(self, topic: str, timeout: float = 40) -> None:
        """An ACL written through the node: the store's writer commits it, its tail applies it (the
        node answers only then), and DescribeAcls on the node shows it."""
        from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                           ResourcePatternType, ResourceType)
        binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:bob", "*",
                             AclOperation.READ, AclPermissionType.ALLOW)
        for f in self.admin.create_acls([binding], request_timeout=timeout).values():
            f.result(timeout=timeout + 10)
        shown = self.admin.describe_acls(
            AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, None, None,
                             AclOperation.ANY, AclPermissionType.ANY), request_timeout=30).result(timeout=40)
        assert binding in shown, shown

    # What each store client logs when it is made again (not its "could not be made again").
    REMADE = "is made again with the reloaded upstream settings"

    def log_since(self, mark: int = 0) -> str:
        """The node's whole log from byte `mark` on (see `log_mark`)."""
        with open(self.node.process.log_path, "rb") as f:
            f.seek(mark)
            return f.read().decode(errors="replace")

    def log_mark(self) -> int:
        return self.node.process.log_path.stat().st_size

    def clients_that_logged(self, phrase: str, mark: int = 0) -> set[str]:
        """The store's clients with a log line containing `phrase` since byte `mark`."""
        return {c for line in self.log_since(mark).splitlines() if phrase in line
                for c in self.CLIENTS if f"client={c} " in line + " "}

    def writer_terms(self) -> int:
        """How often the node became the writer, since it started."""
        return self.log_since().count("this node is the cluster's metadata writer")

    def stop(self) -> None:
        self.node.process.stop()


def _store_user(admin, user: str):
    """The ACLs a store's upstream user needs: its topics, its groups, its transactional id,
    idempotence. Returns the bindings, for their removal."""
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType
    grants = [AclBinding(kind, name, ResourcePatternType.LITERAL, f"User:{user}", "*", AclOperation.ALL,
                         AclPermissionType.ALLOW)
              for kind, name in ((ResourceType.TOPIC, "*"), (ResourceType.GROUP, "*"),
                                 (ResourceType.TRANSACTIONAL_ID, "*"), (ResourceType.BROKER, "kafka-cluster"))]
    for f in admin.create_acls(grants).values():
        f.result(timeout=30)
    return grants


def _reauth_upstream(mechanism: str, user: str, password: str) -> dict:
    """`[upstream]` on Kafka's REAUTH listener (5-s sessions) as `user`."""
    from reauth_support import reauth_kafka_bootstrap
    return {"bootstrap_servers": [reauth_kafka_bootstrap()], "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": mechanism, "username": user, "password": password}


def _remove_store_user(admin, user: str, grants, mechanisms) -> None:
    from confluent_kafka.admin import AclBindingFilter, UserScramCredentialDeletion
    for f in admin.delete_acls([AclBindingFilter(g.restype, g.name, g.resource_pattern_type, g.principal,
                                                 g.host, g.operation, g.permission_type)
                                for g in grants]).values():
        f.result(timeout=30)
    for mechanism in mechanisms:
        try:
            for f in admin.alter_user_scram_credentials([UserScramCredentialDeletion(user, mechanism)]).values():
                f.result(timeout=30)
        except Exception:  # noqa: BLE001 - already deleted by the test
            pass


def test_with_the_kafka_store_a_rotated_upstream_password_reaches_the_stores_clients(
        launcher, kafka_env, run_dir, unique):
    """With `[store] kind = "kafka"` the store's own librdkafka clients (tail, election, status,
    writer) log in upstream with `[upstream]`'s user and password too. The node logs in to Kafka's
    REAUTH listener (sessions of 5 s, so each client re-authenticates every ~4.5 s) as a user of
    this test's own; its password is rotated on Kafka and by reload. Ten seconds later — two
    re-authentications of every client — the store still writes and applies a mutation, which it
    could not with the old password (Kafka refuses it at each client's next re-authentication and
    reconnection)."""
    from reload_support import wait_for

    admin = kafka_admin(kafka_env)
    user = f"store-rotation-{uuid.uuid4().hex[:8]}"
    first, second = uuid.uuid4().hex, uuid.uuid4().hex
    set_scram_password(admin, user, first)
    grants = _store_user(admin, user)
    store = None
    try:
        upstream = _reauth_upstream("SCRAM-SHA-512", user, first)
        store = StoreNode(launcher, run_dir, unique, "reload-store-login", upstream)
        store.mutation_applies(unique("store-login-before"))
        # Rotation: Kafka first, then the node (a re-authentication in between fails once, and the
        # client logs in again with what the reload gave it).
        set_scram_password(admin, user, second)
        store.node.write(store.settings({**upstream, "password": second}))
        r = store.node.reload()
        said = r.stdout + r.stderr
        assert r.returncode == 0, said
        assert "upstream.password" in r.stdout, r.stdout
        assert first not in said and second not in said
        wait_for(lambda: store.clients_that_logged("reloaded credentials") == StoreNode.CLIENTS, 10,
                 "every client of the store takes the reloaded credentials")
        assert not store.clients_that_logged(StoreNode.REMADE), "a password alone makes no client again"
        time.sleep(10)
        store.mutation_applies(unique("store-login-after"))
        log = store.log_since()
        assert first not in log and second not in log
    finally:
        if store is not None:
            store.stop()
        _remove_store_user(admin, user, grants, [ScramMechanism.SCRAM_SHA_512])


def test_with_the_kafka_store_a_new_upstream_mechanism_makes_the_stores_clients_again(
        launcher, kafka_env, run_dir, unique):
    """librdkafka fixes a client's mechanism when it makes the client, so a reload that changes
    `upstream.sasl_mechanism` makes the store's clients again: the tail from the offset it
    reached, the status producer, and the election member — the writer steps down and, alone in
    its cluster, is elected again with a new producer. The node logs in to Kafka's REAUTH
    listener (5-s sessions) as a user of the test's own with a SCRAM-SHA-256 credential; the
    reload moves it to SCRAM-SHA-512 and the SHA-256 credential is deleted on Kafka. Ten seconds
    later the store still writes and applies a mutation, which clients left with SCRAM-SHA-256
    could not (their re-authentication and reconnection are refused)."""
    from reload_support import wait_for

    admin = kafka_admin(kafka_env)
    user = f"store-mechanism-{uuid.uuid4().hex[:8]}"
    password = uuid.uuid4().hex
    set_scram_password(admin, user, password, ScramMechanism.SCRAM_SHA_256)
    grants = _store_user(admin, user)
    store = None
    try:
        upstream = _reauth_upstream("SCRAM-SHA-256", user, password)
        store = StoreNode(launcher, run_dir, unique, "reload-store-mechanism", upstream)
        store.mutation_applies(unique("store-mechanism-before"))
        terms = store.writer_terms()
        assert terms >= 1
        mark = store.log_mark()
        set_scram_password(admin, user, password, ScramMechanism.SCRAM_SHA_512)
        store.node.write(store.settings({**upstream, "sasl_mechanism": "SCRAM-SHA-512"}))
        r = store.node.reload()
        said = r.stdout + r.stderr
        assert r.returncode == 0, said
        assert "upstream.sasl_mechanism" in r.stdout, r.stdout
        assert password not in said
        from confluent_kafka.admin import UserScramCredentialDeletion
        for f in admin.alter_user_scram_credentials(
                [UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_256)]).values():
            f.result(timeout=30)
        wait_for(lambda: store.clients_that_logged(StoreNode.REMADE, mark) == {"tail", "election", "status"}, 10,
                 "the tail, election and status clients are made again")
        wait_for(lambda: store.writer_terms() > terms, 30, "the node is elected writer again, with a new producer")
        time.sleep(10)
        store.mutation_applies(unique("store-mechanism-after"))
        assert password not in store.log_since()
    finally:
        if store is not None:
            store.stop()
        _remove_store_user(admin, user, grants, [ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512])


def test_with_the_kafka_store_upstream_tls_is_checked_and_a_rotated_ca_remakes_the_stores_clients(
        launcher, kafka_env, run_dir, unique, tmp_path):
    """The store logs in to Kafka's SASL_SSL listener with a CA file of the test's own (a copy of
    the CA that signed the broker's certificate). A reload naming a CA file that is not PEM is
    refused, naming `upstream.tls`, and the store goes on writing. Then the file is replaced in
    place by another CA and the node reloaded with the same configuration: the reload reports the
    files' new content, the store's clients are made again with it and can no longer reach the
    broker (a mutation times out — with the old clients it would have been written). The real CA
    put back and another reload: the clients are made again, the node is elected again and the
    store writes."""
    import shutil

    from conftest import make_tls_files
    from reload_support import wait_for

    from test_upstream_tls import _need

    broker_ca = _need("KAFKA_TLS_CA")
    ca = tmp_path / "upstream-ca.pem"
    shutil.copy(broker_ca, ca)
    upstream = {"bootstrap_servers": [_need("KAFKA_SASL_SSL_BOOTSTRAP")], "security_protocol": "SASL_SSL",
                "sasl_mechanism": "SCRAM-SHA-512", "username": kafka_env["KAFKA_ADMIN_USER"],
                "password": kafka_env["KAFKA_ADMIN_PASSWORD"]}
    store = StoreNode(launcher, run_dir, unique, "reload-store-tls", upstream, {"ca_file": str(ca)})
    try:
        store.mutation_applies(unique("store-tls-before"))
        not_pem = tmp_path / "not-a-ca.pem"
        not_pem.write_text("this is not a certificate\n")
        store.node.write(store.settings(upstream, {"ca_file": str(not_pem)}))
        r = store.node.reload()
        said = r.stdout + r.stderr
        assert r.returncode != 0, said
        # The store's own check (the upstream connector refuses such a file too, later).
        assert "upstream.tls: the metadata store's client library refuses" in said, said
        assert kafka_env["KAFKA_ADMIN_PASSWORD"] not in said
        store.mutation_applies(unique("store-tls-refused"))

        terms = store.writer_terms()
        mark = store.log_mark()
        shutil.copy(make_tls_files(tmp_path / "other").ca_cert, ca)
        store.node.write(store.settings(upstream, {"ca_file": str(ca)}))
        r = store.node.reload()
        said = r.stdout + r.stderr
        assert r.returncode == 0, said
        assert "upstream.tls files" in r.stdout, r.stdout
        wait_for(lambda: store.clients_that_logged(StoreNode.REMADE, mark) == {"tail", "election", "status"}, 10,
                 "the tail, election and status clients are made again with the other CA")
        # Longer than a re-election takes with a usable CA (well under a second here, three with
        # the broker's group rebalance delay): the member made with the other CA never joins.
        time.sleep(12)
        assert store.writer_terms() == terms, "elected again, with a CA that does not sign the broker's certificate"
        with pytest.raises(Exception):
            store.mutation_applies(unique("store-tls-other-ca"), timeout=8)

        mark = store.log_mark()
        shutil.copy(broker_ca, ca)
        r = store.node.reload()
        assert r.returncode == 0, r.stdout + r.stderr
        assert "upstream.tls files" in r.stdout, r.stdout
        wait_for(lambda: store.clients_that_logged(StoreNode.REMADE, mark) == {"tail", "election", "status"}, 10,
                 "the clients are made again with the broker's CA")
        wait_for(lambda: store.writer_terms() > terms, 40, "the node is elected writer again")
        store.mutation_applies(unique("store-tls-after"))
    finally:
        store.stop()
