"""The authorizer and live reconfiguration (issue 23): an authorizer plugin's configuration table
changed by a reload applies to new connections at once and to an established session at its next
re-authentication (not before); an authorizer plugin dropped into the plugin directory after start
and chosen by a reload decides for new connections, and choosing the built-in `acl` again finds
its ACLs; a table the plugin refuses, an unknown plugin, or a built-in authorizer the node did not
start with refuses the reload naming the key, and the old authorizer goes on deciding.

The plugin is examples/prefix-authorizer (`prefix-authorizer`: a principal may use the topics
named `<principal><separator>...`, where `separator` is its table's key). Each test runs a node of
its own (reload_support.ReloadNode) and topics named after it.
"""

from __future__ import annotations

import os
import struct

import pytest
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType)
from kafka import KafkaProducer
from kafka.errors import TopicAuthorizationFailedError

from clients import confluent_conf, kafka_python_conf
from kafka_wire import API_METADATA, string
from reauth_support import ReauthConn
from reload_support import ReloadNode, Settings
from test_plugin_mechanism import built_library

pytestmark = pytest.mark.portcullis_only

PLUGIN = "prefix-authorizer"
ERROR_TOPIC_AUTHORIZATION_FAILED = 29
PASSWORDS = {"alice": "alice-through-portcullis", "carol": "carol-through-portcullis"}


def prefix_library():
    return built_library("portcullis-example-prefix-authorizer", "portcullis_example_prefix_authorizer")


def drop_in(target_dir, name: str = "libprefix.so"):
    """The library put into the directory in one rename, as an operator's tooling would."""
    tmp = target_dir / (name + ".tmp")
    tmp.write_bytes(prefix_library().read_bytes())
    os.replace(tmp, target_dir / name)


def prefix_settings(separator: str, plugin_dir=None, reauth_ms: int = 60_000) -> Settings:
    tail = (f'\n[authorizer]\nplugin = "{PLUGIN}"\nsuper_users = ["User:carol"]\n\n'
            f'[plugins.config.{PLUGIN}]\nseparator = "{separator}"\n')
    return Settings(reauth_ms=reauth_ms, tail=tail, plugin_dir=plugin_dir)


def topic_error(conn: ReauthConn, topic: str) -> int:
    """The error Metadata v4 (the oldest an authorizing Portcullis advertises) gives for `topic` on
    this connection (29: not authorized)."""
    r = conn.call(API_METADATA, 4, struct.pack(">i", 1) + string(topic) + b"\0")  # no auto-creation
    r.int32()  # throttle time
    r.array(lambda b: (b.int32(), b.string(), b.int32(), b.string()))  # brokers
    r.string()  # cluster id
    r.int32()  # controller
    topics = r.array(lambda t: (t.int16(), t.string(), t.int8(),
                                t.array(lambda p: (p.int16(), p.int32(), p.int32(),
                                                   p.array(lambda x: x.int32()), p.array(lambda x: x.int32())))))
    errors = {name: error for error, name, _, _ in topics}
    assert topic in errors, errors
    return errors[topic]


def create_topics(kafka_env, *topics: str) -> None:
    """Created straight on Kafka's PLAINTEXT listener, so authorization through Portcullis is all
    that decides."""
    admin = AdminClient({"bootstrap.servers": kafka_env["KAFKA_BOOTSTRAP"], "log_level": 3})
    for f in admin.create_topics([NewTopic(t, num_partitions=1, replication_factor=1) for t in topics],
                                 operation_timeout=30).values():
        f.result(timeout=60)


def produces(node: ReloadNode, user: str, topic: str) -> bool:
    """A new kafka-python connection of `user` produces one record to `topic`: True when it is
    acknowledged, False when it is refused as not authorized."""
    gw = node.gateway()
    producer = KafkaProducer(acks="all", max_block_ms=20000,
                             **kafka_python_conf(gw, "SCRAM-SHA-512", user, PASSWORDS[user]))
    try:
        producer.send(topic, b"x").get(timeout=30)
        return True
    except TopicAuthorizationFailedError:
        return False
    finally:
        producer.close(timeout=5)


