"""kcat (librdkafka, SaslAuthenticate v0) through the gateway: broker address rewriting, produce and
consume, refusal of bad credentials."""

import re

import pytest


def sasl_args(gateway, mechanism, user, password):
    args = ["-b", gateway.bootstrap, "-X", f"security.protocol={gateway.security_protocol}",
            "-X", f"sasl.mechanism={mechanism}", "-X", f"sasl.username={user}", "-X", f"sasl.password={password}"]
    if gateway.ca_file is not None:
        args += ["-X", f"ssl.ca.location={gateway.ca_file}"]
    return args


BROKER_LINE = re.compile(r"broker (\d+) at ([^\s]+)")


@pytest.mark.parametrize("mechanism,modern", [("PLAIN", False), ("SCRAM-SHA-512", True), ("SCRAM-SHA-256", True)])
def test_kcat_metadata_shows_rewritten_broker_addresses(kcat, gateway, mechanism, modern):
    user, password = gateway.user("alice")
    r = kcat.run(["-L", "-m", "15", *sasl_args(gateway, mechanism, user, password)], modern=modern)
    assert r.returncode == 0, r.stderr
    brokers = {int(n): addr for n, addr in BROKER_LINE.findall(r.stdout)}
    assert brokers == gateway.broker_addresses, r.stdout
    for port in gateway.hidden_ports:
        assert f":{port}" not in r.stdout, f"Kafka's own port {port} leaked to the client:\n{r.stdout}"


def test_kcat_scram_sha512_produce_consume(kcat, gateway, unique):
    """The quickstart's path: kcat over SASL_PLAINTEXT SCRAM-SHA-512."""
    user, password = gateway.user("alice")
    topic = unique("kcat")
    lines = [f"key{i}:value-{i}-{'z' * i}" for i in range(50)]
    args = sasl_args(gateway, "SCRAM-SHA-512", user, password)
    p = kcat.run(["-P", "-t", topic, "-K:", "-X", "topic.acks=all", *args], modern=True, input="\n".join(lines) + "\n")
    assert p.returncode == 0, p.stderr
    c = kcat.run(["-C", "-t", topic, "-o", "beginning", "-e", "-c", str(len(lines)), "-f", "%k:%s\\n", *args],
                 modern=True)
    assert c.returncode == 0, c.stderr
    assert sorted(c.stdout.splitlines()) == sorted(lines)


@pytest.mark.parametrize("mechanism,modern", [("PLAIN", False), ("SCRAM-SHA-512", True)])
@pytest.mark.parametrize("who", ["wrong-password", "unknown-user"])
def test_kcat_bad_credentials_exit_non_zero(kcat, gateway, mechanism, modern, who):
    user, password = gateway.user("alice")
    if who == "wrong-password":
        password = password + "-wrong"
    else:
        user = "mallory"
    r = kcat.run(["-L", "-m", "3", *sasl_args(gateway, mechanism, user, password)], modern=modern)
    assert r.returncode != 0, r.stdout
    assert "Authentication failed" in r.stderr or "SASL authentication error" in r.stderr, r.stderr


@pytest.mark.portcullis_only
def test_old_librdkafka_scram_gets_the_same_answer_as_from_kafka(kcat, gateway, kafka_env):
    """Debian's kcat links librdkafka 2.0.2, whose SCRAM client-final repeats the client nonce;
    Kafka 4.x checks the nonce strictly (RFC 5802) and refuses it. Portcullis must answer exactly as
    Kafka does, whichever librdkafka is installed."""
    def outcome(bootstrap, user, password):
        args = ["-L", "-m", "5", "-b", bootstrap, "-X", "security.protocol=SASL_PLAINTEXT",
                "-X", "sasl.mechanism=SCRAM-SHA-512", "-X", f"sasl.username={user}", "-X", f"sasl.password={password}"]
        r = kcat.run(args, modern=False)
        return r.returncode == 0

    direct = outcome(kafka_env["KAFKA_SASL_BOOTSTRAP"], kafka_env["KAFKA_SASL_USER"], kafka_env["KAFKA_SASL_PASSWORD"])
    through = outcome(gateway.bootstrap, *gateway.user("alice"))
    assert through == direct, (
        f"system librdkafka {kcat.librdkafka_version(False)}: Kafka {'accepts' if direct else 'refuses'} its SCRAM, "
        f"Portcullis {'accepts' if through else 'refuses'} it"
    )


@pytest.mark.portcullis_only
def test_user_known_only_to_portcullis_works_and_kafka_passwords_do_not(kcat, gateway, kafka_env):
    """Portcullis authenticates clients itself: carol exists only in Portcullis' store, and Kafka's own
    password for alice is not alice's Portcullis password."""
    ok = kcat.run(["-L", "-m", "10", *sasl_args(gateway, "SCRAM-SHA-512", *gateway.user("carol"))], modern=True)
    assert ok.returncode == 0, ok.stderr
    kafka_pw = kcat.run(["-L", "-m", "5", *sasl_args(gateway, "SCRAM-SHA-512", kafka_env["KAFKA_SASL_USER"],
                                                     kafka_env["KAFKA_SASL_PASSWORD"])], modern=True)
    assert kafka_env["KAFKA_SASL_PASSWORD"] != gateway.users.get(kafka_env["KAFKA_SASL_USER"])
    assert kafka_pw.returncode != 0, kafka_pw.stdout
