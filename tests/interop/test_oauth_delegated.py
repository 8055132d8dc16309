"""OAuth users under the `delegated` forwarding policy: their own upstream delegation tokens.

A Portcullis whose listener offers OAUTHBEARER (the `jwks` validator against the run's OpenID
provider, as oauth_support configures it) with `[forwarding] policy = "delegated"`, configured as
test_delegated.py configures it: the upstream is the suite Kafka's SASL listener, Portcullis logs
in there as a service user of this file's own, `odlg-svc`, which holds CreateTokens and
DescribeTokens on exactly the two OAuth users below (`--user-principal User:<client id>`, the
bounded grant) and no data rights. confluent-kafka clients log in to Portcullis with the provider's
tokens (client credentials; `sub` is the client id) and produce and consume. Shown:

- Kafka authorizes the OAuth user itself: an upstream ACL for `User:reader-client` on the topic is
  what lets it write and read (every record read back), while `User:es256-client`, allowed the
  same consumer group but not the topic, gets TOPIC_AUTHORIZATION_FAILED for produce and consume
  (answers of the broker, not a closed connection or a failed login), exactly as straight against
  Kafka's own OAUTH listener; Kafka's authorizer log names those two users for the topic, never
  the service principal;
- Portcullis created one upstream delegation token per OAuth user: described upstream by Kafka's
  admin (`kafka-delegation-tokens --describe --owner-principal User:<sub>`), owned by exactly
  `User:<sub>` of the user's JWT, requested by and renewable by the service principal, with the
  token id Portcullis logged for that principal when it created it;
- the 12 s OAuth sessions re-authenticate with new tokens (KIP-368) while a producer keeps going,
  and keep the same upstream token: nothing is lost, no token is created again.

`portcullis-test-client` (the provider's main client) is not used for the ACL cases: it is a
super user of the suite's Kafka (scripts/test.sh, KAFKA_OAUTH_SUPER_USERS).
"""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType)

from clients import confluent_consume, confluent_produce
from conftest import PortcullisProcess
from oauth_support import (Client, OAuthNode, Oidc, confluent_oauth_conf, decode_jwt, default_oauthbearer,
                           kafka_oauth_bootstrap, metric_total, oidc, write_oauth_config)
from test_delegation_tokens import ACL_COMMAND, TOKEN_COMMAND, Tools, token_rows

pytestmark = pytest.mark.portcullis_only

__all__ = ["oidc"]  # the fixture, imported for pytest

CONFIG_COMMAND = "org.apache.kafka.tools.ConfigCommand"
SERVICE, SERVICE_PW = "odlg-svc", "odlg-svc-secret"  # test-only, loopback broker of one run
GRANTED = "reader-client"  # the upstream ACLs below name User:reader-client
REFUSED = "es256-client"  # allowed the consumer groups, not the topics
# Broker-side errors that mean the connection itself failed, not an answer to a request.
CONNECTION_ERRORS = {"_AUTHENTICATION", "_TRANSPORT", "_ALL_BROKERS_DOWN"}


# --------------------------------------------------------------------------------------------------
# Helpers


def kafka_admin_conf(kafka_env) -> dict:
    """Kafka's admin, straight against its SASL listener (a super user of the suite's Kafka)."""
    return {"bootstrap.servers": kafka_env["KAFKA_SASL_BOOTSTRAP"], "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": kafka_env["KAFKA_ADMIN_USER"],
            "sasl.password": kafka_env["KAFKA_ADMIN_PASSWORD"], "log_level": 3}


def create_topic(kafka_env, topic: str) -> None:
    admin = AdminClient(kafka_admin_conf(kafka_env))
    admin.create_topics([NewTopic(topic, 1, 1)], request_timeout=30)[topic].result(timeout=60)


def run_tools(tools: Tools, steps: list[tuple[str, str, str, list[str]]]) -> dict[str, dict]:
    results = tools.run(steps)
    for label, r in results.items():
        assert r["rc"] == 0, f"{label}: rc={r['rc']}\n{r['out'][-2000:]}\n{r['err'][-2000:]}"
    return results