def test_an_authorizer_table_changed_by_reload_applies_to_new_connections_and_at_reauthentication(
        launcher, kafka_env, unique):
    name = unique("reload-authz-table")
    plugins = launcher.run_dir / f"{name}-plugins"
    plugins.mkdir()
    drop_in(plugins)
    node = ReloadNode(launcher, name, prefix_settings(".", plugins))
    suffix = unique("t")
    dot, dash = f"alice.{suffix}", f"alice-{suffix}"
    create_topics(kafka_env, dot, dash)

    session = ReauthConn("127.0.0.1", node.process.listener_port)
    try:
        session.login_plain("alice", PASSWORDS["alice"])
        assert topic_error(session, dot) == 0
        assert topic_error(session, dash) == ERROR_TOPIC_AUTHORIZATION_FAILED

        node.write(prefix_settings("-", plugins))
        r = node.reload()
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"plugins.config.{PLUGIN}.separator" in r.stdout, r.stdout

        # A new connection is decided by the instance created with the new table.
        assert produces(node, "alice", dash)
        assert not produces(node, "alice", dot)
        # The established session keeps the authorizer it authenticated under...
        assert topic_error(session, dot) == 0
        assert topic_error(session, dash) == ERROR_TOPIC_AUTHORIZATION_FAILED
        # ...until it re-authenticates (KIP-368, on the same connection).
        session.login_plain("alice", PASSWORDS["alice"])
        assert topic_error(session, dot) == ERROR_TOPIC_AUTHORIZATION_FAILED
        assert topic_error(session, dash) == 0
    finally:
        session.close()


def test_an_authorizer_dropped_in_after_start_is_used_once_chosen_and_acl_comes_back_with_its_acls(
        launcher, kafka_env, unique):
    node = ReloadNode(launcher, unique("reload-authz-new"), Settings(super_users=["User:carol"]))
    plugins = node.process.workdir / "plugins"
    suffix = unique("t")
    own, granted = f"alice.{suffix}", f"granted-{suffix}"
    create_topics(kafka_env, own, granted)
    # Through Portcullis' ACL API (the built-in authorizer's store), as the super user carol.
    gw = node.gateway()
    admin = AdminClient(confluent_conf(gw, "SCRAM-SHA-512", "carol", PASSWORDS["carol"]))
    bindings = [AclBinding(ResourceType.TOPIC, granted, ResourcePatternType.LITERAL, "User:alice", "*", op,
                           AclPermissionType.ALLOW) for op in (AclOperation.WRITE, AclOperation.DESCRIBE)]
    for f in admin.create_acls(bindings).values():
        f.result(timeout=30)
    assert produces(node, "alice", granted)
    assert not produces(node, "alice", own)

    drop_in(plugins)
    node.write(prefix_settings("."))
    r = node.reload()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "libprefix.so (loaded)" in r.stdout and "authorizer.plugin" in r.stdout, r.stdout
    assert produces(node, "alice", own)
    assert not produces(node, "alice", granted)

    # Back to `acl`: the instance the node started with, with its ACL.
    node.write(Settings(super_users=["User:carol"]))
    r = node.reload()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "authorizer.plugin" in r.stdout, r.stdout
    assert produces(node, "alice", granted)
    assert not produces(node, "alice", own)


def test_a_broken_authorizer_choice_refuses_the_reload_and_the_old_one_decides(launcher, kafka_env, unique):
    name = unique("reload-authz-broken")
    plugins = launcher.run_dir / f"{name}-plugins"
    plugins.mkdir()
    drop_in(plugins)
    node = ReloadNode(launcher, name, prefix_settings(".", plugins))
    own = f"alice.{unique('t')}"
    create_topics(kafka_env, own)

    def refused(settings: Settings, *named: str) -> None:
        node.write(settings)
        r = node.reload()
        said = r.stdout + r.stderr
        assert r.returncode != 0 and "reload refused" in said, said
        assert all(n in said for n in named), (named, said)

    # The plugin refuses an empty separator when its new instance is created.
    refused(prefix_settings("", plugins), f"plugins.config.{PLUGIN}", "separator")
    # No authorizer of that name: the key and what there is.
    broken = prefix_settings(".", plugins)
    broken.tail = broken.tail.replace(f'plugin = "{PLUGIN}"', 'plugin = "no-such-authorizer"')
    refused(broken, "authorizer.plugin", "no-such-authorizer", PLUGIN)
    # The built-in `acl` replays the store only at start: a node started with a plugin refuses it.
    refused(Settings(super_users=["User:carol"], plugin_dir=plugins), "authorizer.plugin", "acl", "restart")
    assert node.reloads("refused") == 3 and node.reloads("applied") == 0

    # The plugin's instance with "." still decides.
    assert produces(node, "alice", own)
    assert not produces(node, "carol", own)




