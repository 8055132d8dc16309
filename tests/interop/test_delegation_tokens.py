"""Delegation tokens (KIP-48, KIP-373) through Portcullis, with Kafka's own tools and real clients.

- Kafka's `kafka-delegation-tokens` (DelegationTokenCommand) and `kafka-acls` (AclCommand) run the
  KIP-373 commands against Portcullis *and* against the suite's Kafka (configured with
  `delegation.token.secret.key`): every step must have the same outcome on both.
- The Java producer and consumer authenticate with a token (SCRAM-SHA-512, tokenauth=true) through
  Portcullis; expiring the token closes their idle connections within a second and new logins fail.
- With `accept_token_without_extension`, confluent-kafka and kcat (librdkafka, which cannot send
  `tokenauth`) log in with a token id and its HMAC and produce and consume.
- A token survives a restart of Portcullis; a token that expired while it was down is gone.
- A token secret in a configuration file other users can read is refused.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import threading
import time
from pathlib import Path

import pytest

from clients import confluent_expect_auth_failure
from conftest import PortcullisProcess, _need, target
from reauth_support import established_connections

REPO = Path(__file__).resolve().parents[2]
LOG4J = REPO / "tests" / "differential" / "log4j2.properties"
TOKEN_COMMAND = "org.apache.kafka.tools.DelegationTokenCommand"
ACL_COMMAND = "org.apache.kafka.tools.AclCommand"

# Portcullis' users; the same names as Kafka's (scripts/lib/kafka.sh), other passwords.
PORTCULLIS_TOKEN_USERS = {
    "admin": "admin-through-portcullis",
    "alice": "alice-through-portcullis",
    "bob": "bob-through-portcullis",
    "carol": "carol-through-portcullis",
    "dave": "dave-through-portcullis",
}
TOKEN_SECRET = "portcullis-test-token-secret"  # test-only, loopback node for one run


def kafka_users() -> dict[str, str]:
    users = {_need("KAFKA_ADMIN_USER"): _need("KAFKA_ADMIN_PASSWORD"),
             _need("KAFKA_SASL_USER"): _need("KAFKA_SASL_PASSWORD")}
    for pair in _need("KAFKA_ACL_USERS").split():
        user, _, password = pair.partition(":")
        users[user] = password
    return users


def start_token_node(run_dir: Path, name: str, *, accept_without_extension: bool = False,
                     check_interval_ms: int = 500) -> PortcullisProcess:
    """A Portcullis with tokens enabled (secret in the config file, which is made private), the
    `acl` authorizer (super users admin and alice, like the suite's Kafka) and PORTCULLIS_TOKEN_USERS."""
    binary = Path(_need("PORTCULLIS_BIN"))
    workdir = run_dir / f"portcullis-{name}"
    workdir.mkdir(parents=True, exist_ok=False)
    plugins = workdir / "plugins"
    plugins.mkdir()
    p = PortcullisProcess(binary, workdir, name)
    p.write_config(upstream={"bootstrap_servers": [_need("KAFKA_BOOTSTRAP")], "security_protocol": "PLAINTEXT"},
                   tls=None, plugin_dir=plugins)
    p.config.write_text(p.config.read_text() + token_sections(accept_without_extension, check_interval_ms))
    os.chmod(p.config, stat.S_IRUSR | stat.S_IWUSR)
    for user, password in PORTCULLIS_TOKEN_USERS.items():
        p.scram_add(user, password, "SCRAM-SHA-512")
        p.scram_add(user, password, "SCRAM-SHA-256")
    p.start()
    return p


def token_sections(accept_without_extension: bool, check_interval_ms: int) -> str:
    return (
        "\n[authorizer]\n"
        'plugin = "acl"\n'
        'super_users = ["User:admin", "User:alice"]\n'
        "\n[delegation_tokens]\n"
        f'secret = "{TOKEN_SECRET}"\n'
        f"expiry_check_interval_ms = {check_interval_ms}\n"
        f"accept_token_without_extension = {'true' if accept_without_extension else 'false'}\n"
    )


@pytest.fixture(scope="module")
def token_node(run_dir) -> PortcullisProcess:
    p = start_token_node(run_dir, "tokens")
    yield p
    p.stop()


@pytest.fixture(scope="module")
def untagged_token_node(run_dir) -> PortcullisProcess:
    p = start_token_node(run_dir, "tokens-untagged", accept_without_extension=True)
    yield p
    p.stop()


# --------------------------------------------------------------------------------------------------
# Running Kafka's tools


def properties(path: Path, user: str, password: str, *, token: bool = False) -> Path:
    extra = ' tokenauth="true"' if token else ""
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{password}"{extra};\n'
    )
    return path