def wait_for_acls(kafka_env, principal: str, resource_type: ResourceType, name: str, count: int,
                  timeout: float = 30) -> None:
    """Waits until the broker's authorizer serves `count` ACLs of `principal` on the prefixed
    `name` (DescribeAcls is answered from the same cache that authorizes). Kafka applies metadata
    records in order, so once the last ACL written is visible, everything written before it (the
    service user's SCRAM credential, its CreateTokens grants) is applied too."""
    admin = AdminClient(kafka_admin_conf(kafka_env))
    f = AclBindingFilter(resource_type, name, ResourcePatternType.PREFIXED, principal, None, AclOperation.ANY,
                         AclPermissionType.ANY)
    deadline = time.monotonic() + timeout
    seen: list[AclBinding] = []
    while time.monotonic() < deadline:
        seen = admin.describe_acls(f, request_timeout=10).result(timeout=20)
        if len(seen) >= count:
            return
        time.sleep(0.2)
    raise AssertionError(f"the broker serves {len(seen)} of the {count} ACLs of {principal} on {name}* "
                         f"after {timeout}s: {seen}")


def tokens_owned_by(tools: Tools, kafka_env, owner: str) -> list[dict]:
    """The upstream tokens owned by `owner` (a principal, `User:<name>`), described by Kafka's admin
    with kafka-delegation-tokens; without the HMAC (a credential, never printed by a failing test)."""
    r = run_tools(tools, [("d", TOKEN_COMMAND, kafka_env["KAFKA_ADMIN_USER"],
                           ["--describe", "--owner-principal", owner])])["d"]
    return [{k: v for k, v in row.items() if k != "hmac"} for row in token_rows(r["out"])]


CREATED = re.compile(r"upstream delegation token created.*?\bprincipal=(\S+).*?\btoken_id=\"?([A-Za-z0-9_-]+)")


def tokens_created(node: PortcullisProcess) -> list[tuple[str, str]]:
    """(principal, token id) of every upstream token the node logged as created."""
    text = node.log_path.read_text(errors="replace")
    return [(m.group(1), m.group(2)) for m in CREATED.finditer(text)]


def jwt_sub(oidc: Oidc, client: Client) -> str:
    """The `sub` of an access token the provider issues to `client` (what Portcullis' jwks
    validator takes as the principal's name: the default `principal_claim_name`)."""
    _, claims = decode_jwt(oidc.token(client))
    return claims["sub"]


def produce_one(conf: dict, topic: str, timeout: float = 20) -> tuple[str, set[str]]:
    """One record: the delivery outcome ('ok' or the error's name) and the names of the errors
    librdkafka reported besides (error_cb)."""
    errors: set[str] = set()
    out: list[str] = []
    p = Producer({**conf, "message.timeout.ms": int(timeout * 1000), "retries": 0,
                  "error_cb": lambda e: errors.add(e.name())})
    p.produce(topic, b"v", on_delivery=lambda err, msg: out.append("ok" if err is None else err.name()))
    p.flush(timeout + 5)
    return (out[0] if out else "no delivery report"), errors


def consume_outcome(conf: dict, topic: str, group: str, timeout: float = 20) -> tuple[str, set[str]]:
    """Subscribes with `group` and polls: 'ok' once a record or the end of the partition is seen,
    else the first error's name; and the errors error_cb reported."""
    errors: set[str] = set()
    c = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest", "enable.partition.eof": True,
                  "enable.auto.commit": False, "error_cb": lambda e: errors.add(e.name())})
    c.subscribe([topic])
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is None or m.error().code() == KafkaError._PARTITION_EOF:
                return "ok", errors
            return m.error().name(), errors
        return "timeout", errors
    finally:
        c.close()


