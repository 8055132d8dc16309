"""Portcullis logs in upstream with the JWT-bearer grant (Portcullis only): `[upstream.login] plugin
= "oauth-jwt-bearer"` (KIP-1139, RFC 7523) signs an assertion with a private key and trades it at
the provider's token endpoint for a token of 12 s, which Kafka's own OAUTH listener (KIP-768
validator, scripts/lib/kafka.sh) accepts for a session of the token's remaining lifetime.

The provider (tests/oidc/provider.mjs) has a JWT-bearer client with a key pair made at start; it
verifies the assertion with the public key (iss, sub, aud, exp, jti replay), refuses anything else
with invalid_grant, counts refusals by reason, and issues a token whose sub is the assertion's sub:
the main client's id, which Kafka's OAUTH listener makes a super user (the assertion's iss, the
JWT-bearer client, is not one: a token with the wrong sub could not produce).

- The control: the provider's grant, asked directly, accepts a well-signed assertion (and Kafka's
  listener the token it gives), and refuses a replayed, expired, wrongly addressed or wrongly signed
  one with invalid_grant for the reason expected. Without this, a node that "does not start" would
  prove nothing.
- A node with the registered key: a Java producer sends 100 records/s through it for 30 s while a
  consumer reads them (the clients log in with SCRAM-SHA-512, so anything that breaks is the
  upstream side); nothing is lost, no client connection closes, the upstream connections outlive
  a token, the provider issued new tokens for the client during the run, Portcullis logs no warning
  or error and no JWT.
- A node whose assertion key is a fresh one (not the registered key) does not start: its one
  request is refused by the provider (reason: signature), the node is not retrying it, and its error
  names the token endpoint's refusal without printing the assertion or the key.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import pytest

from conftest import PORTCULLIS_USERS, host_port
from oauth_support import (OAuthConn, Oidc, decode_jwt, kafka_oauth_bootstrap, oidc, start_oauth_portcullis,
                           write_oauth_config)
from reauth_support import ConnectionTracker, describe, portcullis_ports

__all__ = ["oidc"]

pytestmark = pytest.mark.portcullis_only

JWT_BEARER_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"
PLUGIN = "oauth-jwt-bearer"
RUN_S = 30
WARN_OR_ERROR = re.compile(r"^\S+\s+(WARN|ERROR)\b", re.MULTILINE)
# Any JWT (a base64url JSON header starts so): none belongs in a log or an error.
JWT_PREFIX = "eyJ"


# --------------------------------------------------------------------------------------------------
# The provider's JWT-bearer client (admin API, tests/oidc/provider.mjs)


def jwt_bearer_client(oidc: Oidc) -> dict:
    """{client_id, private_key_pem, alg, kid, subjects, audiences, token_endpoint, refused, refusals}.
    The key is a test-only key of a loopback provider; never print this dict."""
    return oidc._call("GET", "/jwt-bearer-client")  # type: ignore[return-value]


def jwt_bearer_tokens(oidc: Oidc, client_id: str) -> int:
    """Access tokens the provider issued to `client_id` by the JWT-bearer grant."""
    counts = oidc._call("GET", "/tokens-issued?grant=" + urllib.parse.quote(JWT_BEARER_GRANT, safe=""))
    return int(counts.get(client_id, 0))  # type: ignore[union-attr]


def refused(oidc: Oidc) -> dict[str, int]:
    """The provider's count of refused assertions, by reason."""
    return dict(jwt_bearer_client(oidc)["refused"])


def write_private(path: Path, text: str) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


def fresh_rsa_key(path: Path) -> Path:
    """A new RSA-2048 private key (PKCS#8 PEM) that the provider has never seen."""
    subprocess.run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(path)],
                   check=True, capture_output=True, timeout=60)
    path.chmod(0o600)
    return path


def pem_body_lines(pem: str) -> list[str]:
    return [line for line in pem.splitlines() if line and not line.startswith("-----")]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def sign_assertion(key: Path, claims: dict, kid: str) -> str:
    """An RS256 JWT signed with `key` by openssl (another implementation than the provider's jose
    and Portcullis' jsonwebtoken)."""
    header = {"alg": "RS256", "typ": "JWT", "kid": kid}
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    signature = subprocess.run(["openssl", "dgst", "-sha256", "-sign", str(key)], input=signing_input.encode(),
                               capture_output=True, check=True, timeout=30).stdout
    return f"{signing_input}.{_b64(signature)}"