# ---- Clusters ------------------------------------------------------------------------------------


class TwoNodes:
    """Two nodes of one kafka-store cluster (the suite's Kafka), the suite's users written once,
    one plugin directory for both; `settings(i, super_users, tail)` is node i's configuration."""

    def __init__(self, launcher, run_dir, unique, name: str, super_users):
        """`super_users(peers)`: the `[authorizer] super_users` both nodes start with, given the
        principals the default builder gives the nodes (`User:CN=<node name>`)."""
        from cluster_support import cluster_tls, node_principal, store_sections  # noqa: PLC0415
        from reload_support import free_ports  # noqa: PLC0415

        self.cluster_id = unique(name)
        tls = cluster_tls(run_dir / self.cluster_id)
        self.plugins = run_dir / f"{self.cluster_id}-plugins"
        self.plugins.mkdir()
        self.names = [f"{self.cluster_id}-node-{i}" for i in (1, 2)]
        self.peers = [node_principal(n) for n in self.names]  # what the default builder names them
        self.tails = [store_sections(tls, cluster_id=self.cluster_id, node_name=n, listener_port=free_ports(1)[0])
                      for n in self.names]
        self.nodes = [ReloadNode(launcher, f"{self.cluster_id}-{i + 1}", self.settings(i, super_users(self.peers)),
                                 add_users=i == 0) for i in (0, 1)]

    def settings(self, i: int, super_users, tail: str = "") -> Settings:
        return Settings(node_id=i + 1, tail=self.tails[i] + tail, plugin_dir=self.plugins, super_users=super_users)

    def reload_all(self, settings, *named: str) -> None:
        for i, node in enumerate(self.nodes):
            node.write(settings(i))
            r = node.reload()
            assert r.returncode == 0, r.stdout + r.stderr
            assert all(n in r.stdout for n in named), r.stdout


def upsert_through(node: ReloadNode, user: str, as_user: str = "alice") -> int:
    """`as_user` sets `user`'s SCRAM-SHA-512 password through `node`: the error code (0: done)."""
    from confluent_kafka import KafkaException  # noqa: PLC0415
    from confluent_kafka.admin import (ScramCredentialInfo, ScramMechanism,  # noqa: PLC0415
                                       UserScramCredentialUpsertion)

    admin = AdminClient(confluent_conf(node.gateway(), "SCRAM-SHA-512", as_user, PASSWORDS[as_user]))
    upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                          f"{user}-pw".encode())
    try:
        admin.alter_user_scram_credentials([upsert])[user].result(timeout=30)
        return 0
    except KafkaException as e:
        return e.args[0].code()


def logs_in(node: ReloadNode, user: str) -> bool:
    from confluent_kafka import KafkaException  # noqa: PLC0415

    try:
        AdminClient(confluent_conf(node.gateway(), "SCRAM-SHA-512", user, f"{user}-pw")).list_topics(timeout=10)
        return True
    except KafkaException:
        return False


