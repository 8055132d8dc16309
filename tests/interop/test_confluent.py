"""confluent-kafka 2.16 (librdkafka 2.16, SaslAuthenticate v1) through the gateway."""

import pytest

from clients import (confluent_conf, confluent_consume, confluent_create_topic, confluent_expect_auth_failure,
                     confluent_produce)


def test_confluent_scram_sha256_produce_consume(gateway, unique):
    user, password = gateway.user("alice")
    conf = confluent_conf(gateway, "SCRAM-SHA-256", user, password)
    topic = unique("ck-256")
    confluent_create_topic(conf, topic)
    sent = confluent_produce(conf, topic, 2000)
    got = confluent_consume(conf, topic, unique("ck-group"), len(sent))
    assert got == sent


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
@pytest.mark.parametrize("who", ["wrong-password", "unknown-user"])
def test_confluent_bad_credentials_are_refused(gateway, mechanism, who):
    user, password = gateway.user("alice")
    if who == "wrong-password":
        password = password + "-wrong"
    else:
        user = "mallory"
    errors = confluent_expect_auth_failure(confluent_conf(gateway, mechanism, user, password))
    assert any("authentication" in e.str().lower() for e in errors)