class Tools:
    """Runs Kafka's tools (ToolRunner: many commands, one JVM) against one endpoint as its users."""

    def __init__(self, java, bootstrap: str, users: dict[str, str], workdir: Path):
        self.java = java
        self.bootstrap = bootstrap
        self.props = {u: properties(workdir / f"{u}.properties", u, pw) for u, pw in users.items()}

    def run(self, commands: list[tuple[str, str, str, list[str]]]) -> dict[str, dict]:
        """`commands`: (label, tool class, user, arguments); returns each result by label."""
        lines = []
        for _, tool, user, args in commands:
            lines.append(json.dumps([tool, "--bootstrap-server", self.bootstrap,
                                     "--command-config", str(self.props[user]), *args]))
        r = subprocess.run(
            ["java", "-Xmx256m", "-XX:+UseSerialGC", f"-Dlog4j2.configurationFile={LOG4J}", "-cp",
             f"{self.java.classes}:{self.java.kafka_lib}/*", "ToolRunner"],
            input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"ToolRunner failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
        results = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
        assert len(results) == len(commands), r.stdout + r.stderr
        return {label: res for (label, *_), res in zip(commands, results)}


TOKEN_ROW = re.compile(r"^(\S{22})\s+(\S+)\s+(\S+)\s+(\S+)\s+(\[.*?\])\s+\S+\s+\S+\s+\S+\s*$")


def token_rows(output: str) -> list[dict]:
    """The rows DelegationTokenCommand prints for create and describe."""
    rows = []
    for line in output.splitlines():
        m = TOKEN_ROW.match(line)
        if m:
            rows.append({"id": m.group(1), "hmac": m.group(2), "owner": m.group(3), "requester": m.group(4),
                         "renewers": m.group(5)})
    return rows


def outcome(result: dict) -> str:
    """A tool result as a comparable outcome: 'ok' or the Kafka exception it reported."""
    if result["rc"] == 0 and "Error" not in result["err"] and "exception" not in result["out"].lower():
        return "ok"
    text = result["out"] + result["err"]
    m = re.search(r"([A-Za-z]+Exception)", text)
    return f"error {m.group(1) if m else 'rc=' + str(result['rc'])}"


# --------------------------------------------------------------------------------------------------
# KIP-373 with Kafka's own tools, on Kafka and on Portcullis


@pytest.fixture(params=["kafka", pytest.param("portcullis", marks=pytest.mark.portcullis_only)])
def token_endpoint(request, kafka_env, java, tmp_path):
    if request.param == "kafka":
        return "kafka", Tools(java, kafka_env["KAFKA_SASL_BOOTSTRAP"], kafka_users(), tmp_path)
    if target() != "portcullis":
        raise RuntimeError("portcullis endpoint with INTEROP_TARGET=kafka")
    node = request.getfixturevalue("token_node")
    return "portcullis", Tools(java, node.bootstrap, PORTCULLIS_TOKEN_USERS, tmp_path)


def test_kip373_commands_give_the_same_outcomes_as_kafka(token_endpoint):
    name, tools = token_endpoint
    # The KIP's command; Kafka 4.4's tool wants the option's full name `--max-life-time-period`
    # (it refuses the KIP's `--max-life-time` as unrecognized), and its expire option is
    # `--expiry-time-period` (`--expire-time-period` is unrecognized too).
    create_for_carol = ["--create", "-owner-principal", "User:carol", "--renewer-principal", "User:alice",
                        "--max-life-time-period", "1486750745585"]
    grant = lambda user_principal: [  # noqa: E731 - the KIP's kafka-acls command
        "--add", "--allow-principal", "User:bob", "--allow-host", "*", "--operation", "CreateTokens",
        "--user-principal", user_principal]
    cleanup = ["--remove", "--force", "--user-principal", "User:carol"]
    steps = tools.run([
        ("clean", ACL_COMMAND, "admin", cleanup),
        ("bob-creates-for-carol", TOKEN_COMMAND, "bob", create_for_carol),
        # The KIP's literal form names the owner without its type: that grant is on the resource
        # `carol`, which is not `User:carol`, so it does not let bob create for carol.
        ("grant-kip-literal", ACL_COMMAND, "admin", grant("carol")),
        ("bob-creates-for-carol-2", TOKEN_COMMAND, "bob", create_for_carol),
        ("grant", ACL_COMMAND, "admin", grant("User:carol")),
        ("bob-creates-for-carol-3", TOKEN_COMMAND, "bob", create_for_carol),
        ("carol-creates-her-own", TOKEN_COMMAND, "carol", ["--create", "--max-life-time-period", "-1"]),
    ])
    got = {label: outcome(r) for label, r in steps.items()}
    assert got["grant-kip-literal"] == "ok" and got["grant"] == "ok", steps
    assert got["bob-creates-for-carol"] == "error DelegationTokenAuthorizationException", steps
    assert got["bob-creates-for-carol-2"] == "error DelegationTokenAuthorizationException", steps
    assert got["bob-creates-for-carol-3"] == "ok", steps
    created = token_rows(steps["bob-creates-for-carol-3"]["out"])
    assert len(created) == 1, steps["bob-creates-for-carol-3"]
    token = created[0]
    assert (token["owner"], token["requester"], token["renewers"]) == ("User:carol", "User:bob", "[User:alice]")
    own = token_rows(steps["carol-creates-her-own"]["out"])[0]
    assert (own["owner"], own["requester"]) == ("User:carol", "User:carol")

    hmac = token["hmac"]
    later = tools.run([
        ("describe-bob", TOKEN_COMMAND, "bob", ["--describe", "--owner-principal", "User:carol"]),
        # Kafka 4.4's tool sends an empty owner list without --owner-principal: nothing is listed.
        ("describe-bob-no-owner", TOKEN_COMMAND, "bob", ["--describe"]),
        ("describe-dave", TOKEN_COMMAND, "dave", ["--describe", "--owner-principal", "User:carol"]),
        ("describe-carol", TOKEN_COMMAND, "carol", ["--describe", "--owner-principal", "User:carol"]),
        ("grant-describe", ACL_COMMAND, "admin", ["--add", "--allow-principal", "User:dave", "--operation",
                                                  "DescribeTokens", "--user-principal", "User:carol"]),
        ("describe-dave-2", TOKEN_COMMAND, "dave", ["--describe", "--owner-principal", "User:carol"]),
        ("renew-dave", TOKEN_COMMAND, "dave", ["--renew", "--renew-time-period", "-1", "--hmac", hmac]),
        ("renew-alice", TOKEN_COMMAND, "alice", ["--renew", "--renew-time-period", "-1", "--hmac", hmac]),
        ("expire-bob", TOKEN_COMMAND, "bob", ["--expire", "--expiry-time-period", "-1", "--hmac", hmac]),
        ("expire-carol", TOKEN_COMMAND, "carol", ["--expire", "--expiry-time-period", "-1", "--hmac", hmac]),
    ])
    if name == "kafka":
        # Kafka's broker answers Describe from a cache that follows the controller's log
        # asynchronously, so a removal shows there a moment after the expire was answered.
        # Portcullis applies the removal before it answers: no wait.
        wait_until_gone(tools, "carol", token["id"])
    later.update(tools.run([
        ("describe-carol-2", TOKEN_COMMAND, "carol", ["--describe", "--owner-principal", "User:carol"]),
        ("renew-gone", TOKEN_COMMAND, "carol", ["--renew", "--renew-time-period", "-1", "--hmac", hmac]),
        ("expire-own", TOKEN_COMMAND, "carol", ["--expire", "--expiry-time-period", "-1", "--hmac", own["hmac"]]),
        ("clean-2", ACL_COMMAND, "admin", cleanup),
        ("clean-3", ACL_COMMAND, "admin", ["--remove", "--force", "--user-principal", "carol"]),
    ]))
    # Only this test's tokens count (the broker is shared with other tests and earlier runs).
    mine = {token["id"], own["id"]}
    ids = lambda label: sorted(r["id"] for r in token_rows(later[label]["out"]) if r["id"] in mine)  # noqa: E731
    want = {
        "describe-bob": [token["id"]],            # the requester
        "describe-bob-no-owner": [],              # the empty owner list
        "describe-dave": [],                      # a stranger
        "describe-carol": sorted([token["id"], own["id"]]),
        "describe-dave-2": sorted([token["id"], own["id"]]),  # DescribeTokens on User:carol
        "describe-carol-2": [own["id"]],
    }
    got_ids = {label: ids(label) for label in want}
    assert got_ids == want, f"[{name}] describe rows differ: {json.dumps(later, indent=1)[:6000]}"
    outcomes = {label: outcome(later[label]) for label in later if not label.startswith("describe")}
    assert outcomes == {
        "grant-describe": "ok",
        "renew-dave": "error DelegationTokenOwnerMismatchException",
        "renew-alice": "ok",
        "expire-bob": "error DelegationTokenOwnerMismatchException",
        "expire-carol": "ok",
        "renew-gone": "error DelegationTokenNotFoundException",
        "expire-own": "ok",
        "clean-2": "ok",
        "clean-3": "ok",
    }, f"[{name}] {json.dumps(later, indent=1)[:6000]}"


def wait_until_gone(tools: Tools, owner: str, token_id: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = tools.run([("d", TOKEN_COMMAND, owner, ["--describe", "--owner-principal", f"User:{owner}"])])["d"]
        if token_id not in {row["id"] for row in token_rows(r["out"])}:
            return
        time.sleep(0.5)
    raise AssertionError(f"token {token_id} still listed {timeout}s after it was expired")


def token_apis(bootstrap: str) -> dict[int, tuple[int, int]]:
    """ApiVersions v0 (before authentication): the token APIs' version ranges."""
    import socket
    import struct

    from kafka_wire import request

    host, _, port = bootstrap.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(request(18, 0, 1, b""))
        size = struct.unpack(">i", s.recv(4))[0]
        data = b""
        while len(data) < size:
            data += s.recv(size - len(data))
    pos = 6
    (count,) = struct.unpack(">i", data[pos:pos + 4])
    pos += 4
    out = {}
    for _ in range(count):
        key, lo, hi = struct.unpack(">hhh", data[pos:pos + 6])
        pos += 6
        if 38 <= key <= 41:
            out[key] = (lo, hi)
    return out


@pytest.mark.portcullis_only
def test_token_apis_are_advertised_as_kafka_advertises_them(kafka_env, token_node, launcher):
    """Kafka 4.4 advertises the four token APIs whether or not tokens are enabled (a broker without
    a secret answers DELEGATION_TOKEN_AUTH_DISABLED); Portcullis advertises the same versions."""
    kafka = token_apis(kafka_env["KAFKA_SASL_BOOTSTRAP"])
    assert kafka == {38: (1, 3), 39: (1, 2), 40: (1, 2), 41: (1, 3)}
    assert token_apis(token_node.bootstrap) == kafka
    # A node without [delegation_tokens] advertises them too.
    plain = launcher.start("tokens-disabled")
    assert token_apis(plain.bootstrap) == kafka


# --------------------------------------------------------------------------------------------------
# The Java clients with a token, and what expiring it does to them


def create_token(tools: Tools, user: str, *extra: str) -> dict:
    r = tools.run([("create", TOKEN_COMMAND, user, ["--create", "--max-life-time-period", "-1", *extra])])["create"]
    assert outcome(r) == "ok", r
    return token_rows(r["out"])[0]


@pytest.mark.portcullis_only
def test_java_clients_authenticate_with_a_token_and_are_closed_within_a_second_of_its_expiry(
        token_node, java, tmp_path, unique):
    tools = Tools(java, token_node.bootstrap, PORTCULLIS_TOKEN_USERS, tmp_path)
    token = create_token(tools, "alice")
    topic = unique("token-java")
    proc = subprocess.Popen(
        ["java", "-Xmx256m", f"-Dlog4j2.configurationFile={LOG4J}", "-cp", f"{java.classes}:{java.kafka_lib}/*",
         "TokenSessions", token_node.bootstrap, token["id"], token["hmac"], topic, "200"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = json.loads(read_line(proc, 180))
        assert ready == {"phase": "ready", "produced": 200, "consumed": 200, "mismatches": 0}, ready
        ports = {token_node.listener_port, token_node.broker_port_base + 1}
        before = [c for c in established_connections(proc.pid) if c[1][1] in ports]
        assert before, "the Java clients hold no connection to Portcullis"
        # Idle: the clients send nothing while the token is expired by its owner.
        r = tools.run([("expire", TOKEN_COMMAND, "alice",
                        ["--expire", "--expiry-time-period", "-1", "--hmac", token["hmac"]])])["expire"]
        acknowledged = time.monotonic()
        assert outcome(r) == "ok", r
        remaining = before
        while time.monotonic() - acknowledged < 1.0:
            remaining = [c for c in established_connections(proc.pid) if c[1][1] in ports]
            if not remaining:
                break
            time.sleep(0.02)
        assert not remaining, f"still connected 1 s after the token expired: {remaining}"
        proc.stdin.write("check\n")
        proc.stdin.flush()
        check = json.loads(read_line(proc, 120))
        assert check["login"] == "failed", check
        assert "Authentication" in check["error"], check
    finally:
        proc.kill()
        proc.wait(timeout=30)


def read_line(proc: subprocess.Popen, timeout: float) -> str:
    """The next stdout line that is JSON, or a failure with the process' stderr."""
    result: list[str] = []

    def reader():
        for line in proc.stdout:
            if line.startswith("{"):
                result.append(line)
                return

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    t.join(timeout)
    if not result:
        proc.kill()
        raise AssertionError(f"no answer from the Java client within {timeout}s:\n{proc.stderr.read()[-4000:]}")
    return result[0]


# --------------------------------------------------------------------------------------------------
# librdkafka: tokens without the tokenauth extension (opt-in)


@pytest.mark.portcullis_only
def test_confluent_and_kcat_log_in_with_a_token_when_the_extension_is_not_needed(
        untagged_token_node, token_node, java, kcat, tmp_path, unique):
    from confluent_kafka import Producer

    tools = Tools(java, untagged_token_node.bootstrap, PORTCULLIS_TOKEN_USERS, tmp_path)
    token = create_token(tools, "alice")
    topic = unique("token-rdkafka")
    conf = {"bootstrap.servers": untagged_token_node.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": token["id"], "sasl.password": token["hmac"]}
    producer = Producer(conf)
    for i in range(20):
        producer.produce(topic, key=f"k{i}", value=f"v{i}")
    assert producer.flush(60) == 0
    # kcat reads them back with the same token (SCRAM-SHA-512 this time).
    r = kcat.run(["-b", untagged_token_node.bootstrap, "-X", "security.protocol=SASL_PLAINTEXT",
                  "-X", "sasl.mechanisms=SCRAM-SHA-512", "-X", f"sasl.username={token['id']}",
                  "-X", f"sasl.password={token['hmac']}", "-C", "-t", topic, "-o", "beginning", "-e", "-q",
                  "-f", "%k=%s\\n"], modern=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split()) == sorted(f"k{i}=v{i}" for i in range(20)), r.stdout

    # On a node that keeps Kafka's rule, the same kind of login is an unknown user.
    (tmp_path / "strict").mkdir()
    other = create_token(Tools(java, token_node.bootstrap, PORTCULLIS_TOKEN_USERS, tmp_path / "strict"), "alice")
    confluent_expect_auth_failure({**conf, "bootstrap.servers": token_node.bootstrap,
                                   "sasl.username": other["id"], "sasl.password": other["hmac"]})


# --------------------------------------------------------------------------------------------------
# Restarts and configuration


@pytest.mark.portcullis_only
def test_a_token_survives_a_restart_and_one_that_expired_meanwhile_is_gone(run_dir, java, tmp_path, unique):
    from confluent_kafka import Producer

    node = start_token_node(run_dir, "tokens-restart", accept_without_extension=True)
    try:
        tools = Tools(java, node.bootstrap, PORTCULLIS_TOKEN_USERS, tmp_path)
        lasting = create_token(tools, "alice")
        short = tools.run([("short", TOKEN_COMMAND, "alice", ["--create", "--max-life-time-period", "3000"])])["short"]
        short = token_rows(short["out"])[0]
        node.stop()
        time.sleep(4)  # the short token expires while the node is down
        node.stopping = False
        node.start()
        conf = {"bootstrap.servers": node.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": lasting["id"], "sasl.password": lasting["hmac"]}
        producer = Producer(conf)
        producer.produce(unique("token-restart"), value=b"after restart")
        assert producer.flush(60) == 0, "the token stopped working across the restart"
        described = tools.run([("d", TOKEN_COMMAND, "alice", ["--describe", "--owner-principal", "User:alice"])])["d"]
        listed = {r["id"] for r in token_rows(described["out"])}
        assert lasting["id"] in listed and short["id"] not in listed, described
    finally:
        node.stop()


@pytest.mark.portcullis_only
def test_a_token_secret_in_a_world_readable_file_is_refused(run_dir):
    binary = Path(_need("PORTCULLIS_BIN"))
    workdir = run_dir / "portcullis-tokens-perms"
    workdir.mkdir()
    p = PortcullisProcess(binary, workdir, "tokens-perms")
    p.write_config(upstream={"bootstrap_servers": [_need("KAFKA_BOOTSTRAP")]}, tls=None, plugin_dir=workdir)
    p.config.write_text(p.config.read_text() + token_sections(False, 1000))
    os.chmod(p.config, 0o644)
    r = subprocess.run([str(binary), "check-config", "--config", str(p.config)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1 and "chmod 600" in r.stderr, r.stderr
    assert TOKEN_SECRET not in r.stdout + r.stderr
    os.chmod(p.config, 0o600)
    r = subprocess.run([str(binary), "check-config", "--config", str(p.config)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and "tokens:      enabled" in r.stdout, r.stdout + r.stderr
    assert TOKEN_SECRET not in r.stdout + r.stderr
