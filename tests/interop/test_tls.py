"""SASL_SSL: clients verify Portcullis' certificate (a throwaway CA) and authenticate over TLS."""

import pytest

from clients import (confluent_conf, confluent_consume, confluent_create_topic, confluent_expect_auth_failure,
                     confluent_produce)
from conftest import make_tls_files
from kafka_wire import API_API_VERSIONS, Closed, Conn, request

pytestmark = pytest.mark.portcullis_only


def test_confluent_over_tls_scram_sha512_produce_consume(gateway_tls, unique):
    conf = confluent_conf(gateway_tls, "SCRAM-SHA-512", *gateway_tls.user("alice"))
    topic = unique("tls")
    confluent_create_topic(conf, topic)
    sent = confluent_produce(conf, topic, 500)
    assert confluent_consume(conf, topic, unique("tls-group"), len(sent)) == sent


def test_kafka_python_over_tls_plain_produce_consume(gateway_tls, unique):
    from test_kafka_python import produce_consume  # noqa: PLC0415

    produce_consume(gateway_tls, "PLAIN", unique("tls-kp"), unique("tls-kp-group"), n=200)


def test_wrong_password_over_tls_is_refused(gateway_tls):
    user, password = gateway_tls.user("alice")
    confluent_expect_auth_failure(confluent_conf(gateway_tls, "SCRAM-SHA-256", user, password + "-wrong"))


def test_plaintext_kafka_request_to_the_tls_listener_gets_no_kafka_response(gateway_tls):
    """The TLS listener speaks TLS only: a plaintext ApiVersions must not be answered as Kafka."""
    with Conn(gateway_tls.host, gateway_tls.port) as c:
        c.send_raw(request(API_API_VERSIONS, 0, 7, b""))
        try:
            got = c.wait_closed(timeout=5)
        except TimeoutError as e:
            got = str(e).encode()
        except Closed:
            got = b""
    # A Kafka response would be a 4-byte size then correlation id 7.
    assert got[4:8] != b"\x00\x00\x00\x07", got[:32]


def test_client_trusting_another_ca_refuses_the_certificate(gateway_tls, run_dir):
    """The control for the tests above: with a CA that did not sign Portcullis' certificate the TLS
    handshake fails, so the successes above really verified the certificate."""
    from confluent_kafka import KafkaError  # noqa: PLC0415
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415

    other = make_tls_files(run_dir / "tls-other-ca")
    conf = confluent_conf(gateway_tls, "SCRAM-SHA-512", *gateway_tls.user("alice"))
    conf["ssl.ca.location"] = str(other.ca_cert)
    errors = []
    conf["error_cb"] = errors.append
    admin = AdminClient(conf)
    try:
        admin.list_topics(timeout=5)
        connected = True
    except Exception:  # noqa: BLE001 - any failure to get metadata is the expected outcome
        connected = False
    admin.poll(1)  # error_cb runs from poll()
    del admin
    assert not connected
    assert any(e.code() == KafkaError._SSL or "certificate" in e.str().lower() for e in errors), \
        [e.str() for e in errors]
