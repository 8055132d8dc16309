"""Kafka's own ACL tooling against Portcullis' ACL APIs (CreateAcls/DescribeAcls/DeleteAcls):
`kafka-acls` (org.apache.kafka.tools.AclCommand from the kafka-tools jar) and the Java AdminClient.

Every test runs against Kafka's SASL listener too (the `kafka` parameter): the expected rows below are
checked against Kafka itself, and Portcullis must print exactly the same rows.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import PortcullisProcess, target
from test_differential import RUN_SH, start_portcullis_with_authorizer

ADMIN_PASSWORDS = {"portcullis": "admin-through-portcullis"}


@pytest.fixture(scope="module")
def portcullis_acl_node(run_dir) -> PortcullisProcess:
    p = start_portcullis_with_authorizer(run_dir, name="acl-tools")
    yield p
    p.stop()


@pytest.fixture(params=["kafka", pytest.param("portcullis", marks=pytest.mark.portcullis_only)])
def endpoint(request, kafka_env, tmp_path) -> tuple[str, Path]:
    """(name, client properties for the admin) of Kafka's SASL listener or of Portcullis."""
    if request.param == "kafka":
        bootstrap, password = kafka_env["KAFKA_SASL_BOOTSTRAP"], kafka_env["KAFKA_ADMIN_PASSWORD"]
    else:
        if target() != "portcullis":
            raise RuntimeError("portcullis endpoint with INTEROP_TARGET=kafka")
        node = request.getfixturevalue("portcullis_acl_node")
        bootstrap, password = node.bootstrap, ADMIN_PASSWORDS["portcullis"]
    props = tmp_path / f"admin-{request.param}.properties"
    props.write_text(
        f"bootstrap.servers={bootstrap}\n"
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="admin" password="{password}";\n'
    )
    return request.param, props


def java_classpath(kafka_env, extra: str | None = None) -> str:
    cp = f"{kafka_env['KAFKA_LIB']}/*"
    return f"{extra}:{cp}" if extra else cp


def log4j_args() -> list[str]:
    return [f"-Dlog4j2.configurationFile={RUN_SH.parent / 'log4j2.properties'}"]


def differential_classes() -> str:
    return subprocess.run([str(RUN_SH), "--classes"], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ), check=True).stdout.strip()


def kafka_acls(kafka_env, props: Path, commands: list[tuple[str, list[str]]]) -> dict[str, str]:
    """Runs kafka-acls (AclCommand.main) once per command against the endpoint of `props`, in order, in
    one JVM (tests/differential/java/AclTool.java); returns each command's stdout by label and fails
    if any command exits non-zero."""
    bootstrap = next(line.split("=", 1)[1] for line in props.read_text().splitlines()
                     if line.startswith("bootstrap.servers="))
    common = ["--bootstrap-server", bootstrap, "--command-config", str(props)]
    stdin = "".join(json.dumps(common + args) + "\n" for _, args in commands)
    cmd = ["java", "-Xmx256m", "-XX:+UseSerialGC", *log4j_args(), "-cp",
           java_classpath(kafka_env, differential_classes()), "AclTool"]
    r = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"AclTool failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    results = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert len(results) == len(commands), r.stdout + r.stderr
    out = {}
    for (label, args), res in zip(commands, results):
        assert res["rc"] == 0, f"kafka-acls {' '.join(args)} failed ({res['rc']}):\n{res['out']}\n{res['err']}"
        out[label] = res["out"]
    return out


RESOURCE = re.compile(r"^(Current ACLs|Adding ACLs) for resource `(ResourcePattern\(.*\))`:\s*$")
ENTRY = re.compile(r"^\s*(\(principal=.*\))\s*$")


def acl_rows(output: str) -> set[tuple[str, str]]:
    """(resource pattern, entry) rows of kafka-acls' output. Every non-blank line must be a resource
    header or an entry under one: an unexpected line fails the parse. The rows within a resource and
    the resources come in hash order, so they are compared as a set."""
    rows: set[tuple[str, str]] = set()
    current = None
    for line in output.splitlines():
        if not line.strip() or line.startswith("ACLs for principal `"):
            continue
        if m := RESOURCE.match(line):
            current = m.group(2)
        elif (m := ENTRY.match(line)) and current is not None:
            rows.add((current, m.group(1)))
        else:
            raise AssertionError(f"unexpected kafka-acls line {line!r} in:\n{output}")
    return rows


def topic(name: str, pattern: str) -> str:
    return f"ResourcePattern(resourceType=TOPIC, name={name}, patternType={pattern})"


def entry(principal: str, host: str, operation: str, permission: str) -> str:
    return f"(principal={principal}, host={host}, operation={operation}, permissionType={permission})"


USER_ALICE = "ResourcePattern(resourceType=USER, name=User:alice, patternType=LITERAL)"


