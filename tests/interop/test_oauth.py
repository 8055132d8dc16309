"""OAUTHBEARER with real clients and a real OpenID provider (tests/oidc/provider.mjs, oidc-provider).

Through a Portcullis whose listener offers SCRAM-SHA-512 and OAUTHBEARER with the issue's
`[oauthbearer]` table (validator "jwks" against the provider), or with `--target kafka` straight
against Kafka's own OAUTH listener (KIP-768 validator against the same provider: a client test that
fails there is a wrong test):
- Kafka's Java clients with OAuthBearerLoginCallbackHandler (client credentials at the provider's
  token endpoint), producer, consumer group and admin: every record read back, offsets committed;
- confluent-kafka (librdkafka 2.16) with `sasl.oauthbearer.method=oidc`;
- kafkajs 2.2.4 with an `oauthBearerProvider` that fetches the token itself.
Portcullis only:
- the session lifetime a token gets is its remaining lifetime (SaslAuthenticate v1);
- a JWKS URL outside `allowed_urls` is refused at start-up, by `check-config` and `serve`, naming the key;
- groups: an ACL on `Group:readers` lets a token whose groups claim holds "readers" read a topic,
  and a token without it is refused (needs groups as principals in the ACL authorizer);
- introspection (RFC 7662) of opaque tokens.
"""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException

from clients import confluent_consume, confluent_create_topic, confluent_expect_auth_failure, confluent_produce
from conftest import PORTCULLIS_USERS, target
from oauth_support import (INVALID_TOKEN, OAuthNode, confluent_oauth_conf, decode_jwt, default_oauthbearer,
                           java_oauth_properties, java_oauth_run, kafka_oauth_bootstrap, login, metric_total, oidc,
                           run_kafkajs, run_portcullis_expecting_refusal, start_oauth_portcullis)

__all__ = ["oidc"]  # the fixture, imported for pytest


@pytest.fixture(scope="module")
def oauth_node(launcher, oidc) -> OAuthNode:
    return start_oauth_portcullis(launcher, oidc, "oauth-clients")


@pytest.fixture(scope="module")
def bootstrap(request, oidc) -> str:
    """Where the client tests connect: the Portcullis node, or Kafka's OAUTH listener."""
    if target() == "kafka":
        return kafka_oauth_bootstrap()
    return request.getfixturevalue("oauth_node").bootstrap


def oauth_logins(request) -> float | None:
    """Portcullis' count of successful OAUTHBEARER logins (None against Kafka)."""
    if target() == "kafka":
        return None
    node = request.getfixturevalue("oauth_node")
    return metric_total(node, "portcullis_authentications_total", sasl_mechanism="OAUTHBEARER", outcome="success")


# --------------------------------------------------------------------------------------------------
# Clients


def test_java_clients_with_the_login_callback_handler_round_trip(request, java, oidc, bootstrap, tmp_path, unique):
    """kafka-clients 4.4: OAuthBearerLoginCallbackHandler fetches a token (client credentials,
    client id and secret in the JAAS line) for the admin client, the producer and the consumer; 5,000
    keyed records out and back exactly, offsets committed and read back."""
    before = oauth_logins(request)
    props = java_oauth_properties(tmp_path / "oauth.properties", bootstrap, oidc)
    r = java_oauth_run(java, oidc, "RoundTrip", "roundtrip", str(props), unique("oauth-java"), "5000",
                       unique("oauth-java-group"), "classic")
    assert r.returncode == 0, f"RoundTrip failed ({r.returncode}):\n{r.stdout}\n{r.stderr[-4000:]}"
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["ok"] is True and summary["consumed_distinct"] == 5000, summary
    assert summary["committed_total"] == 5000 and summary["duplicates"] == 0 and summary["bad_values"] == 0, summary
    if before is not None:
        # Admin, producer, consumer (and its coordinator connection): each logged in with a token.
        assert oauth_logins(request) - before >= 3


