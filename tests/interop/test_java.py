"""The Java clients (kafka-clients 4.4, Kafka's own) through the gateway with SCRAM-SHA-512."""

import json

import pytest


def client_props(tmp_path, gateway, user, password, mechanism="SCRAM-SHA-512"):
    module = {
        "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
        "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
        "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    }[mechanism]
    lines = [
        f"bootstrap.servers={gateway.bootstrap}",
        f"security.protocol={gateway.security_protocol}",
        f"sasl.mechanism={mechanism}",
        f'sasl.jaas.config={module} required username="{user}" password="{password}";',
    ]
    if gateway.ca_file is not None:
        lines += ["ssl.truststore.type=PEM", f"ssl.truststore.location={gateway.ca_file}"]
    path = tmp_path / "client.properties"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("group_protocol", ["classic", "consumer"])
def test_java_round_trip_10000_records_with_committed_offsets(java, gateway, tmp_path, unique, group_protocol):
    """10,000 keyed records out and back exactly, with a consumer group that commits; the committed
    offsets are read back with Admin.listConsumerGroupOffsets (FindCoordinator + OffsetFetch through
    the gateway's rewritten coordinator address). `consumer` is the KIP-848 group protocol."""
    user, password = gateway.user("alice")
    props = client_props(tmp_path, gateway, user, password)
    r = java.run("RoundTrip", "roundtrip", str(props), unique("java-rt"), "10000", unique("java-group"),
                 group_protocol)
    summary_line = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    assert r.returncode == 0, f"RoundTrip failed ({r.returncode}):\n{r.stdout}\n{r.stderr[-4000:]}"
    summary = json.loads(summary_line)
    assert summary["ok"] is True
    assert summary["consumed_distinct"] == 10000
    assert summary["committed_total"] == 10000
    assert summary["bad_values"] == 0 and summary["duplicates"] == 0


@pytest.mark.parametrize("who", ["wrong-password", "unknown-user"])
def test_java_bad_credentials_raise_sasl_authentication_exception(java, gateway, tmp_path, who):
    user, password = gateway.user("alice")
    if who == "wrong-password":
        password = password + "-wrong"
    else:
        user = "mallory"
    props = client_props(tmp_path, gateway, user, password)
    r = java.run("RoundTrip", "expect-auth-failure", str(props), timeout=120)
    assert r.returncode == 0, f"expected SaslAuthenticationException:\n{r.stdout}\n{r.stderr[-4000:]}"
    assert "SaslAuthenticationException" in r.stdout