def test_kafka_acls_adds_lists_and_removes(kafka_env, endpoint, unique):
    name, props = endpoint
    prefix = unique("acltool") + "-"
    who = f"User:{unique('tool-user')}"
    prefixed = ["--topic", prefix, "--resource-pattern-type", "prefixed"]
    match_orders = ["--topic", prefix + "orders", "--resource-pattern-type", "match"]
    out = kafka_acls(kafka_env, props, [
        # Start clean for the USER resource, which is shared by name (User:alice).
        ("clean", ["--remove", "--force", "--user-principal", "User:alice"]),
        ("add-prefixed", ["--add", "--allow-principal", who, "--operation", "Read", "--operation", "Describe",
                          *prefixed]),
        ("add-deny", ["--add", "--deny-principal", "User:carol", "--deny-host", "127.0.0.1", "--operation", "Write",
                      *prefixed]),
        ("add-literal", ["--add", "--allow-principal", who, "--operation", "Write", "--topic", prefix + "orders"]),
        ("add-user", ["--add", "--allow-principal", who, "--operation", "CreateTokens", "--operation",
                      "DescribeTokens", "--user-principal", "User:alice"]),
        ("list-prefixed", ["--list", *prefixed]),
        ("list-user", ["--list", "--user-principal", "User:alice"]),
        ("list-match", ["--list", *match_orders]),
        ("list-principal", ["--list", "--principal", who]),
        # Remove one entry, then whole resources.
        ("remove-read", ["--remove", "--force", "--allow-principal", who, "--operation", "Read", *prefixed]),
        ("list-prefixed-2", ["--list", *prefixed]),
        ("remove-create-tokens", ["--remove", "--force", "--user-principal", "User:alice", "--operation",
                                  "CreateTokens", "--allow-principal", who]),
        ("list-user-2", ["--list", "--user-principal", "User:alice"]),
        ("remove-prefixed", ["--remove", "--force", *prefixed]),
        ("remove-literal", ["--remove", "--force", "--topic", prefix + "orders"]),
        ("remove-user", ["--remove", "--force", "--user-principal", "User:alice"]),
        ("list-match-3", ["--list", *match_orders]),
        ("list-principal-3", ["--list", "--principal", who]),
    ])

    prefixed_rows = {
        (topic(prefix, "PREFIXED"), entry(who, "*", "READ", "ALLOW")),
        (topic(prefix, "PREFIXED"), entry(who, "*", "DESCRIBE", "ALLOW")),
        (topic(prefix, "PREFIXED"), entry("User:carol", "127.0.0.1", "WRITE", "DENY")),
    }
    literal_rows = {(topic(prefix + "orders", "LITERAL"), entry(who, "*", "WRITE", "ALLOW"))}
    user_rows = {
        (USER_ALICE, entry(who, "*", "CREATE_TOKENS", "ALLOW")),
        (USER_ALICE, entry(who, "*", "DESCRIBE_TOKENS", "ALLOW")),
    }
    expected = {
        "add-prefixed": {r for r in prefixed_rows if "User:carol" not in r[1]},
        "add-deny": {r for r in prefixed_rows if "User:carol" in r[1]},
        "add-literal": literal_rows,
        "add-user": user_rows,
        "list-prefixed": prefixed_rows,
        "list-user": user_rows,
        # MATCH: every ACL that applies to the topic <prefix>orders (the prefixed ones and its literal one).
        "list-match": prefixed_rows | literal_rows,
        "list-principal": {r for r in prefixed_rows if "User:carol" not in r[1]} | literal_rows | user_rows,
        "remove-read": set(),
        "list-prefixed-2": {r for r in prefixed_rows if "READ" not in r[1]},
        "remove-create-tokens": set(),
        "list-user-2": {(USER_ALICE, entry(who, "*", "DESCRIBE_TOKENS", "ALLOW"))},
        "remove-prefixed": set(),
        "remove-literal": set(),
        "remove-user": set(),
        "list-match-3": set(),
        "list-principal-3": set(),
    }
    got = {label: acl_rows(out[label]) for label in expected}
    wrong = {label: (expected[label], got[label]) for label in expected if got[label] != expected[label]}
    assert not wrong, f"[{name}] kafka-acls rows differ:\n" + "\n".join(
        f"{label}:\n  want {sorted(w)}\n  got  {sorted(g)}\n  output: {out[label]!r}" for label, (w, g) in wrong.items())


def test_admin_client_creates_describes_with_filters_and_deletes(kafka_env, endpoint, unique):
    name, props = endpoint
    classes = differential_classes()
    prefix = unique("acladmin") + "-"
    who = f"User:{unique('admin-user')}"
    r = subprocess.run(["java", "-Xmx256m", "-XX:+UseSerialGC", *log4j_args(), "-cp",
                        java_classpath(kafka_env, classes), "AclAdmin", str(props), prefix, who,
                        *(["eventual"] if name == "kafka" else [])],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, f"[{name}] AclAdmin failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    steps = {s["step"]: s["acls"] for s in map(json.loads, r.stdout.splitlines())}

    read_prefixed = f"ALLOW {who} * READ TOPIC PREFIXED {prefix}"
    deny_secret = f"DENY {who} 127.0.0.1 ALL TOPIC LITERAL {prefix}secret"
    create_tokens = f"ALLOW {who} * CREATE_TOKENS USER LITERAL User:alice"
    describe_tokens = f"ALLOW {who} * DESCRIBE_TOKENS USER LITERAL User:alice"
    txn = f"ALLOW {who} * WRITE TRANSACTIONAL_ID LITERAL {prefix}tx"
    group = f"ALLOW {who} * READ GROUP PREFIXED {prefix}group"
    everything = sorted([read_prefixed, deny_secret, create_tokens, describe_tokens, txn, group])

    expected = {
        "by-principal": everything,
        "user-resource": sorted([create_tokens, describe_tokens]),
        "topic-prefixed": [read_prefixed],
        "topic-match": sorted([read_prefixed, deny_secret]),
        "deny-only": [deny_secret],
        "deleted": sorted([create_tokens, describe_tokens, deny_secret]),
        "after-delete": sorted([read_prefixed, txn, group]),
        "deleted-rest": sorted([read_prefixed, txn, group]),
        "empty": [],
    }
    assert steps == expected, f"[{name}]\n{r.stdout}"