def test_java_client_with_a_wrong_client_secret_gets_no_token(java, oidc, bootstrap, tmp_path):
    """The provider refuses the client credentials, so the Java client has no token to present: it
    fails at login, before any connection (a control: the round trip above is not vacuous)."""
    c = oidc.client()
    props = java_oauth_properties(tmp_path / "bad.properties", bootstrap, oidc,
                                  client=type(c)(c.client_id, c.client_secret + "-wrong", c.groups, c.alg, c.format))
    r = java_oauth_run(java, oidc, "RoundTrip", "expect-auth-failure", str(props), timeout=120)
    assert r.returncode != 0
    assert "invalid_client" in r.stdout + r.stderr, r.stderr[-3000:]


def test_confluent_oidc_client_credentials_round_trip(request, oidc, bootstrap, unique):
    """librdkafka's own OIDC token fetcher (`sasl.oauthbearer.method=oidc`): topic creation, 2,000
    records produced and consumed with a group, exact content, committed offsets."""
    before = oauth_logins(request)
    conf = confluent_oauth_conf(bootstrap, oidc)
    topic = unique("oauth-ck")
    confluent_create_topic(conf, topic, partitions=3)
    sent = confluent_produce(conf, topic, 2000)
    got = confluent_consume(conf, topic, unique("oauth-ck-group"), expected=2000)
    assert got == sent
    if before is not None:
        assert oauth_logins(request) - before >= 3


def test_confluent_with_a_refused_token_sees_the_challenge(oidc, bootstrap):
    """librdkafka given a token with a bad signature (`oauth_cb`): it reports the server's JSON
    challenge as its authentication error."""
    token = oidc.mint(forge="bad-signature")
    conf = {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
            "oauth_cb": lambda _cfg: (token, time.time() + 60), "log_level": 0}
    errors = confluent_expect_auth_failure(conf)
    assert any(INVALID_TOKEN.decode() in e.str() for e in errors), [e.str() for e in errors]


def test_kafkajs_oauth_bearer_provider_round_trip(request, oidc, bootstrap, unique):
    """kafkajs 2.2.4 with an `oauthBearerProvider` that gets its token from the provider's token
    endpoint (client credentials): admin, producer and consumer group, 2,000 records exactly."""
    before = oauth_logins(request)
    c = oidc.client()
    s = run_kafkajs(oidc, {"mode": "roundtrip", "bootstrap": bootstrap, "tokenUrl": oidc.token_url,
                           "clientId": c.client_id, "clientSecret": c.client_secret, "topic": unique("oauth-kj"),
                           "records": 2000, "group": unique("oauth-kj-group")})
    # The summary as text: pytest cuts a dict's repr short, and the client's stderr is the clue.
    assert s["_returncode"] == 0 and s["ok"] is True, json.dumps(s, indent=1)
    assert s["consumed_distinct"] == 2000 and s["duplicates"] == 0 and s["bad_values"] == 0, s
    assert s["token_fetches"] >= 1, s
    if before is not None:
        assert oauth_logins(request) - before >= 2


def test_kafkajs_with_a_refused_token_gets_nowhere(oidc, bootstrap):
    """kafkajs takes the JSON challenge for a success (it does not implement RFC 7628's failure
    exchange), so its next request meets a closed connection: it cannot list topics."""
    s = run_kafkajs(oidc, {"mode": "expect-refusal", "bootstrap": bootstrap, "tokenUrl": oidc.token_url,
                           "clientId": "unused", "clientSecret": "unused", "token": oidc.mint(forge="alg-none")})
    assert s["_returncode"] == 0 and s["ok"] is True and s["errors"], json.dumps(s, indent=1)


# --------------------------------------------------------------------------------------------------
# Portcullis only