def post_assertion(token_endpoint: str, assertion: str) -> tuple[int, dict]:
    """The grant as Portcullis and Kafka's JwtBearerJwtRetriever send it: no client authentication."""
    data = urllib.parse.urlencode({"grant_type": JWT_BEARER_GRANT, "assertion": assertion}).encode()
    req = urllib.request.Request(token_endpoint, data=data,
                                 headers={"content-type": "application/x-www-form-urlencoded"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def login_sections(oidc: Oidc, client: dict, key_file: Path) -> dict[str, dict]:
    """The login module's table: iss = client_id (the default), sub = the principal the client may
    ask tokens for, aud = the token endpoint (the default), the registered kid."""
    return {
        "upstream.login": {"plugin": PLUGIN},
        f"plugins.config.{PLUGIN}": {
            "token_endpoint_url": oidc.token_url,
            "allowed_urls": [oidc.allowed_prefix],
            "client_id": client["client_id"],
            "assertion_subject": client["subjects"][0],
            "assertion_private_key_file": str(key_file),
            "assertion_algorithm": client["alg"],
            "assertion_key_id": client["kid"],
        },
    }


def oauth_upstream() -> dict:
    return {
        "bootstrap_servers": [kafka_oauth_bootstrap()],
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "OAUTHBEARER",
    }


# --------------------------------------------------------------------------------------------------
# The control: the provider's grant itself


def test_provider_jwt_bearer_grant_checks_the_assertion(oidc, tmp_path):
    client = jwt_bearer_client(oidc)
    key = write_private(tmp_path / "registered.pem", client["private_key_pem"])
    other = fresh_rsa_key(tmp_path / "other.pem")
    sub = client["subjects"][0]
    assert client["token_endpoint"] == oidc.token_url, client["token_endpoint"]

    def claims(**overrides) -> dict:
        now = int(time.time())
        c = {"iss": client["client_id"], "sub": sub, "aud": oidc.token_url, "iat": now, "nbf": now - 60,
             "exp": now + 300, "jti": uuid.uuid4().hex}
        c.update(overrides)
        return c

    good = sign_assertion(key, claims(), client["kid"])
    status, body = post_assertion(oidc.token_url, good)
    assert status == 200, (status, body)
    _, token_claims = decode_jwt(body["access_token"])
    assert (token_claims["iss"], token_claims["aud"], token_claims["sub"], token_claims["client_id"]) == \
        (oidc.issuer, oidc.audience, sub, client["client_id"]), token_claims
    assert token_claims["exp"] - token_claims["iat"] == oidc.ttl, token_claims
    # Kafka's own listener takes it, for at most the token's lifetime.
    host, port = host_port(kafka_oauth_bootstrap())
    with OAuthConn(host, port) as c:
        c.api_versions()
        r = c.oauth_login(body["access_token"])
    assert r.accepted and 0 < r.session_lifetime_ms <= oidc.ttl * 1000, r.outcome()
    # The issuer is an accepted audience too (RFC 7523 §3).
    status, body = post_assertion(oidc.token_url, sign_assertion(key, claims(aud=oidc.issuer), client["kid"]))
    assert status == 200, (status, body)

    now = int(time.time())
    cases = {
        "replay": good,
        "expired": sign_assertion(key, claims(iat=now - 400, nbf=now - 400, exp=now - 100), client["kid"]),
        "claim aud": sign_assertion(key, claims(aud="http://127.0.0.1:1/token"), client["kid"]),
        "claim sub": sign_assertion(key, claims(sub=client["client_id"] + "-other"), client["kid"]),
        "lifetime": sign_assertion(key, claims(exp=now + 7200), client["kid"]),
        "signature": sign_assertion(other, claims(), client["kid"]),
    }
    for reason, assertion in cases.items():
        before = refused(oidc).get(reason, 0)
        status, body = post_assertion(oidc.token_url, assertion)
        assert (status, body.get("error"), body.get("error_description")) == \
            (400, "invalid_grant", f"assertion refused: {reason}"), (reason, status, body)
        assert refused(oidc).get(reason, 0) == before + 1, reason


# --------------------------------------------------------------------------------------------------
# A node with the registered key


@pytest.fixture
def jwt_bearer_node(launcher, oidc, tmp_path_factory):
    """A node logged in upstream with the JWT-bearer grant, stopped after its test: it fetches a
    token of the client every ~10 s while it runs, which the provider counts for the client, and
    the unregistered-key test below counts exactly that client's tokens (it once saw this node's)."""
    client = jwt_bearer_client(oidc)
    key = write_private(tmp_path_factory.mktemp("jwt-bearer") / "assertion-key.pem", client["private_key_pem"])
    node = start_oauth_portcullis(launcher, oidc, "oauth-jwt-bearer", oauthbearer={}, mechanisms=["SCRAM-SHA-512"],
                                  upstream=oauth_upstream(), sections=login_sections(oidc, client, key))
    yield node, client
    node.process.stop()


def test_jwt_bearer_login_refreshes_and_reauthenticates_for_30s(jwt_bearer_node, oidc, java, tmp_path, unique):
    node, client = jwt_bearer_node
    p = node.process
    kafka_port = host_port(kafka_oauth_bootstrap())[1]
    props = tmp_path / "client.properties"
    props.write_text(
        f"bootstrap.servers={p.bootstrap}\n"
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="carol" password="{PORTCULLIS_USERS["carol"]}";\n'
    )
    topic = unique("oauth-jwt-bearer")
    log_offset = p.log_size()
    issued = jwt_bearer_tokens(oidc, client["client_id"])
    refused_before = refused(oidc)
    with ConnectionTracker(p.proc.pid) as tracker:
        r = java.run("ReauthProducer", "produce", str(props), topic, str(RUN_S), "100", "consume",
                     timeout=RUN_S + 180)
        finished = time.monotonic()
    tokens = jwt_bearer_tokens(oidc, client["client_id"]) - issued
    assert r.stdout.strip(), f"ReauthProducer printed nothing ({r.returncode}):\n{r.stderr[-4000:]}"
    produced = json.loads(r.stdout.strip().splitlines()[-1])
    log = p.log_since(log_offset, 10_000)
    upstream = tracker.connected_to(kafka_port)
    clients = tracker.accepted_on(portcullis_ports(p))
    seen = (f"upstream connections: {describe(upstream)}\nclient connections: {describe(clients)}\n"
            f"JWT-bearer tokens issued to {client['client_id']} during the run: {tokens}\nproducer: {produced}")
    print(seen)

    cm = produced["client_metrics"]
    consumed = produced["consumer"]
    assert produced["ok"] is True and produced["failed"] == 0, f"{seen}\n{r.stderr[-3000:]}"
    assert produced["sent"] >= RUN_S * 100 * 0.8, seen
    assert cm["record-retry-total"] == 0 and cm["record-error-total"] == 0, seen
    assert cm["connection-close-total"] == 0, f"the producer lost a connection: {seen}"
    assert consumed["ok"] is True and consumed["distinct"] == produced["sent"], seen
    assert consumed["client_metrics"]["connection-close-total"] == 0, f"the consumer lost a connection: {seen}"

    # 12 s tokens, refreshed at 80-95 % of their lifetime: at least 2 new ones in 30 s. Each
    # refresh signed a new assertion (the provider refuses a replayed jti) that it accepted.
    assert tokens >= 2, seen
    assert refused(oidc) == refused_before, f"the provider refused assertions of the node: {seen}"
    # Sessions of one token end after 12 s at Kafka: connections that outlive that re-authenticated.
    assert sum(c.lifetime >= RUN_S - 10 for c in upstream) >= 2, seen
    cut = [c for c in upstream if c.lifetime >= oidc.ttl - 1 and c.last_seen < finished - 3]
    assert not cut, f"upstream connections ended during the run: {describe(cut)}\n{seen}"
    assert not WARN_OR_ERROR.findall(log), f"Portcullis logged warnings or errors:\n{log[-4000:]}"
    assert JWT_PREFIX not in log, "Portcullis logged a JWT (an assertion or a token)"
    assert not any(line in log for line in pem_body_lines(client["private_key_pem"])), \
        "Portcullis logged its assertion key"

    v = java.run("ReauthProducer", "verify", str(props), topic, str(produced["sent"]), timeout=180)
    assert v.stdout.strip(), f"verify printed nothing ({v.returncode}):\n{v.stderr[-4000:]}"
    readback = json.loads(v.stdout.strip().splitlines()[-1])
    assert readback["ok"] is True, readback


# --------------------------------------------------------------------------------------------------
# A node whose assertion key is not the registered one


@pytest.fixture(scope="module")
def unregistered_key_start(launcher, oidc, tmp_path_factory):
    """`portcullis serve` with a fresh assertion key (and the registered kid): the result, and what
    the provider saw."""
    client = jwt_bearer_client(oidc)
    key = fresh_rsa_key(tmp_path_factory.mktemp("jwt-bearer-unregistered") / "assertion-key.pem")
    # No users: `scram add` reads the same config.
    p, _ = write_oauth_config(launcher, "oauth-jwt-bearer-unregistered", None, mechanisms=["SCRAM-SHA-512"],
                              upstream=oauth_upstream(), sections=login_sections(oidc, client, key), users=False)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PORTCULLIS_")}
    env["RUST_LOG"] = "debug"  # every line the node would write, for the leak check
    before = jwt_bearer_client(oidc)
    issued = jwt_bearer_tokens(oidc, client["client_id"])
    serve = subprocess.run([str(p.binary), "serve", "--config", str(p.config)], capture_output=True, text=True,
                           timeout=60, env=env, stdin=subprocess.DEVNULL, cwd=p.workdir)
    after = jwt_bearer_client(oidc)
    return {
        "serve": serve,
        "output": serve.stdout + serve.stderr,
        "refused_before": before["refused"],
        "refused_after": after["refused"],
        # The newest refusal: the node's, when the counts grew by exactly one (checked by the test).
        "last_refused_assertion": after["refusals"][-1]["assertion"] if after["refusals"] else "",
        "issued": jwt_bearer_tokens(oidc, client["client_id"]) - issued,
        "key_lines": pem_body_lines(key.read_text()) + pem_body_lines(client["private_key_pem"]),
    }


def test_a_node_with_an_unregistered_assertion_key_does_not_start(unregistered_key_start, oidc):
    s = unregistered_key_start
    serve, output = s["serve"], s["output"]
    assert serve.returncode != 0, "the node started with an assertion key the provider does not know"
    # Its one request was refused for the signature (400 is not retried), and no token was issued.
    grown = {k: n - s["refused_before"].get(k, 0) for k, n in s["refused_after"].items()
             if n != s["refused_before"].get(k, 0)}
    assert grown == {"signature": 1}, grown
    assert s["issued"] == 0, s["issued"]
    # The error names the plugin, the first token, the endpoint and its answer.
    error_lines = [line for line in output.splitlines() if "cannot start the node" in line]
    assert len(error_lines) == 1, output[-3000:]
    assert f"plugin {PLUGIN}: the first upstream OAuth token: the token endpoint {oidc.token_url} answered HTTP 400" \
        in error_lines[0], error_lines[0]
    # Nothing secret on the way: neither the assertion it sent, nor any JWT, nor either key.
    assertion = s["last_refused_assertion"]
    assert assertion.count(".") == 2, "the provider kept no refused assertion"
    assert not any(part in output for part in assertion.split(".")), "the node printed its assertion"
    assert JWT_PREFIX not in output, "the node printed a JWT"
    assert "PRIVATE KEY" not in output and not any(line in output for line in s["key_lines"]), \
        "the node printed a private key"


def test_the_unregistered_key_error_names_invalid_grant(unregistered_key_start, oidc):
    error_lines = [line for line in unregistered_key_start["output"].splitlines() if "cannot start the node" in line]
    assert error_lines and error_lines[0].endswith(f"{oidc.token_url} answered HTTP 400 (invalid_grant)"), \
        error_lines