def authorizer_log() -> Path:
    """Kafka's authorizer audit log (`kafka.authorizer.logger`, denials at INFO, allows at DEBUG),
    written by scripts/lib/kafka.sh to a file of its own in the broker's run directory."""
    import os
    run_dir = os.environ.get("KAFKA_RUN_DIR")
    assert run_dir, "KAFKA_RUN_DIR is not set (the suite's Kafka is started by scripts/lib/kafka.sh)"
    return Path(run_dir) / "kafka-authorizer.log"


def authorizer_lines(since: int, topic: str) -> list[str]:
    """The authorizer log's lines about `topic` written after offset `since`."""
    resource = f"on resource = Topic:LITERAL:{topic} "
    with authorizer_log().open(errors="replace") as f:
        f.seek(since)
        return [line for line in f.read().splitlines() if resource in line]


def log_offset() -> int:
    log = authorizer_log()
    return log.stat().st_size if log.exists() else 0


def wait_for_line(since: int, topic: str, pattern: str, timeout: float = 10) -> list[str]:
    """The authorizer log's lines about `topic` once one matches `pattern` (the log is written
    asynchronously), or an assertion error showing the lines seen."""
    deadline = time.monotonic() + timeout
    lines: list[str] = []
    while time.monotonic() < deadline:
        lines = authorizer_lines(since, topic)
        if any(re.search(pattern, line) for line in lines):
            return lines
        time.sleep(0.2)
    raise AssertionError(f"no line matching {pattern!r} for {topic} in {authorizer_log()}:\n" + "\n".join(lines[-20:]))


def principals_in(lines: list[str]) -> set[str]:
    return {m.group(1) for line in lines if (m := re.search(r"Principal = (\S+) is", line))}


# --------------------------------------------------------------------------------------------------
# The upstream's users and ACLs, and the node


class Setup:
    def __init__(self, tools: Tools, prefix: str):
        self.tools = tools
        self.prefix = prefix  # topics and groups the ACLs cover (prefixed)

    def topic(self, kafka_env, what: str) -> str:
        name = f"{self.prefix}{what}-{uuid.uuid4().hex[:8]}"
        create_topic(kafka_env, name)
        return name

    def group(self, what: str) -> str:
        return f"{self.prefix}{what}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def upstream(kafka_env, java, tmp_path_factory) -> Setup:
    """As Kafka's admin: the service user with CreateTokens/DescribeTokens on the two OAuth users
    only; User:reader-client may write, read and describe the topics of this module's prefix and
    use its groups; User:es256-client may use the groups only."""
    work = tmp_path_factory.mktemp("odlg-tools")
    a = kafka_env["KAFKA_ADMIN_USER"]
    tools = Tools(java, kafka_env["KAFKA_SASL_BOOTSTRAP"], {a: kafka_env["KAFKA_ADMIN_PASSWORD"]}, work)
    prefix = f"odlg-{uuid.uuid4().hex[:8]}-"
    acl = lambda *args: ["--add", *args]  # noqa: E731
    run_tools(tools, [
        ("svc", CONFIG_COMMAND, a, ["--alter", "--add-config", f"SCRAM-SHA-512=[iterations=4096,password={SERVICE_PW}]",
                                    "--entity-type", "users", "--entity-name", SERVICE]),
        *[(f"tokens-{user}", ACL_COMMAND, a, acl("--allow-principal", f"User:{SERVICE}", "--operation", "CreateTokens",
                                                 "--operation", "DescribeTokens", "--user-principal", f"User:{user}"))
          for user in (GRANTED, REFUSED)],
        ("topics", ACL_COMMAND, a, acl("--allow-principal", f"User:{GRANTED}", "--operation", "Write",
                                       "--operation", "Read", "--operation", "Describe", "--topic", prefix,
                                       "--resource-pattern-type", "prefixed")),
        ("groups", ACL_COMMAND, a, acl("--allow-principal", f"User:{GRANTED}", "--allow-principal",
                                       f"User:{REFUSED}", "--operation", "Read", "--group", prefix,
                                       "--resource-pattern-type", "prefixed")),
    ])
    wait_for_acls(kafka_env, f"User:{REFUSED}", ResourceType.GROUP, prefix, 1)
    wait_for_acls(kafka_env, f"User:{GRANTED}", ResourceType.TOPIC, prefix, 3)
    return Setup(tools, prefix)


