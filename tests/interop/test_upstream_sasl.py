"""Portcullis' own upstream connections authenticate to Kafka's SASL listener (SCRAM-SHA-512 as the
Kafka admin user), while clients authenticate to Portcullis with Portcullis' users."""

import pytest

from clients import confluent_conf, confluent_consume, confluent_create_topic, confluent_produce

pytestmark = pytest.mark.portcullis_only


def test_produce_consume_through_an_authenticated_upstream(gateway_upstream_sasl, kcat, unique):
    g = gateway_upstream_sasl
    conf = confluent_conf(g, "SCRAM-SHA-512", *g.user("carol"))
    topic = unique("up-sasl")
    confluent_create_topic(conf, topic)
    sent = confluent_produce(conf, topic, 300)
    assert confluent_consume(conf, topic, unique("up-sasl-group"), len(sent)) == sent
    # Clients still see Portcullis' addresses, never Kafka's SASL listener.
    r = kcat.run(["-L", "-m", "10", "-b", g.bootstrap, "-X", "security.protocol=SASL_PLAINTEXT",
                  "-X", "sasl.mechanism=PLAIN", "-X", "sasl.username=carol",
                  "-X", f"sasl.password={g.users['carol']}"])
    assert r.returncode == 0, r.stderr
    assert f"broker 1 at {g.broker_addresses[1]}" in r.stdout
    for port in g.hidden_ports:
        assert f":{port}" not in r.stdout
