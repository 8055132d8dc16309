"""The delegation-token differential: the same ≥ 25 token operations and misuse cases, with Kafka's
Java Admin client (tests/differential/java/TokenDifferential.java), against Kafka itself (configured
with `delegation.token.secret.key`) and through Portcullis: every step must give the same error code,
and the timestamps must agree within clock tolerance."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import target
from test_acl_tools import differential_classes, java_classpath, log4j_args
from test_delegation_tokens import PORTCULLIS_TOKEN_USERS, kafka_users, start_token_node

# Time between the Java client reading its clock and the server reading its own, on a loaded
# 2-core machine, plus the difference between the two servers' handling: generous, but far below
# every period the sequence uses (1 s, 1 min, 1 day).
TOLERANCE_MS = 3_000


def run_sequence(kafka_env, bootstrap: str, users: dict[str, str], workdir: Path) -> list[dict]:
    props = workdir / "users.properties"
    props.write_text("".join(f"{u}={pw}\n" for u, pw in users.items()))
    r = subprocess.run(["java", "-Xmx256m", "-XX:+UseSerialGC", *log4j_args(), "-cp",
                        java_classpath(kafka_env, differential_classes()), "TokenDifferential", bootstrap,
                        str(props)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"TokenDifferential failed ({r.returncode}) against {bootstrap}:\n{r.stdout}\n{r.stderr[-4000:]}"
    return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def kafka_run(kafka_env, tmp_path_factory) -> list[dict]:
    return run_sequence(kafka_env, kafka_env["KAFKA_SASL_BOOTSTRAP"], kafka_users(), tmp_path_factory.mktemp("tk"))


def test_kafka_answers_the_token_sequence_as_kip48_says(kafka_run):
    """The reference run itself: enough steps, and the anchors of Kafka's rules (so a wrong sequence
    cannot make both sides agree on nothing)."""
    steps = {s["step"]: s for s in kafka_run}
    assert len(steps) >= 25, len(steps)
    day, week = 86_400_000, 7 * 86_400_000
    assert (steps["create-self-default"]["expiry_rel"], steps["create-self-default"]["max_rel"]) == (day, week)
    assert steps["create-short-max-life"]["max_rel"] == 2_000
    assert steps["create-max-life-capped"]["max_rel"] == week
    assert steps["create-group-renewer"]["outcome"] == "INVALID_PRINCIPAL_TYPE"
    assert steps["create-for-other-without-acl"]["outcome"] == "DELEGATION_TOKEN_AUTHORIZATION_FAILED"
    assert steps["create-for-other-with-acl"]["requester"] == "User:bob"
    assert steps["renew-by-stranger"]["outcome"] == "DELEGATION_TOKEN_OWNER_MISMATCH"
    assert steps["renew-after-expiry"]["outcome"] == "DELEGATION_TOKEN_EXPIRED"
    assert steps["expire-negative-removes-expired"]["outcome"] == "NONE"
    assert steps["token-session-creates"]["outcome"] == "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED"
    assert steps["renew-removed"]["outcome"] == "DELEGATION_TOKEN_NOT_FOUND"
    assert steps["describe-empty-owner-list"]["visible"] == []
    assert abs(steps["renew-capped-at-expiry-time"]["expiry_rel"] - day) <= TOLERANCE_MS
    for capped in ("renew-capped-at-max", "expire-capped-at-max"):
        assert steps[capped].get("expiry") == "max", steps[capped]
    assert abs(steps["expire-extends-to-period"]["expiry_rel"] - 3 * day) <= TOLERANCE_MS


@pytest.mark.portcullis_only
def test_portcullis_answers_every_step_as_kafka_does(kafka_env, kafka_run, run_dir, tmp_path):
    if target() != "portcullis":
        raise RuntimeError("portcullis_only test with INTEROP_TARGET=kafka")
    # Kafka's sweep interval (1 h), so expired tokens stay until removed, as on the broker.
    node = start_token_node(run_dir, "token-differential", check_interval_ms=3_600_000)
    try:
        ours = run_sequence(kafka_env, node.bootstrap, PORTCULLIS_TOKEN_USERS, tmp_path)
    finally:
        node.stop()
    assert [s["step"] for s in ours] == [s["step"] for s in kafka_run]
    differences = []
    for k, p in zip(kafka_run, ours):
        for field in sorted(set(k) | set(p)):
            a, b = k.get(field), p.get(field)
            if field.endswith("_rel") and isinstance(a, int) and isinstance(b, int):
                if abs(a - b) > TOLERANCE_MS:
                    differences.append((k["step"], field, a, b))
            elif a != b:
                differences.append((k["step"], field, a, b))
    assert not differences, "steps where Portcullis differs from Kafka (step, field, kafka, portcullis):\n" + \
        "\n".join(map(str, differences))
