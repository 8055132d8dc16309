"""Several Portcullis nodes, one security state (issue 13): three nodes on loopback share their
credentials, ACLs and delegation tokens through a compacted topic of the suite's Kafka
(`[store] kind = "kafka"`); one writer is elected by Kafka's group coordinator and fenced by its
transactional producer; the other nodes forward security mutations to it in KIP-590 Envelopes over
a mutual-TLS inter-node listener.

- a mutation through a node that is not the writer is visible through Describe on the others
  within 1 s (ACLs, SCRAM credentials, delegation tokens), and Kafka's own tools (kafka-acls,
  kafka-configs, kafka-delegation-tokens) work unchanged against any node;
- a user's credential deleted on one node closes that user's idle sessions on the others within 1 s;
- the refusals: an Envelope on a client listener, an Envelope from a peer without ClusterAction,
  an unreadable forwarded principal, peers without a certificate of the cluster's CA;
- `portcullis cluster status` names the writer and each node's lag.

The chaos and fencing tests are in test_cluster_chaos.py.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialDeletion, UserScramCredentialUpsertion)

from cluster_support import Cluster, admin_conf, node_principal, start_cluster, wait_for
from kafka_wire import Conn
from test_delegation_tokens import ACL_COMMAND, TOKEN_COMMAND, Tools, token_rows

pytestmark = pytest.mark.portcullis_only

CONFIG_COMMAND = "org.apache.kafka.tools.ConfigCommand"
VISIBLE_WITHIN = 1.0  # seconds: the bound for a write to reach the other nodes


@pytest.fixture(scope="module")
def trio(launcher) -> Cluster:
    return start_cluster(launcher, "trio", 3)


def follower_and_others(cluster: Cluster) -> tuple[int, list[int]]:
    writer = cluster.writer()
    follower = next(i for i in range(len(cluster.nodes)) if i != writer)
    return follower, [i for i in range(len(cluster.nodes)) if i != follower]


def topic_acl(topic: str, principal: str = "User:somebody") -> AclBinding:
    return AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*",
                      AclOperation.READ, AclPermissionType.ALLOW)


def acls_of(admin: AdminClient, topic: str) -> list:
    f = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, None, None, AclOperation.ANY,
                         AclPermissionType.ANY)
    return admin.describe_acls(f, request_timeout=10).result(timeout=15)


def scram_of(admin: AdminClient, user: str):
    try:
        return admin.describe_user_scram_credentials([user], request_timeout=10)[user].result(timeout=15)
    except KafkaException:
        return None


def test_mutations_through_a_follower_are_described_on_every_node_within_a_second(trio, unique):
    follower, others = follower_and_others(trio)
    admins = [AdminClient(admin_conf(p)) for p in trio.nodes]
    # Warm the readers' connections, so that the timing below measures the cluster, not a login.
    for i in others:
        acls_of(admins[i], "warm-up")

    topic = unique("cluster-acl")
    binding = topic_acl(topic)
    admins[follower].create_acls([binding], request_timeout=30)[binding].result(timeout=40)
    for i in others:
        _, took = wait_for(f"the ACL on node {i + 1}", lambda i=i: acls_of(admins[i], topic), VISIBLE_WITHIN + 0.5)
        assert took <= VISIBLE_WITHIN, f"node {i + 1} described the ACL after {took:.2f}s"

    user = unique("cluster-user")
    upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"pw-1")
    admins[follower].alter_user_scram_credentials([upsert], request_timeout=30)[user].result(timeout=40)
    for i in others:
        _, took = wait_for(f"the credential on node {i + 1}", lambda i=i: scram_of(admins[i], user),
                           VISIBLE_WITHIN + 0.5)
        assert took <= VISIBLE_WITHIN, f"node {i + 1} described the credential after {took:.2f}s"

    # The same API on the writer itself, and deletions through the follower.
    writer = trio.writer()
    other_topic = unique("cluster-acl-w")
    b2 = topic_acl(other_topic)
    admins[writer].create_acls([b2], request_timeout=30)[b2].result(timeout=40)
    deleted = admins[follower].delete_acls([AclBindingFilter(
        ResourceType.TOPIC, other_topic, ResourcePatternType.LITERAL, None, None, AclOperation.ANY,
        AclPermissionType.ANY)], request_timeout=30)
    assert len(list(deleted.values())[0].result(timeout=40)) == 1, "the follower's delete must see the writer's ACL"
    for i in range(3):
        wait_for(f"the deletion on node {i + 1}", lambda i=i: not acls_of(admins[i], other_topic), VISIBLE_WITHIN)


def test_delegation_tokens_created_through_a_follower_are_described_everywhere(trio, java, tmp_path):
    follower, others = follower_and_others(trio)
    users = {"alice": "alice-through-portcullis"}
    for i in range(3):
        (tmp_path / f"n{i}").mkdir()
    tools = [Tools(java, p.bootstrap, users, tmp_path / f"n{i}") for i, p in enumerate(trio.nodes)]
    created = tools[follower].run([("create", TOKEN_COMMAND, "alice", ["--create", "--max-life-time-period", "-1"])])
    rows = token_rows(created["create"]["out"])
    assert len(rows) == 1, created
    token_id = rows[0]["id"]
    # Kafka's tool is a JVM per batch; the timing bound is checked with the AdminClient tests above.
    for i in others:
        described = tools[i].run([("describe", TOKEN_COMMAND, "alice", ["--describe", "--owner-principal",
                                                                         "User:alice"])])
        assert token_id in {r["id"] for r in token_rows(described["describe"]["out"])}, described


def test_kafka_tools_work_unchanged_against_any_node(trio, java, tmp_path, unique):
    users = {"alice": "alice-through-portcullis"}
    for i in range(3):
        (tmp_path / f"n{i}").mkdir()
    tools = [Tools(java, p.bootstrap, users, tmp_path / f"n{i}") for i, p in enumerate(trio.nodes)]
    topic = unique("tools")
    who = f"User:{unique('tool-user')}"
    scram_user = unique("configs-user")
    # kafka-acls adds on node 1 and lists on node 3; kafka-configs sets a SCRAM credential on
    # node 2 and describes it on node 1; kafka-acls removes on node 3.
    out = tools[0].run([("add", ACL_COMMAND, "alice", ["--add", "--allow-principal", who, "--operation", "Read",
                                                      "--topic", topic])])
    assert out["add"]["rc"] == 0, out
    listed = tools[2].run([("list", ACL_COMMAND, "alice", ["--list", "--topic", topic])])
    assert who in listed["list"]["out"] and "READ" in listed["list"]["out"], listed
    configs = tools[1].run([("alter", CONFIG_COMMAND, "alice", [
        "--alter", "--add-config", "SCRAM-SHA-512=[iterations=8192,password=tool-secret]",
        "--entity-type", "users", "--entity-name", scram_user])])
    assert configs["alter"]["rc"] == 0, configs
    assert f"Completed updating config for user {scram_user}" in configs["alter"]["out"], configs
    admin = AdminClient(admin_conf(trio.nodes[0]))
    info, _ = wait_for("the tool's credential on node 1", lambda: scram_of(admin, scram_user), VISIBLE_WITHIN)
    assert [(c.mechanism, c.iterations) for c in info.scram_credential_infos] == [(ScramMechanism.SCRAM_SHA_512, 8192)]
    removed = tools[2].run([("remove", ACL_COMMAND, "alice", ["--remove", "--force", "--topic", topic])])
    assert removed["remove"]["rc"] == 0, removed
    wait_for("the removal on node 1", lambda: not acls_of(admin, topic), VISIBLE_WITHIN)


def test_a_credential_deleted_on_one_node_closes_the_users_idle_sessions_on_the_others(trio, unique):
    user = unique("revokee")
    password = "revokee-secret"
    admins = [AdminClient(admin_conf(p)) for p in trio.nodes]
    upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                          password.encode())
    admins[0].alter_user_scram_credentials([upsert], request_timeout=30)[user].result(timeout=40)
    for i in (1, 2):
        wait_for(f"the credential on node {i + 1}", lambda i=i: scram_of(admins[i], user), 5)
    # Idle sessions of the user on nodes 2 and 3 (PLAIN is checked against the SCRAM credential).
    sessions = []
    for i in (1, 2):
        c = Conn("127.0.0.1", trio.nodes[i].listener_port)
        c.authenticate_plain(user, password)
        sessions.append(c)
    deletion = UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_512)
    started = time.monotonic()
    admins[0].alter_user_scram_credentials([deletion], request_timeout=30)[user].result(timeout=40)
    acknowledged = time.monotonic() - started
    for i, c in zip((1, 2), sessions):
        c.wait_closed(timeout=5)
        took = time.monotonic() - started - acknowledged
        assert took <= VISIBLE_WITHIN, f"node {i + 1} closed the revoked session {took:.2f}s after the ack"
        c.close()


# --------------------------------------------------------------------------------------------------
# Refusals


def uvarint(n: int) -> bytes:
    out = b""
    while n >= 0x80:
        out += bytes([(n & 0x7F) | 0x80])
        n >>= 7
    return out + bytes([n])


def compact_bytes(b: bytes | None) -> bytes:
    return b"\x00" if b is None else uvarint(len(b) + 1) + b


def create_acls_v1(correlation_id: int, topic: str, principal: str) -> bytes:
    """A CreateAcls v1 request frame (header and body, no size prefix)."""
    def s(x: str) -> bytes:
        return struct.pack(">h", len(x)) + x.encode()
    body = struct.pack(">i", 1) + struct.pack(">b", 2) + s(topic) + struct.pack(">b", 3) + s(principal) + s("*")
    body += struct.pack(">bb", 3, 3)
    return struct.pack(">hhi", 30, 1, correlation_id) + s("forged") + body


def principal_bytes(kind: str, name: str, token: bool = False) -> bytes:
    return (struct.pack(">h", 0) + compact_bytes(kind.encode()) + compact_bytes(name.encode())
            + bytes([1 if token else 0]) + b"\x00")


def envelope(correlation_id: int, inner: bytes, principal: bytes | None, ip: bytes = bytes([127, 0, 0, 1])) -> bytes:
    header = struct.pack(">hhi", 58, 0, correlation_id) + struct.pack(">h", 4) + b"test" + b"\x00"
    body = compact_bytes(inner) + compact_bytes(principal) + compact_bytes(ip) + b"\x00"
    frame = header + body
    return struct.pack(">i", len(frame)) + frame


def read_frame(sock) -> bytes:
    def exact(n):
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
            buf += chunk
        return buf
    (size,) = struct.unpack(">i", exact(4))
    return exact(size)


def envelope_error(frame: bytes) -> tuple[int, bytes | None]:
    """(error code, inner response) of an Envelope v0 response frame."""
    pos = 4  # correlation id
    assert frame[pos] == 0, "no header tagged fields expected"
    pos += 1
    n, shift, length = 0, 0, 0
    while True:
        b = frame[pos]
        pos += 1
        length |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            break
    data = None if length == 0 else frame[pos:pos + length - 1]
    pos += 0 if length == 0 else length - 1
    (error,) = struct.unpack(">h", frame[pos:pos + 2])
    return error, data


def tls_to(cluster: Cluster, index: int, cert: tuple[Path, Path] | None, ca: Path | None = None):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(str(ca or cluster.tls.ca))
    if cert is not None:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    raw = socket.create_connection(("127.0.0.1", cluster.inter_node_ports[index]), timeout=10)
    return ctx.wrap_socket(raw, server_hostname="127.0.0.1")


def test_an_envelope_on_a_client_listener_closes_the_connection(trio):
    # alice is a super user: even her Envelope, which would let her speak for anyone, is refused.
    with Conn("127.0.0.1", trio.nodes[0].listener_port) as c:
        c.authenticate_plain("alice", "alice-through-portcullis")
        c.send_raw(envelope(7, create_acls_v1(1, "forged", "User:mallory"), principal_bytes("User", "admin")))
        assert c.wait_closed(timeout=5) == b"", "the Envelope was answered on a client listener"


def test_the_writer_checks_the_peer_and_the_forwarded_principal(trio, unique):
    writer = trio.writer()
    topic = unique("forged")
    inner = create_acls_v1(1, topic, "User:mallory")
    # A certificate of the cluster's CA whose principal has no ClusterAction on the cluster.
    rogue = trio.tls.cert(f"{trio.cluster_id}-rogue")
    with tls_to(trio, writer, rogue) as s:
        s.sendall(envelope(1, inner, principal_bytes("User", "alice")))
        assert envelope_error(read_frame(s)) == (31, None), "CLUSTER_AUTHORIZATION_FAILED expected"
    # A node's own certificate, but a principal that does not deserialize (wrong version, garbage,
    # none): PRINCIPAL_DESERIALIZATION_FAILURE.
    node = trio.tls.cert(trio.node_name(writer))
    with tls_to(trio, writer, node) as s:
        for n, principal in enumerate([b"\x00\x01" + principal_bytes("User", "alice")[2:], b"\xff\xff\xff", None]):
            s.sendall(envelope(10 + n, inner, principal))
            assert envelope_error(read_frame(s)) == (97, None), f"principal {principal!r}"
        # The forwarded principal is authorized, not the peer: bob may not create ACLs.
        s.sendall(envelope(20, inner, principal_bytes("User", "bob")))
        error, data = envelope_error(read_frame(s))
        assert error == 0 and data is not None
        # CreateAcls v1 response: correlation id, throttle, [results: error code, message].
        (count,) = struct.unpack(">i", data[8:12])
        (code,) = struct.unpack(">h", data[12:14])
        assert (count, code) == (1, 31), data
    admin = AdminClient(admin_conf(trio.nodes[writer]))
    assert acls_of(admin, topic) == [], "a refused Envelope created an ACL"


def test_the_inter_node_listener_refuses_peers_without_a_cluster_certificate(trio):
    writer = trio.writer()
    # No client certificate.
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        with tls_to(trio, writer, None) as s:
            s.sendall(envelope(1, create_acls_v1(1, "x", "User:x"), principal_bytes("User", "alice")))
            read_frame(s)
    # A certificate from another CA.
    foreign = trio.tls.cert("foreign-node", ca="foreign-ca")
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        with tls_to(trio, writer, foreign) as s:
            s.sendall(envelope(1, create_acls_v1(1, "x", "User:x"), principal_bytes("User", "alice")))
            read_frame(s)
    # Plain TCP: no TLS, nothing is read as Kafka.
    with socket.create_connection(("127.0.0.1", trio.inter_node_ports[writer]), timeout=5) as raw:
        raw.sendall(envelope(1, create_acls_v1(1, "x", "User:x"), principal_bytes("User", "alice")))
        raw.settimeout(5)
        try:
            answer = raw.recv(4096)
        except ConnectionResetError:
            answer = b""
        # Whatever comes back is a TLS alert, never an Envelope response.
        assert answer == b"" or answer[0] == 0x15, answer[:16]


def test_cluster_status_names_the_writer_and_every_nodes_lag(trio):
    writer = trio.writer()
    status = trio.status()
    lines = status.splitlines()
    assert f"writer: node {writer + 1}" in lines[0], status
    rows = {int(line.split()[0]): line.split() for line in lines[2:] if line.strip()}
    assert sorted(rows) == [1, 2, 3], status
    for node_id, row in rows.items():
        assert row[2] in ("writer", "follower"), status
        assert int(row[4]) <= 5, f"node {node_id} lags: {status}"
    assert node_principal(trio.node_name(writer)).startswith("User:CN=")