def test_an_authorizer_chosen_by_reload_on_each_node_of_a_cluster_decides_forwarded_mutations_too(
        launcher, kafka_env, run_dir, unique):
    """Two nodes of one kafka-store cluster start with `acl`; the prefix authorizer, dropped into
    their plugin directory, is chosen by a reload on each, and later `acl` again. Each choice
    decides topics on both nodes, and also the mutations the cluster's writer runs: alice's
    AlterUserScramCredentials (ALTER on the cluster, which `acl` refuses her and the prefix
    authorizer allows anyone) through either node, one of which forwards it to the other in an
    Envelope that the writer admits and decides with what its last reload chose."""
    from confluent_kafka import KafkaError  # noqa: PLC0415

    from reload_support import wait_for  # noqa: PLC0415

    # Under `acl` the nodes' certificate principals are super users: they may forward.
    cluster = TwoNodes(launcher, run_dir, unique, "reload-authz-cluster", lambda peers: ["User:carol"] + peers)
    nodes = cluster.nodes
    super_users = ["User:carol"] + cluster.peers

    def acl_on(i: int) -> Settings:
        return cluster.settings(i, super_users)

    def prefix_on(i: int) -> Settings:
        s = prefix_settings(".", cluster.plugins)
        # `super_users` as under `acl`: a change of it together with the plugin needs a restart.
        return cluster.settings(i, None, s.tail.replace('["User:carol"]', "[" + ", ".join(
            f'"{u}"' for u in super_users) + "]"))

    own = f"alice.{unique('t')}"
    create_topics(kafka_env, own)
    users = [f"{cluster.cluster_id}-user-{i}" for i in (1, 2)]
    for node, user in zip(nodes, users):
        assert not produces(node, "alice", own)
        assert upsert_through(node, user) == KafkaError.CLUSTER_AUTHORIZATION_FAILED

    drop_in(cluster.plugins)
    cluster.reload_all(prefix_on, "authorizer.plugin", "libprefix.so (loaded)")
    for node, user in zip(nodes, users):
        assert produces(node, "alice", own)
        assert upsert_through(node, user) == 0
    # Written once, by the writer, and followed by both nodes.
    for node in nodes:
        for user in users:
            wait_for(lambda n=node, u=user: logs_in(n, u), 10, f"{user} logs in through {node.process.name}")

    cluster.reload_all(acl_on, "authorizer.plugin")
    for node, user in zip(nodes, users):
        assert not produces(node, "alice", own)
        assert upsert_through(node, user) == KafkaError.CLUSTER_AUTHORIZATION_FAILED


def test_a_principal_builder_chosen_by_reload_names_peers_on_connections_opened_before_it(
        launcher, run_dir, unique):
    """Two nodes of one kafka-store cluster on `acl`, whose super users are carol and the nodes as
    the default builder names them (`User:CN=<node>`). carol's AlterUserScramCredentials through
    both nodes works (one forwards it to the writer, which keeps that peer connection open). A
    reload on both chooses examples/principal-mapping, which names the nodes `User:peer-<node>`,
    and makes those the super users instead: carol's upserts through both nodes still work, so the
    writer named the forwarding peer with the new builder on the connection opened before the
    reload (had it kept the name it gave at connect, the Envelope would be refused
    CLUSTER_AUTHORIZATION_FAILED and carol would get UNKNOWN_SERVER_ERROR)."""
    cluster = TwoNodes(launcher, run_dir, unique, "reload-peer-names", lambda peers: ["User:carol"] + peers)
    users = [f"{cluster.cluster_id}-user-{i}" for i in (1, 2)]
    for node, user in zip(cluster.nodes, users):
        assert upsert_through(node, user, as_user="carol") == 0

    library = built_library("portcullis-example-principal-mapping", "portcullis_example_principal_mapping")
    tmp = cluster.plugins / "libmapping.so.tmp"
    tmp.write_bytes(library.read_bytes())
    os.replace(tmp, cluster.plugins / "libmapping.so")
    mapped = ["User:carol"] + [f"User:peer-{n}" for n in cluster.names]
    mapping = ('\n[principal]\nplugin = "principal-mapping"\n\n[plugins.config.principal-mapping]\n'
               'rules = ["RULE:CN=([^,]+)/peer-$1/", "DEFAULT"]\n')
    cluster.reload_all(lambda i: cluster.settings(i, mapped, mapping), "principal.plugin", "authorizer.super_users")
    for node, user in zip(cluster.nodes, users):
        assert upsert_through(node, user, as_user="carol") == 0