@pytest.mark.portcullis_only
def test_session_lifetime_is_the_tokens_remaining_lifetime(oidc, oauth_node):
    """KIP-368: with no connections_max_reauth_ms, the session lasts as long as the token
    (SessionLifetimeMs = exp - now), as on Kafka's OAUTH listener."""
    token = oidc.token()
    exp_ms = decode_jwt(token)[1]["exp"] * 1000
    now_ms = int(time.time() * 1000)
    r = login(oauth_node.host, oauth_node.port, token)
    assert r.accepted and r.metadata, r.outcome()
    assert exp_ms - now_ms - 2000 <= r.session_lifetime_ms <= exp_ms - now_ms + 1000, (r, exp_ms, now_ms)


@pytest.mark.portcullis_only
def test_scram_still_works_next_to_oauthbearer(oauth_node, unique):
    """The listener offers both mechanisms: a SCRAM-SHA-512 user of Portcullis gets in as before."""
    conf = {"bootstrap.servers": oauth_node.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": PORTCULLIS_USERS["alice"],
            "log_level": 3}
    topic = unique("oauth-scram")
    confluent_create_topic(conf, topic, partitions=1)
    assert confluent_produce(conf, topic, 10)


@pytest.mark.portcullis_only
@pytest.mark.parametrize("key,url", [
    ("jwks_url", "http://127.0.0.2:1/jwks"),
    ("discovery_url", "http://127.0.0.2:1/.well-known/openid-configuration"),
])
def test_a_url_outside_allowed_urls_is_refused_at_start(launcher, oidc, key, url):
    """CVE-2025-27817's lesson: a configured URL that is not on `allowed_urls` is never fetched; the
    node does not start, and the error names the key. `check-config` says the same."""
    table = default_oauthbearer(oidc, f"refused-{key}")
    if key == "discovery_url":
        table.pop("jwks_url")
    table[key] = url
    check, serve = run_portcullis_expecting_refusal(launcher, f"oauth-refused-{key.replace('_', '-')}", table)
    for what, r in (("check-config", check), ("serve", serve)):
        out = r.stdout + r.stderr
        assert r.returncode != 0, f"{what} accepted a {key} outside allowed_urls:\n{out}"
        assert f"oauthbearer.{key}" in out, f"{what} did not name the key:\n{out}"
        assert "allowed_urls" in out, f"{what} did not say why:\n{out}"


# ---- groups (needs groups as principals in the ACL authorizer: helper D's part of issue 22) ------


@pytest.fixture(scope="module")
def groups_node(launcher, oidc) -> OAuthNode:
    """ACL authorizer on; alice (SCRAM) is the super user who writes the ACLs and the records."""
    return start_oauth_portcullis(launcher, oidc, "oauth-groups", sections={"authorizer": {
        "plugin": "acl", "super_users": ["User:alice"], "allow_everyone_if_no_acl_found": False}})