@pytest.fixture(scope="module")
def node(launcher, oidc, kafka_env, upstream) -> OAuthNode:
    """OAUTHBEARER (and SCRAM-SHA-512) on the listener, `delegated` towards the SASL listener."""
    for user in (GRANTED, REFUSED):
        assert tokens_owned_by(upstream.tools, kafka_env, f"User:{user}") == [], f"a token of {user} exists already"
    name = f"oauth-delegated-{uuid.uuid4().hex[:6]}"
    table = default_oauthbearer(oidc, name)
    p, metrics = write_oauth_config(launcher, name, table, upstream={
        "bootstrap_servers": [kafka_env["KAFKA_SASL_BOOTSTRAP"]], "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512", "username": SERVICE, "password": SERVICE_PW})
    text = p.config.read_text()
    assert text.count('policy = "passthrough"') == 1, text
    p.config.write_text(text.replace('policy = "passthrough"', 'policy = "delegated"'))
    p.start()
    yield OAuthNode(p, metrics, table)
    p.stop()


# --------------------------------------------------------------------------------------------------
# Tests


def test_kafka_authorizes_the_oauth_user_itself(node, oidc, kafka_env, upstream):
    """The upstream ACL for User:reader-client lets reader-client's OAuth sessions produce and
    consume through Portcullis; es256-client, with no ACL on the topic, is answered
    TOPIC_AUTHORIZATION_FAILED by the broker (its login succeeded: its own token, no closed
    connection), as it is straight against Kafka's OAUTH listener. Kafka's authorizer names the
    OAuth users, never the service principal."""
    topic, group = upstream.topic(kafka_env, "rw"), upstream.group("rw")
    since = log_offset()
    granted = confluent_oauth_conf(node.bootstrap, oidc, oidc.client(GRANTED))
    sent = confluent_produce(granted, topic, 200)
    assert confluent_consume(granted, topic, group, expected=200) == sent

    refused_client = oidc.client(REFUSED)
    refused = confluent_oauth_conf(node.bootstrap, oidc, refused_client)
    produced, produce_errors = produce_one(refused, topic)
    consumed, consume_errors = consume_outcome(refused, topic, upstream.group("refused"))
    assert (produced, consumed) == ("TOPIC_AUTHORIZATION_FAILED", "TOPIC_AUTHORIZATION_FAILED"), \
        (produced, consumed, node.process.log_tail(30))
    assert not (produce_errors | consume_errors) & CONNECTION_ERRORS, (produce_errors, consume_errors)
    # The same client straight against Kafka's own OAuth listener: the same answers.
    direct = confluent_oauth_conf(kafka_oauth_bootstrap(), oidc, refused_client)
    assert produce_one(direct, topic)[0] == produced
    assert consume_outcome(direct, topic, upstream.group("refused-direct"))[0] == consumed

    # Kafka's own record of who asked: the OAuth users, each with its own outcome.
    for pattern in (rf"Principal = User:{GRANTED} is Allowed operation = WRITE ",
                    rf"Principal = User:{GRANTED} is Allowed operation = READ ",
                    rf"Principal = User:{REFUSED} is Denied operation = "):
        lines = wait_for_line(since, topic, pattern)
    assert not any(f"Principal = User:{GRANTED} is Denied" in line for line in lines), lines
    assert not any(f"Principal = User:{REFUSED} is Allowed" in line for line in lines), lines
    users = principals_in(lines)
    assert f"User:{SERVICE}" not in users, users
    # Only this test reads and writes the topic; any client of the shared broker that lists every
    # topic (Metadata) is checked for DESCRIBE on it too — another parallel worker's passthrough
    # node as User:ANONYMOUS, say — so those lines say nothing about who used it.
    acting = principals_in([line for line in lines if "operation = DESCRIBE " not in line])
    assert acting <= {f"User:{GRANTED}", f"User:{REFUSED}", f"User:{kafka_env['KAFKA_ADMIN_USER']}"}, acting


