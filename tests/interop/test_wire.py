"""Pre-authentication rules at the wire level, with hand-made frames on a raw socket.

Each test runs against Kafka's own SASL_PLAINTEXT listener too: Kafka is the reference, so a test
that Kafka fails is a wrong test, and a test only Portcullis fails is a Portcullis bug.
"""

import struct

import pytest

from conftest import ENABLED_MECHANISMS, host_port
from kafka_wire import (API_API_VERSIONS, API_METADATA, API_SASL_HANDSHAKE, ERROR_NONE,
                        ERROR_UNSUPPORTED_SASL_MECHANISM, Closed, Conn, plain_token, request)

MAX_PRE_AUTH_FRAME = 512 * 1024  # sasl.server.max.receive.size


@pytest.fixture(params=["kafka", pytest.param("portcullis", marks=pytest.mark.portcullis_only)])
def endpoint(request, kafka_env):
    """(host, port, user, password, expected broker addresses) of the listener under test."""
    if request.param == "kafka":
        host, port = host_port(kafka_env["KAFKA_SASL_BOOTSTRAP"])
        return (host, port, kafka_env["KAFKA_SASL_USER"], kafka_env["KAFKA_SASL_PASSWORD"],
                {1: kafka_env["KAFKA_SASL_BOOTSTRAP"]})
    gw = request.getfixturevalue("gateway")
    return (gw.host, gw.port, *gw.user("alice"), gw.broker_addresses)


def metadata_v1_body():
    return struct.pack(">i", -1)  # all topics


@pytest.mark.parametrize("after_api_versions", [False, True])
def test_metadata_before_authentication_closes_without_response(endpoint, after_api_versions):
    host, port, *_ = endpoint
    with Conn(host, port) as c:
        if after_api_versions:
            assert API_SASL_HANDSHAKE in c.api_versions()
        c.send_raw(request(API_METADATA, 1, 99, metadata_v1_body()))
        assert c.wait_closed(timeout=5) == b"", "a response was sent to an unauthenticated Metadata request"


@pytest.mark.parametrize("size", [MAX_PRE_AUTH_FRAME + 1, 64 * 1024 * 1024])
def test_oversized_frame_before_authentication_closes(endpoint, size):
    """The size prefix alone must get the connection closed: a server that waited for the body (or
    allocated it) would leave the connection open."""
    host, port, *_ = endpoint
    with Conn(host, port) as c:
        header = struct.pack(">hhi", API_API_VERSIONS, 0, 1) + struct.pack(">h", 4) + b"evil"
        c.send_raw(struct.pack(">i", size) + header + b"\0" * 64)
        assert c.wait_closed(timeout=5) == b""


def test_sasl_handshake_as_the_very_first_request(endpoint):
    """kafka-python 2.x and kafkajs send SaslHandshake without ApiVersions first."""
    host, port, user, password, brokers = endpoint
    with Conn(host, port) as c:
        error, mechanisms = c.sasl_handshake("PLAIN")
        assert error == ERROR_NONE
        assert "PLAIN" in mechanisms
        error, message, _ = c.sasl_authenticate(plain_token(user, password))
        assert error == ERROR_NONE, message
        got = {b.node_id: f"{b.host}:{b.port}" for b in c.metadata_v1()}
        assert got == brokers


def test_unsupported_mechanism_gets_error_33_with_the_enabled_list(endpoint):
    host, port, *_ = endpoint
    with Conn(host, port) as c:
        c.api_versions()
        error, mechanisms = c.sasl_handshake("FOO")
        assert error == ERROR_UNSUPPORTED_SASL_MECHANISM
        assert sorted(mechanisms) == sorted(ENABLED_MECHANISMS)
        # Then the server fails the authentication: the connection closes.
        assert c.wait_closed(timeout=5) == b""


def test_metadata_v0_with_huge_topic_count_after_auth_does_not_crash(endpoint):
    """Metadata v0 body `7f ff ff ff` claims 2^31-1 topics in a 4-byte body: a parser that trusts the
    count allocates gigabytes (kafka-protocol's Vec::with_capacity). The connection may be answered or
    closed, but the server must survive and serve the next connection."""
    host, port, user, password, brokers = endpoint
    with Conn(host, port) as c:
        c.api_versions()
        c.authenticate_plain(user, password)
        c.send_raw(request(API_METADATA, 0, 4242, b"\x7f\xff\xff\xff"))
        try:
            c.wait_closed(timeout=10)
        except TimeoutError:
            pass  # left open after an error response is acceptable too
        except Closed:
            pass
    with Conn(host, port) as c:
        c.api_versions()
        c.authenticate_plain(user, password)
        assert {b.node_id: f"{b.host}:{b.port}" for b in c.metadata_v1()} == brokers