def _read_all(conf: dict, topic: str, group: str, expected: int, timeout: float = 30) -> tuple[int, set[str]]:
    """(records read from the start, the errors seen) by a consumer of group `group` subscribed to
    `topic` (no commits); stops at TOPIC_AUTHORIZATION_FAILED."""
    c = Consumer({**conf, "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    errors: set[str] = set()
    n = 0
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + timeout
        while n < expected and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                errors.add(msg.error().name())
                if msg.error().code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    break
                continue
            n += 1
    except KafkaException as e:
        errors.add(e.args[0].name())
    finally:
        c.close()
    return n, errors


@pytest.mark.portcullis_only
def test_an_acl_on_a_group_principal_grants_the_tokens_of_that_group(groups_node, oidc, kafka_env, unique):
    """kafka-acls through Portcullis: --allow-principal Group:readers --operation Read on a topic.
    A token whose groups claim holds "readers" (reader-client) reads it; a token of another group
    (the main client, groups ["testers"], allowed the same consumer group) is refused with
    TOPIC_AUTHORIZATION_FAILED. Kafka has no
    such principals: this is Portcullis' own (Redpanda-like) behaviour."""
    from test_acl_tools import kafka_acls  # noqa: PLC0415 - the suite's kafka-acls runner

    topic = unique("oauth-groups")
    admin = {"bootstrap.servers": groups_node.bootstrap, "security.protocol": "SASL_PLAINTEXT",
             "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
             "sasl.password": PORTCULLIS_USERS["alice"], "log_level": 3}
    confluent_create_topic(admin, topic, partitions=1)
    confluent_produce(admin, topic, 20)
    props = groups_node.process.workdir / "alice-admin.properties"
    props.write_text(
        f"bootstrap.servers={groups_node.bootstrap}\nsecurity.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="alice" password="{PORTCULLIS_USERS["alice"]}";\n')
    group = unique("oauth-readers")
    out = kafka_acls(kafka_env, props, [
        ("add-topic", ["--add", "--allow-principal", "Group:readers", "--operation", "Read", "--topic", topic]),
        ("add-group", ["--add", "--allow-principal", "Group:readers", "--operation", "Read", "--group", group]),
        # The other token may use the consumer group too: only the topic's ACL tells them apart.
        ("add-group-other", ["--add", "--allow-principal", f"User:{oidc.client_id}", "--operation", "Read",
                             "--group", group]),
        ("list", ["--list", "--topic", topic]),
    ])
    assert "principal=Group:readers" in out["list"], out["list"]
    reader = oidc.client("reader-client")
    assert "readers" in reader.groups and "readers" not in oidc.client().groups
    n, errors = _read_all(confluent_oauth_conf(groups_node.bootstrap, oidc, reader), topic, group, 20)
    assert (n, errors) == (20, set()), f"the readers' token read {n} records, errors {errors}"
    n, errors = _read_all(confluent_oauth_conf(groups_node.bootstrap, oidc), topic, group, 20, timeout=15)
    assert n == 0 and "TOPIC_AUTHORIZATION_FAILED" in errors, f"a token without the group read {n}, errors {errors}"


# ---- introspection (RFC 7662) -------------------------------------------------------------------


@pytest.fixture(scope="module")
def introspection_node(launcher, oidc) -> OAuthNode:
    intro = oidc.client("introspector")
    table = default_oauthbearer(oidc, "introspection", validator="introspection", jwks_url=None,
                                introspection_url=oidc.introspection_url,
                                introspection_client_id=intro.client_id,
                                introspection_client_secret=intro.client_secret)
    return start_oauth_portcullis(launcher, oidc, "oauth-introspection", oauthbearer=table)


@pytest.mark.portcullis_only
def test_introspection_accepts_active_opaque_tokens_and_refuses_others(introspection_node, oidc, unique):
    """validator = "introspection": an opaque token from the provider (client credentials of the
    opaque client) logs in, and confluent-kafka with it produces and consumes; a made-up token and a
    JWT (which oidc-provider does not introspect) are refused with the invalid_token challenge."""
    opaque = oidc.client("opaque-client")
    token = oidc.token(opaque)
    assert token.count(".") == 0, "the opaque client's token is not opaque"
    r = login(introspection_node.host, introspection_node.port, token)
    assert r.accepted and r.metadata, r.outcome()
    for bad in ("made-up-opaque-token-0123456789", oidc.token()):
        r = login(introspection_node.host, introspection_node.port, bad)
        assert not r.accepted and r.challenge == INVALID_TOKEN and r.error == 58, r.outcome()
    # librdkafka's own OIDC fetcher wants a JWT (it reads exp and sub from it): an opaque token is
    # handed to it by oauth_cb, with the lifetime the token endpoint gave.
    def opaque_token(_config):
        return oidc.token(opaque), time.time() + oidc.ttl

    conf = {"bootstrap.servers": introspection_node.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER", "oauth_cb": opaque_token, "log_level": 3}
    topic = unique("oauth-introspected")
    confluent_create_topic(conf, topic, partitions=1)
    sent = confluent_produce(conf, topic, 200)
    assert confluent_consume(conf, topic, unique("oauth-intro-group"), expected=200) == sent
