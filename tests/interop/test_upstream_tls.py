"""Portcullis' own connections to Kafka over TLS (issue 7 §4): `SSL` with a client certificate
(mutual TLS, Kafka's `ssl.client.auth=required`) and `SASL_SSL` with a SCRAM login, against the
suite's Kafka listeners and the CA scripts/lib/kafka.sh made with openssl for the run.

- Clients produce and consume through a node whose upstream is TLS, and only ever see Portcullis'
  addresses.
- Server names are verified by default: the broker's certificate names IP 127.0.0.1 only, so a
  bootstrap server written as `localhost` is refused (with a log line naming it and the reason)
  unless `verify_server_name = false`.
- Without `ca_file` the system's roots are used (`SSL_CERT_FILE` points them at the test CA here).
- A certificate from another CA, or no client certificate where Kafka requires one, is refused.
"""

from __future__ import annotations

import os
import time

import pytest

from clients import confluent_conf, confluent_consume, confluent_create_topic, confluent_produce
from conftest import PortcullisProcess, _portcullis_gateway, make_tls_files
from reauth_support import start_portcullis

pytestmark = pytest.mark.portcullis_only


def _need(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(f"{name} is not set: the suite's Kafka must come from scripts/lib/kafka.sh (TLS listeners)")
    return value


def _round_trip(gw, unique) -> None:
    user, password = gw.user("alice")
    conf = confluent_conf(gw, "SCRAM-SHA-512", user, password)
    topic = unique("upstream-tls")
    confluent_create_topic(conf, topic, partitions=1)
    sent = confluent_produce(conf, topic, 50)
    got = confluent_consume(conf, topic, f"{topic}-g", len(sent))
    assert got == sent


def _start_failing(launcher, name: str, upstream: dict, env: dict | None = None) -> PortcullisProcess:
    """A node whose upstream cannot be reached: it must not listen; returns it once its log says why."""
    workdir = launcher.run_dir / f"portcullis-{name}"
    workdir.mkdir()
    (workdir / "plugins").mkdir()
    p = PortcullisProcess(launcher.binary, workdir, name)
    p.write_config(upstream=upstream, tls=None, plugin_dir=workdir / "plugins")
    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        p.start(wait=False)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    launcher.processes.append(p)
    deadline = time.monotonic() + 20
    while "cannot reach the upstream cluster" not in p.log_tail(20):
        assert time.monotonic() < deadline, p.log_tail(40)
        assert p.alive(), p.log_tail(40)
        time.sleep(0.2)
    return p


def test_ssl_upstream_with_a_client_certificate(launcher, kafka_env, unique):
    p, _ = start_portcullis(launcher, "upstream-ssl", upstream={
        "bootstrap_servers": [_need("KAFKA_SSL_BOOTSTRAP")], "security_protocol": "SSL"},
        extra_sections={"upstream.tls": {"ca_file": _need("KAFKA_TLS_CA"),
                                         "cert_file": _need("KAFKA_TLS_CLIENT_CERT"),
                                         "key_file": _need("KAFKA_TLS_CLIENT_KEY")}})
    gw = _portcullis_gateway("upstream-ssl", p, kafka_env, "SASL_PLAINTEXT", None)
    _round_trip(gw, unique)


def test_sasl_ssl_upstream_with_scram(launcher, kafka_env, unique):
    p, _ = start_portcullis(launcher, "upstream-sasl-ssl", upstream={
        "bootstrap_servers": [_need("KAFKA_SASL_SSL_BOOTSTRAP")], "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512", "username": kafka_env["KAFKA_ADMIN_USER"],
        "password": kafka_env["KAFKA_ADMIN_PASSWORD"]},
        extra_sections={"upstream.tls": {"ca_file": _need("KAFKA_TLS_CA")}})
    gw = _portcullis_gateway("upstream-sasl-ssl", p, kafka_env, "SASL_PLAINTEXT", None)
    _round_trip(gw, unique)


def test_system_roots_are_used_without_a_ca_file(launcher, kafka_env, unique):
    """No `ca_file`: the trusted roots come from the system store, which SSL_CERT_FILE replaces."""
    saved = os.environ.get("SSL_CERT_FILE")
    os.environ["SSL_CERT_FILE"] = _need("KAFKA_TLS_CA")
    try:
        p, _ = start_portcullis(launcher, "upstream-system-roots", upstream={
            "bootstrap_servers": [_need("KAFKA_SASL_SSL_BOOTSTRAP")], "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512", "username": kafka_env["KAFKA_ADMIN_USER"],
            "password": kafka_env["KAFKA_ADMIN_PASSWORD"]})
    finally:
        if saved is None:
            os.environ.pop("SSL_CERT_FILE", None)
        else:
            os.environ["SSL_CERT_FILE"] = saved
    gw = _portcullis_gateway("upstream-system-roots", p, kafka_env, "SASL_PLAINTEXT", None)
    _round_trip(gw, unique)


def _sasl_ssl_upstream(kafka_env, bootstrap: str) -> dict:
    return {"bootstrap_servers": [bootstrap], "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512", "username": kafka_env["KAFKA_ADMIN_USER"],
            "password": kafka_env["KAFKA_ADMIN_PASSWORD"]}


def test_the_server_name_is_verified_unless_turned_off(launcher, kafka_env, unique, tmp_path):
    """The broker's certificate names IP 127.0.0.1 only: `localhost:<port>` is refused by default,
    accepted with `verify_server_name = false`, and a certificate from another CA never is."""
    port = _need("KAFKA_SASL_SSL_BOOTSTRAP").rsplit(":", 1)[1]
    by_name = _sasl_ssl_upstream(kafka_env, f"localhost:{port}")
    p = _start_failing(launcher, "upstream-wrong-name", by_name, env={"SSL_CERT_FILE": _need("KAFKA_TLS_CA")})
    log = p.log_tail(20)
    assert f"localhost:{port}" in log and "not valid for name" in log, log

    p, _ = start_portcullis(launcher, "upstream-no-name-check", upstream=by_name,
                            extra_sections={"upstream.tls": {"ca_file": _need("KAFKA_TLS_CA"),
                                                             "verify_server_name": False}})
    _round_trip(_portcullis_gateway("upstream-no-name-check", p, kafka_env, "SASL_PLAINTEXT", None), unique)

    other_ca = make_tls_files(tmp_path / "other-ca").ca_cert
    p = _start_failing(launcher, "upstream-other-ca", _sasl_ssl_upstream(kafka_env, _need("KAFKA_SASL_SSL_BOOTSTRAP")),
                       env={"SSL_CERT_FILE": str(other_ca)})
    log = p.log_tail(20)
    assert "invalid peer certificate" in log, log


def test_kafka_refuses_a_node_without_its_client_certificate(launcher, kafka_env):
    """The SSL listener requires a client certificate: without one the node never serves, and says
    which upstream refused it."""
    p = _start_failing(launcher, "upstream-no-client-cert", {
        "bootstrap_servers": [_need("KAFKA_SSL_BOOTSTRAP")], "security_protocol": "SSL"},
        env={"SSL_CERT_FILE": _need("KAFKA_TLS_CA")})
    log = p.log_tail(20)
    assert _need("KAFKA_SSL_BOOTSTRAP") in log, log
