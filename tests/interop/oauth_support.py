"""Shared pieces of the OAUTHBEARER tests (test_oauth*.py).

- `Oidc` / the `oidc` fixture: the OpenID provider scripts/lib/oidc.sh started for the run
  (tests/oidc/provider.mjs, the npm package oidc-provider): its URLs, client-credentials clients,
  and its admin API (mint a token with any claims or forgery, rotate keys, take the JWKS down,
  count JWKS requests per URL).
- `start_oauth_portcullis`: a Portcullis whose listener offers OAUTHBEARER next to SCRAM-SHA-512,
  with an `[oauthbearer]` table (validator "jwks" against the provider by default) and a Prometheus
  admin endpoint. Each node gets a JWKS URL of its own (`…/jwks?node=<name>`): the provider counts
  every URL apart, so a test can count the key-set fetches of exactly one node.
- `OAuthConn`: the raw-wire client (kafka_wire.py) with an OAUTHBEARER login (RFC 7628 initial
  response, SaslAuthenticate v1) that follows Kafka's failure exchange: the server answers a refused
  token with a JSON challenge, the client sends 0x01, the server fails with SASL_AUTHENTICATION_FAILED.
- `KAFKA_OAUTH`: Kafka's own OAUTHBEARER listener (scripts/lib/kafka.sh, OAUTH: KIP-768's
  OAuthBearerValidatorCallbackHandler against the same provider), the reference.
- Client settings for the Java clients (OAuthBearerLoginCallbackHandler), confluent-kafka
  (`sasl.oauthbearer.method=oidc`) and kafkajs (tests/interop/kafkajs/client.js).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import PORTCULLIS_USERS, HERE, Launcher, PortcullisProcess, free_ports, host_port
from kafka_wire import API_SASL_AUTHENTICATE, ERROR_NONE, byte_array
from prometheus import MetricsEndpoint, scrape, total
from reauth_support import ReauthConn

OAUTH_MECHANISMS = ["SCRAM-SHA-512", "OAUTHBEARER"]
INVALID_TOKEN = b'{"status":"invalid_token"}'


# --------------------------------------------------------------------------------------------------
# The provider


@dataclass(frozen=True)
class Client:
    client_id: str
    client_secret: str
    groups: tuple[str, ...]
    alg: str
    format: str


class Oidc:
    """The run's OpenID provider (exported by scripts/test.sh through scripts/lib/oidc.sh)."""

    def __init__(self, env: dict[str, str]):
        self.issuer = env["OIDC_ISSUER"]
        self.jwks_url = env["OIDC_JWKS_URL"]
        self.kafka_jwks_url = env["OIDC_KAFKA_JWKS_URL"]
        self.token_url = env["OIDC_TOKEN_URL"]
        self.introspection_url = env["OIDC_INTROSPECTION_URL"]
        self.discovery_url = env["OIDC_DISCOVERY_URL"]
        self.admin_url = env["OIDC_ADMIN_URL"]
        self.client_id = env["OIDC_CLIENT_ID"]
        self.client_secret = env["OIDC_CLIENT_SECRET"]
        self.audience = env.get("OIDC_AUDIENCE", "kafka")
        self.ttl = int(env.get("OIDC_TOKEN_TTL_SECONDS", "12"))

    @property
    def allowed_prefix(self) -> str:
        """What `allowed_urls` must hold for every URL of this provider."""
        return self.issuer + "/"

    # ---- admin API ------------------------------------------------------------------------------

    def _call(self, method: str, path: str, body: dict | None = None) -> object:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.admin_url + path, data=data, method=method,
                                     headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            raise AssertionError(f"{method} {path}: {e.code} {e.read().decode(errors='replace')}") from e

    def clients(self) -> dict[str, Client]:
        return {c["client_id"]: Client(c["client_id"], c["client_secret"], tuple(c["groups"]), c["alg"], c["format"])
                for c in self._call("GET", "/clients")}

    def client(self, client_id: str | None = None) -> Client:
        return self.clients()[client_id or self.client_id]

    def mint(self, *, claims: dict | None = None, header: dict | None = None, key: str | None = None,
             forge: str | None = None, tampered_claims: dict | None = None) -> str:
        """A JWT signed by the provider's current key (or forged): see tests/oidc/provider.mjs."""
        body: dict = {}
        if claims is not None:
            body["claims"] = claims
        if header is not None:
            body["header"] = header
        if key is not None:
            body["key"] = key
        if forge is not None:
            body["forge"] = forge
        if tampered_claims is not None:
            body["tampered_claims"] = tampered_claims
        return self._call("POST", "/mint", body)["token"]

    def rotate(self, alg: str = "RS256") -> str:
        """A new signing key for `alg`, published; returns its kid."""
        return self._call("POST", "/rotate", {"alg": alg})["kid"]

    def reset(self) -> None:
        """Back to the provider's start keys (and the JWKS up)."""
        self._call("POST", "/reset", {})

    def keys(self) -> list[dict]:
        return self._call("GET", "/keys")

    def down(self) -> None:
        self._call("POST", "/down", {})

    def up(self) -> None:
        self._call("POST", "/up", {})

    def jwks_requests(self) -> dict:
        return self._call("GET", "/jwks-requests")

    def tokens_issued(self, client: Client | None = None) -> int:
        """Access tokens the provider issued to `client` by client credentials."""
        return int(self._call("GET", "/tokens-issued").get((client or self.client()).client_id, 0))

    def jwks_entry(self, url: str) -> dict:
        """The provider's count of requests to the JWKS `url` (its path and query as sent):
        {"ok", "unavailable", "agents": {user agent: count}}."""
        got = self.jwks_requests()["by_url"].get(url_path(url))
        return got or {"ok": 0, "unavailable": 0, "agents": {}}

    def jwks_count(self, url: str) -> tuple[int, int]:
        """(answered, refused with 503) requests to the JWKS `url`."""
        got = self.jwks_entry(url)
        return got["ok"], got["unavailable"]

    # ---- the OAuth endpoints, as a client ---------------------------------------------------------

    def token(self, client: Client | None = None, **params: str) -> str:
        """An access token by client credentials (HTTP basic authentication, like Kafka's client)."""
        c = client or self.client()
        auth = base64.b64encode(f"{c.client_id}:{c.client_secret}".encode()).decode()
        data = urllib.parse.urlencode({"grant_type": "client_credentials", **params}).encode()
        req = urllib.request.Request(self.token_url, data=data, headers={"authorization": f"Basic {auth}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())["access_token"]


def url_path(url: str) -> str:
    """The path and query of `url`, as an HTTP request line carries them."""
    p = urllib.parse.urlsplit(url)
    return p.path + (f"?{p.query}" if p.query else "")


def decode_jwt(token: str) -> tuple[dict, dict]:
    """(header, claims) of a compact JWS, unverified (for the tests' own bookkeeping)."""
    h, p, _ = token.split(".")
    return tuple(json.loads(base64.urlsafe_b64decode(x + "=" * (-len(x) % 4))) for x in (h, p))  # type: ignore


@pytest.fixture(scope="session")
def oidc() -> Oidc:
    names = ["OIDC_ISSUER", "OIDC_JWKS_URL", "OIDC_KAFKA_JWKS_URL", "OIDC_TOKEN_URL", "OIDC_INTROSPECTION_URL",
             "OIDC_DISCOVERY_URL", "OIDC_ADMIN_URL", "OIDC_CLIENT_ID", "OIDC_CLIENT_SECRET"]
    missing = [n for n in names if not os.environ.get(n)]
    if missing:
        raise pytest.UsageError(f"{', '.join(missing)} not set: run the suite through scripts/test.sh, which starts "
                                "the OpenID provider (scripts/lib/oidc.sh)")
    o = Oidc(dict(os.environ))
    o._call("GET", "/health")
    return o


def kafka_oauth_bootstrap() -> str:
    """Kafka's OAUTH listener (scripts/lib/kafka.sh with KAFKA_OAUTH_JWKS_URL)."""
    addr = os.environ.get("KAFKA_OAUTH_BOOTSTRAP")
    if not addr:
        raise pytest.UsageError("KAFKA_OAUTH_BOOTSTRAP is not set: the suite's Kafka must be started by "
                                "scripts/test.sh, which gives it the OAUTH listener when the provider runs")
    return addr


# --------------------------------------------------------------------------------------------------
# A Portcullis with OAUTHBEARER


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"no TOML form for {v!r}")


def default_oauthbearer(oidc: Oidc, node: str, **overrides) -> dict:
    """The issue's example table, pointed at the provider, with a JWKS URL of the node's own."""
    table = {
        "validator": "jwks",
        "jwks_url": f"{oidc.jwks_url}?node={urllib.parse.quote(node)}",
        "expected_issuer": oidc.issuer,
        "expected_audience": [oidc.audience],
        "allowed_urls": [oidc.allowed_prefix],
        "groups_claim_name": "groups",
    }
    for k, v in overrides.items():
        if v is None:
            table.pop(k, None)
        else:
            table[k] = v
    return table


@dataclass
class OAuthNode:
    process: PortcullisProcess
    metrics: MetricsEndpoint
    oauthbearer: dict

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def port(self) -> int:
        return self.process.listener_port

    @property
    def bootstrap(self) -> str:
        return self.process.bootstrap

    @property
    def jwks_url(self) -> str:
        return self.oauthbearer.get("jwks_url", "")


def write_oauth_config(launcher: Launcher, name: str, oauthbearer: dict | None, *,
                       mechanisms: list[str] | None = None,
                       listener: dict | None = None, sections: dict[str, dict] | None = None,
                       upstream: dict | None = None, users: bool = True) -> tuple[PortcullisProcess, MetricsEndpoint]:
    workdir = launcher.run_dir / f"portcullis-{name}"
    workdir.mkdir(parents=True, exist_ok=False)
    plugin_dir = workdir / "plugins"
    plugin_dir.mkdir()
    (admin_port,) = free_ports(1)
    metrics = MetricsEndpoint(f"127.0.0.1:{admin_port}")
    if upstream is None:
        upstream = {"bootstrap_servers": [launcher.kafka["KAFKA_BOOTSTRAP"]], "security_protocol": "PLAINTEXT"}
    p = PortcullisProcess(launcher.binary, workdir, name)
    p.write_config(upstream=upstream, tls=None, plugin_dir=plugin_dir)
    lines = p.config.read_text().splitlines()
    mech_lines = [i for i, line in enumerate(lines) if line.startswith("sasl_mechanisms = ")]
    if len(mech_lines) != 1 or lines.count("[listener]") != 1:
        raise RuntimeError(f"unexpected config layout in {p.config}")
    lines[mech_lines[0]] = f"sasl_mechanisms = {toml_value(mechanisms or OAUTH_MECHANISMS)}"
    at = lines.index("[listener]") + 1
    lines[at:at] = [f"{k} = {toml_value(v)}" for k, v in (listener or {}).items()]
    text = "\n".join(lines) + "\n"
    all_sections = {**({"oauthbearer": oauthbearer} if oauthbearer is not None else {}), **(sections or {})}
    all_sections["telemetry"] = {"prometheus_address": metrics.address, **all_sections.get("telemetry", {})}
    for section, keys in all_sections.items():
        text += f"\n[{section}]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in keys.items())
    p.config.write_text(text)
    p.config.chmod(0o600)  # it may hold a client secret
    for user, password in (PORTCULLIS_USERS.items() if users else ()):
        p.scram_add(user, password, "SCRAM-SHA-512")
    return p, metrics


def start_oauth_portcullis(launcher: Launcher, oidc: Oidc, name: str, *, oauthbearer: dict | None = None,
                           **kwargs) -> OAuthNode:
    """A Portcullis offering SCRAM-SHA-512 and OAUTHBEARER (upstream Kafka PLAINTEXT unless
    `upstream` says otherwise), with `oauthbearer` (default: `default_oauthbearer`; `{}`: no
    `[oauthbearer]` table) as its table and a Prometheus endpoint; stopped with the session's other
    nodes."""
    table = oauthbearer if oauthbearer is not None else default_oauthbearer(oidc, name)
    p, metrics = write_oauth_config(launcher, name, table or None, **kwargs)
    p.start()
    launcher.processes.append(p)
    return OAuthNode(p, metrics, table)


def run_portcullis_expecting_refusal(launcher: Launcher, name: str, oauthbearer: dict,
                                     timeout: float = 60) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    """`portcullis check-config` and `portcullis serve` on a config that must be refused at start:
    returns both results (the serve is killed, and the test fails, if it is still running after
    `timeout` seconds)."""
    # No users: `scram add` reads (and would refuse) the same config.
    p, _ = write_oauth_config(launcher, name, oauthbearer, users=False)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PORTCULLIS_")}
    check = subprocess.run([str(p.binary), "check-config", "--config", str(p.config)], capture_output=True,
                           text=True, timeout=timeout, env=env)
    serve = subprocess.run([str(p.binary), "serve", "--config", str(p.config)], capture_output=True, text=True,
                           timeout=timeout, env=env, stdin=subprocess.DEVNULL, cwd=p.workdir)
    return check, serve


def jwks_fetch_metric(node: OAuthNode) -> dict[tuple[str, str], float]:
    """Portcullis' own count of key-set fetches, by (trigger, outcome), from its /metrics."""
    out: dict[tuple[str, str], float] = {}
    for name, labels, value in scrape(node.metrics):
        if name.startswith("portcullis_oauthbearer_jwks_fetches"):
            k = (labels.get("trigger", ""), labels.get("outcome", ""))
            out[k] = out.get(k, 0) + value
    return out


def metric_total(node: OAuthNode, series: str, **labels: str) -> float:
    return total(scrape(node.metrics), series, **labels)


# --------------------------------------------------------------------------------------------------
# The raw OAUTHBEARER client


@dataclass
class Login:
    """What the server answered to one OAUTHBEARER login."""

    accepted: bool
    error: int  # of the last SaslAuthenticate response
    message: str | None
    challenge: bytes | None  # the JSON the server sent before failing (None: it sent none)
    session_lifetime_ms: int = 0
    handshake_error: int = 0
    closed: bool = False  # the connection was closed where a response was due
    metadata: bool | None = None  # after an accepted login: whether a Metadata request was answered

    def outcome(self) -> str:
        """A short string to compare between Kafka and Portcullis."""
        if self.accepted:
            return "accepted" if self.metadata is not False else "accepted, then closed at the first request"
        if self.handshake_error:
            return f"handshake error {self.handshake_error}"
        c = self.challenge.decode(errors="replace") if self.challenge is not None else None
        return f"refused challenge={c} error={self.error} message={self.message}" + (" closed" if self.closed else "")


def initial_response(token: str, *, authzid: str | None = None, extensions: dict[str, str] | None = None) -> bytes:
    """RFC 7628 client initial response as Kafka's client sends it."""
    gs2 = f"n,{'a=' + authzid if authzid else ''},"
    ext = "".join(f"{k}={v}\x01" for k, v in (extensions or {}).items())
    return f"{gs2}\x01auth=Bearer {token}\x01{ext}\x01".encode()


class OAuthConn(ReauthConn):
    def authenticate_v1(self, auth_bytes: bytes) -> tuple[int, str | None, bytes, int]:
        r = self.call(API_SASL_AUTHENTICATE, 1, byte_array(auth_bytes))
        error = r.int16()
        message = r.string()
        data = r.bytes_() or b""
        lifetime = r.int64()
        return error, message, data, lifetime

    def oauth_login(self, token: str, *, authzid: str | None = None, extensions: dict[str, str] | None = None,
                    handshake: bool = True) -> Login:
        """SaslHandshake v1 (OAUTHBEARER), then SaslAuthenticate v1; on a challenge, 0x01 and the
        final answer. Never raises for a refusal: the caller compares the Login."""
        from kafka_wire import Closed  # noqa: PLC0415

        if handshake:
            error, mechanisms = self.sasl_handshake("OAUTHBEARER")
            if error != ERROR_NONE:
                return Login(False, error, None, None, handshake_error=error)
        try:
            error, message, data, lifetime = self.authenticate_v1(initial_response(token, authzid=authzid,
                                                                                   extensions=extensions))
        except Closed:
            return Login(False, -1, None, None, closed=True)
        if error != ERROR_NONE:
            return Login(False, error, message, None)
        if not data:
            return Login(True, error, message, None, session_lifetime_ms=lifetime)
        challenge = data
        try:
            error, message, data, lifetime = self.authenticate_v1(b"\x01")
        except Closed:
            return Login(False, -1, None, challenge, closed=True)
        return Login(error == ERROR_NONE and not data, error, message, challenge, session_lifetime_ms=lifetime)


def login(host: str, port: int, token: str, **kwargs) -> Login:
    """One OAUTHBEARER login on a fresh connection (ApiVersions first, as clients do); after an
    accepted login, one Metadata request (a session of lifetime 0, e.g. a token past `exp` but within
    the clock skew, is closed there without an answer, as Kafka does)."""
    from kafka_wire import Closed  # noqa: PLC0415

    with OAuthConn(host, port, timeout=15) as c:
        c.api_versions()
        result = c.oauth_login(token, **kwargs)
        if result.accepted:
            try:
                result.metadata = len(c.metadata_v1()) == 1
            except Closed:
                result.metadata = False
    return result


@dataclass(frozen=True)
class Endpoint:
    """Where the wire tests log in: Kafka's OAUTH listener or a Portcullis node."""

    name: str
    host: str
    port: int
    node: OAuthNode | None = None


# --------------------------------------------------------------------------------------------------
# Client settings


def java_oauth_properties(path: Path, bootstrap: str, oidc: Oidc, client: Client | None = None,
                          extra: dict[str, str] | None = None) -> Path:
    """client.properties for Kafka's Java clients: OAUTHBEARER with OAuthBearerLoginCallbackHandler
    (client credentials against the provider's token endpoint; client id and secret in the JAAS line)."""
    c = client or oidc.client()
    lines = [
        f"bootstrap.servers={bootstrap}",
        "security.protocol=SASL_PLAINTEXT",
        "sasl.mechanism=OAUTHBEARER",
        "sasl.login.callback.handler.class=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
        f"sasl.oauthbearer.token.endpoint.url={oidc.token_url}",
        "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        f'clientId="{c.client_id}" clientSecret="{c.client_secret}";',
    ]
    lines += [f"{k}={v}" for k, v in (extra or {}).items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def java_oauth_run(java, oidc: Oidc, main: str, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """Runs a program of tests/interop/java through OAuthRun (the token URL on Kafka's allow-list)."""
    return java.run("OAuthRun", oidc.token_url, main, *args, timeout=timeout)


def confluent_oauth_conf(bootstrap: str, oidc: Oidc, client: Client | None = None, **extra) -> dict:
    """confluent-kafka (librdkafka 2.16) with its built-in OIDC client-credentials token fetcher."""
    c = client or oidc.client()
    conf = {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.client.id": c.client_id,
        "sasl.oauthbearer.client.secret": c.client_secret,
        "sasl.oauthbearer.token.endpoint.url": oidc.token_url,
        "log_level": 3,
    }
    conf.update(extra)
    return conf


KAFKAJS_DIR = HERE / "kafkajs"


def run_kafkajs(oidc: Oidc, args: dict, timeout: float = 180) -> dict:
    """tests/interop/kafkajs/client.js with the pinned kafkajs (KAFKAJS_NODE_PATH, installed by
    scripts/lib/oidc.sh); returns its JSON summary."""
    node_path = os.environ.get("KAFKAJS_NODE_PATH")
    if not node_path:
        raise pytest.UsageError("KAFKAJS_NODE_PATH is not set: scripts/test.sh installs kafkajs "
                                "(scripts/lib/oidc.sh ensure_kafkajs)")
    env = {**os.environ, "NODE_PATH": node_path}
    r = subprocess.run(["node", str(KAFKAJS_DIR / "client.js"), json.dumps(args)], capture_output=True, text=True,
                       timeout=timeout, env=env)
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    assert lines, f"kafkajs client printed no summary ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    summary = json.loads(lines[-1])
    summary["_returncode"] = r.returncode
    summary["_stderr"] = r.stderr[-3000:]
    return summary


# --------------------------------------------------------------------------------------------------
# Waiting for a condition (bounded; the condition is what the test asserts, not a retry of it)


def wait_until(predicate, timeout: float, what: str, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"{what}: not within {timeout}s (last: {last!r})")


def endpoint_of(node: OAuthNode) -> Endpoint:
    return Endpoint(node.process.name, node.host, node.port, node)


def kafka_endpoint() -> Endpoint:
    host, port = host_port(kafka_oauth_bootstrap())
    return Endpoint("kafka", host, port)


__all__ = [
    "INVALID_TOKEN", "OAUTH_MECHANISMS", "Client", "Endpoint", "Login", "OAuthConn", "OAuthNode", "Oidc",
    "confluent_oauth_conf", "decode_jwt", "default_oauthbearer", "endpoint_of", "initial_response",
    "java_oauth_properties", "java_oauth_run", "jwks_fetch_metric", "kafka_endpoint", "kafka_oauth_bootstrap",
    "login", "metric_total", "oidc", "run_kafkajs", "run_portcullis_expecting_refusal", "start_oauth_portcullis",
    "url_path", "wait_until",
]