def test_each_oauth_user_has_one_upstream_token_owned_by_its_sub(node, oidc, kafka_env, upstream):
    """After both OAuth users logged in (and used the upstream): upstream, Kafka's admin describes
    exactly one token owned by each `User:<sub>` (the JWT's sub), requested by the service
    principal and renewable by it; its id is the one Portcullis logged for that very principal."""
    topic = upstream.topic(kafka_env, "tokens")
    assert produce_one(confluent_oauth_conf(node.bootstrap, oidc, oidc.client(GRANTED)), topic)[0] == "ok"
    assert produce_one(confluent_oauth_conf(node.bootstrap, oidc, oidc.client(REFUSED)), topic)[0] == \
        "TOPIC_AUTHORIZATION_FAILED"
    created = tokens_created(node.process)
    for client_id in (GRANTED, REFUSED):
        sub = jwt_sub(oidc, oidc.client(client_id))
        assert sub == client_id, "the provider's client-credentials tokens name the client in sub"
        principal = f"User:{sub}"
        rows = tokens_owned_by(upstream.tools, kafka_env, principal)
        assert len(rows) == 1, rows
        [row] = rows
        assert row["owner"] == principal, row
        assert row["requester"] == f"User:{SERVICE}", row
        assert f"User:{SERVICE}" in row["renewers"], row
        ours = [token_id for who, token_id in created if who == principal]
        assert ours == [row["id"]], (principal, created, row)
    # Portcullis created tokens for these two principals only, each once.
    assert sorted(who for who, _ in created) == sorted(f"User:{c}" for c in (GRANTED, REFUSED)), created


def test_oauth_reauthentication_keeps_the_upstream_token(node, oidc, kafka_env, upstream):
    """The provider's tokens live 12 s: a producer of reader-client running for 30 s
    re-authenticates its sessions with new tokens (KIP-368) through Portcullis, every record is
    delivered and read back, and the upstream token stays the same one (no new token, no new
    creation)."""
    topic, group = upstream.topic(kafka_env, "reauth"), upstream.group("reauth")
    principal = f"User:{GRANTED}"
    conf = confluent_oauth_conf(node.bootstrap, oidc, oidc.client(GRANTED))
    reauths = lambda: metric_total(node, "portcullis_authentications_total",  # noqa: E731
                                   sasl_mechanism="OAUTHBEARER", outcome="success", reauthentication="true")
    errors: list[str] = []
    delivered: list[bytes] = []
    p = Producer({**conf, "linger.ms": 20, "error_cb": lambda e: errors.append(e.name())})
    p.produce(topic, key=b"0", value=b"0", on_delivery=lambda err, msg: (
        errors.append(err.name()) if err else delivered.append(msg.key())))
    assert p.flush(30) == 0 and errors == [], errors
    before_tokens = tokens_owned_by(upstream.tools, kafka_env, principal)
    before_created = [t for who, t in tokens_created(node.process) if who == principal]
    before_reauths = reauths()
    start, n = time.monotonic(), 1
    while time.monotonic() - start < 30:
        p.produce(topic, key=str(n).encode(), value=b"v", on_delivery=lambda err, msg: (
            errors.append(err.name()) if err else delivered.append(msg.key())))
        n += 1
        p.poll(0.1)
    assert p.flush(30) == 0
    assert errors == [], errors[:10]
    assert sorted(int(k) for k in delivered) == list(range(n))
    assert reauths() - before_reauths >= 2, "the OAuth sessions did not re-authenticate"
    assert tokens_owned_by(upstream.tools, kafka_env, principal) == before_tokens
    assert [t for who, t in tokens_created(node.process) if who == principal] == before_created
    got = confluent_consume(conf, topic, group, expected=n)
    assert sorted(int(k) for k in got) == list(range(n))
