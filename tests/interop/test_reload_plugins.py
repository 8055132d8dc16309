"""Plugins and live reconfiguration (issue 23): a library dropped into the plugin directory after
start is loaded by a reload and its mechanism serves new logins; a plugin whose init panics
refuses the reload only; a library whose content changed is loaded again for new connections
while the connections on the old one carry on; event subscribers and the forwarding policy are
chosen anew by a reload.

The plugins are the examples the suite builds (examples/custom-mechanism: PORTCULLIS-DEMO, a
token per user; examples/panicking-plugin: X-PANIC, which panics in init with `panic_in =
"create"`; examples/auth-log and examples/topic-guard). Each test runs a node of its own
(reload_support.ReloadNode).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from kafka import KafkaProducer
from kafka.errors import KafkaTimeoutError

import test_plugin_mechanism as demo  # registers PORTCULLIS-DEMO's client side with kafka-python
from clients import CaptureErrors, confluent_conf
from conftest import ENABLED_MECHANISMS, make_tls_files
from kafka_wire import ERROR_UNSUPPORTED_SASL_MECHANISM, Conn
from reload_support import ReloadNode, Settings, replace_file, served_serial, server_cert, wait_for
from test_reload import metadata_ok

pytestmark = pytest.mark.portcullis_only

DEMO = "PORTCULLIS-DEMO"


def demo_library() -> Path:
    return demo.built_library("portcullis-example-custom-mechanism", "portcullis_example_custom_mechanism")


def panicking_library() -> Path:
    return demo.built_library("portcullis-example-panicking-plugin", "portcullis_example_panicking_plugin")


def drop_in(source: Path, target: Path, extra: bytes = b"") -> None:
    """Puts a library into the plugin directory in one rename (never overwritten in place: the
    old file may be mapped), with `extra` bytes after it to make its content differ."""
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_bytes(source.read_bytes() + extra)
    os.replace(tmp, target)


def demo_settings(tokens: dict[str, str]) -> Settings:
    table = ", ".join(f"{u} = {json.dumps(t)}" for u, t in tokens.items())
    return Settings(mechanisms=ENABLED_MECHANISMS + [DEMO], tail=f"\n[plugins.config.{DEMO}]\ntokens = {{ {table} }}\n")


def demo_producer(node: ReloadNode, user: str, token: str, **extra) -> KafkaProducer:
    return KafkaProducer(bootstrap_servers=node.process.bootstrap, security_protocol="SASL_PLAINTEXT",
                         sasl_mechanism=DEMO, sasl_plain_username=user, sasl_plain_password=token,
                         request_timeout_ms=20000, **extra)


def demo_login_refused(node: ReloadNode, user: str, token: str) -> bool:
    with CaptureErrors() as captured:
        producer = demo_producer(node, user, token, max_block_ms=4000)
        try:
            with pytest.raises(KafkaTimeoutError):
                producer.send("never-created", b"x").get(timeout=10)
        finally:
            producer.close(timeout=2)
    return any("Invalid username or token" in m for m in captured.messages)


def offered(node: ReloadNode, mechanism: str) -> bool:
    with Conn("127.0.0.1", node.process.listener_port) as c:
        error, _ = c.sasl_handshake(mechanism)
    return error != ERROR_UNSUPPORTED_SASL_MECHANISM


def test_a_mechanism_plugin_dropped_in_after_start_serves_new_logins_after_a_reload(launcher, unique):
    node = ReloadNode(launcher, unique("reload-plugin-new"), Settings())
    plugins = node.process.workdir / "plugins"
    assert not offered(node, DEMO)

    drop_in(demo_library(), plugins / "libdemo.so")
    node.write(demo_settings({"alice": "token-a"}))
    r = node.reload()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "libdemo.so (loaded)" in r.stdout and "listener.sasl_mechanisms" in r.stdout, r.stdout
    assert f"plugins.config.{DEMO}.tokens" in r.stdout and "token-a" not in r.stdout, r.stdout

    assert offered(node, DEMO)
    topic = unique("reload-plugin")
    producer = demo_producer(node, "alice", "token-a")
    for i in range(10):
        producer.send(topic, key=str(i).encode(), value=b"v").get(timeout=30)
    producer.close()
    assert demo_login_refused(node, "alice", "not-the-token")


def test_a_plugin_whose_init_panics_refuses_the_reload_and_the_old_configuration_serves(launcher, unique):
    node = ReloadNode(launcher, unique("reload-plugin-panic"), Settings())
    plugins = node.process.workdir / "plugins"
    log_at_start = node.process.log_size()
    drop_in(panicking_library(), plugins / "libpanicky.so")
    node.write(Settings(tail='\n[plugins.config.X-PANIC]\npanic_in = "create"\n'))
    r = node.reload()
    said = r.stdout + r.stderr
    assert r.returncode != 0, said
    assert "refused" in said and "libpanicky.so" in said and "panic in from_config" in said, said
    assert node.reloads("refused") == 1 and node.reloads("applied") == 0
    log = node.process.log_path.read_bytes()[log_at_start:].decode(errors="replace")
    assert "reload refused" in log and "libpanicky.so" in log, log[-3000:]
    # The old configuration still serves.
    gw = node.gateway()
    assert metadata_ok(confluent_conf(gw, "SCRAM-SHA-512", *gw.user("alice")))
    assert node.process.alive()

    # The same library with a configuration its init accepts: the next reload loads it.
    node.write(Settings(tail='\n[plugins.config.X-PANIC]\npanic_in = "step"\n'))
    r = node.reload()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "libpanicky.so (loaded)" in r.stdout, r.stdout
    assert node.reloads("applied") == 1


def test_a_changed_library_is_loaded_again_for_new_connections_and_old_ones_carry_on(launcher, unique):
    name = unique("reload-plugin-changed")
    settings = demo_settings({"alice": "token-1"})
    # The library is there from the start: the node loads it then.
    plugins = launcher.run_dir / f"{name}-plugins"
    plugins.mkdir()
    drop_in(demo_library(), plugins / "libdemo.so")
    settings.plugin_dir = plugins
    node = ReloadNode(launcher, name, settings)
    topic = unique("reload-plugin-changed")
    old_session = demo_producer(node, "alice", "token-1")
    try:
        old_session.send(topic, b"before").get(timeout=30)

        # New content (the same code and one byte more) with a new token: a new instance of the
        # plugin from the new library.
        drop_in(demo_library(), plugins / "libdemo.so", extra=b"\0")
        new_settings = demo_settings({"alice": "token-2"})
        new_settings.plugin_dir = plugins
        node.write(new_settings)
        r = node.reload()
        assert r.returncode == 0, r.stdout + r.stderr
        assert "libdemo.so (loaded)" in r.stdout and f"plugins.config.{DEMO}.tokens" in r.stdout, r.stdout

        # New logins use the new instance: the old token is refused, the new one accepted.
        assert demo_login_refused(node, "alice", "token-1")
        fresh = demo_producer(node, "alice", "token-2")
        fresh.send(topic, b"new").get(timeout=30)
        fresh.close()
        # The session logged in on the old library carries on (its code stays mapped).
        time.sleep(0.5)
        old_session.send(topic, b"after").get(timeout=30)
    finally:
        old_session.close()
    copies = list((node.process.workdir / "data" / "plugins-loaded").glob("*-libdemo.so"))
    assert len(copies) == 1, copies


def test_a_mechanism_plugins_table_changed_by_reload_applies_to_new_logins(launcher, unique):
    """Only `[plugins.config.PORTCULLIS-DEMO]` changes (the library loaded at start stays as it
    is): new logins get an instance created with the new table, the open session carries on."""
    name = unique("reload-plugin-table")
    plugins = launcher.run_dir / f"{name}-plugins"
    plugins.mkdir()
    drop_in(demo_library(), plugins / "libdemo.so")
    settings = demo_settings({"alice": "token-1"})
    settings.plugin_dir = plugins
    node = ReloadNode(launcher, name, settings)
    topic = unique("reload-plugin-table")
    old_session = demo_producer(node, "alice", "token-1")
    try:
        old_session.send(topic, b"before").get(timeout=30)
        new_settings = demo_settings({"alice": "token-2"})
        new_settings.plugin_dir = plugins
        node.write(new_settings)
        r = node.reload()
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"plugins.config.{DEMO}.tokens" in r.stdout and "token-2" not in r.stdout, r.stdout

        assert demo_login_refused(node, "alice", "token-1")
        fresh = demo_producer(node, "alice", "token-2")
        fresh.send(topic, b"new").get(timeout=30)
        fresh.close()
        old_session.send(topic, b"after").get(timeout=30)
    finally:
        old_session.close()
    # The unchanged library was opened where it was: no private copy.
    assert not (node.process.workdir / "data" / "plugins-loaded").exists()


def test_a_broken_library_refuses_explicit_reloads_but_not_a_certificate_rotation(launcher, run_dir, unique):
    """A file that is no plugin dropped into the directory refuses `portcullis reload` (named);
    the certificate poll leaves the directory alone, so a rotated certificate is still served;
    the file removed, the next reload applies."""
    name = unique("reload-plugin-junk")
    tls = make_tls_files(run_dir / f"{name}-ca")
    live = run_dir / f"{name}-live"
    live.mkdir()
    shutil.copy(tls.server_cert, live / "cert.pem")
    shutil.copy(tls.server_key, live / "key.pem")
    settings = Settings(tls=tls, cert_file=live / "cert.pem", key_file=live / "key.pem")
    node = ReloadNode(launcher, name, settings)
    plugins = node.process.workdir / "plugins"
    host, port = "127.0.0.1", node.process.listener_port

    (plugins / "libjunk.so").write_bytes(b"\x7fELF but not really")
    r = node.reload()
    said = r.stdout + r.stderr
    assert r.returncode != 0 and "refused" in said and "libjunk.so" in said, said

    serial = 0x7A4C_0000 + time.time_ns() % 1000
    new_cert, new_key = server_cert(tls, run_dir / f"{name}-next", serial)
    replace_file(new_key, live / "key.pem")
    replace_file(new_cert, live / "cert.pem")
    wait_for(lambda: served_serial(host, port, tls.ca_cert) == serial, 10,
             "the rotated certificate is served with a broken library in the plugin directory")

    (plugins / "libjunk.so").unlink()
    r = node.reload()
    assert r.returncode == 0, r.stdout + r.stderr


def auth_log_library() -> Path:
    return demo.built_library("portcullis-example-auth-log", "portcullis_example_auth_log")


def test_event_subscribers_change_by_reload_and_open_sessions_are_kept(launcher, unique):
    """The auth-log subscriber's file changed by SIGHUP, then the subscriber removed by
    `portcullis reload`: each login is logged where the configuration of its moment says (nothing
    twice, nothing in the old file after the change), and a session opened before the first
    reload is still answered after the last."""
    from reauth_support import ReauthConn
    from test_reload_authorizer import PASSWORDS, topic_error

    name = unique("reload-events")
    plugins = launcher.run_dir / f"{name}-plugins"
    plugins.mkdir()
    drop_in(auth_log_library(), plugins / "libauthlog.so")
    first, second = launcher.run_dir / f"{name}-first.jsonl", launcher.run_dir / f"{name}-second.jsonl"

    def settings(path: Path | None) -> Settings:
        tail = "" if path is None else (f'\n[[events.subscribers]]\nplugin = "auth-log"\n\n'
                                        f'[plugins.config.auth-log]\npath = {json.dumps(str(path))}\n')
        return Settings(tail=tail, plugin_dir=plugins, reauth_ms=60_000)

    def logins(path: Path, user: str) -> int:
        if not path.exists():
            return 0
        return sum(1 for line in path.read_text().splitlines()
                   if json.loads(line).get("event") == "SessionAuthenticated"
                   and json.loads(line).get("principal") == f"User:{user}")

    def login(user: str) -> None:
        assert metadata_ok(confluent_conf(node.gateway(), "SCRAM-SHA-512", user, PASSWORDS[user]))

    node = ReloadNode(launcher, name, settings(first))
    session = ReauthConn("127.0.0.1", node.process.listener_port)
    try:
        session.login_plain("alice", PASSWORDS["alice"])
        wait_for(lambda: logins(first, "alice") >= 1, 15, "alice's session in the first file")

        before = node.reloads("applied")
        node.write(settings(second))
        node.sighup()
        wait_for(lambda: node.reloads("applied") > before, 15, "the reload")
        login("carol")
        wait_for(lambda: logins(second, "carol") >= 1, 15, "carol's login in the second file")
        assert logins(first, "carol") == 0, "the replaced subscriber got an event after the reload"

        node.write(settings(None))
        r = node.reload()
        assert r.returncode == 0, r.stdout + r.stderr
        assert "events.subscribers" in r.stdout, r.stdout
        counted = logins(second, "carol")
        login("carol")
        time.sleep(1.5)
        assert logins(second, "carol") == counted, "a removed subscriber still got events"
        # The session from before the first reload was never closed.
        assert topic_error(session, unique("any-topic")) in (0, 3)
    finally:
        session.close()


def topic_guard_library() -> Path:
    return demo.built_library("portcullis-example-topic-guard", "portcullis_example_topic_guard")


def test_another_forwarding_policy_chosen_by_reload_applies_to_new_connections(launcher, kafka_env, unique):
    """`[forwarding] policy` changed from `passthrough` to the topic-guard library by SIGHUP: a new
    connection's produce to a guarded topic is refused as Kafka refuses an unauthorized one while
    other topics are served, and a producer connected before the reload keeps the policy of its
    session; the guard's table changed by `portcullis reload` moves the guard to another topic;
    switching to `delegated` (which starts per-principal upstream tokens) is refused naming the key,
    and the guard keeps serving."""
    from test_plugin_kinds import produce_outcome
    from test_reload_authorizer import create_topics

    name = unique("reload-policy")
    plugins = launcher.run_dir / f"{name}-plugins"
    plugins.mkdir()
    drop_in(topic_guard_library(), plugins / "libtopicguard.so")
    audit, orders = f"audit.{unique('events')}", f"orders.{unique('events')}"
    create_topics(kafka_env, audit, orders)

    def settings(policy: str, pattern: str = "^audit\\.") -> Settings:
        tail = (f'\n[forwarding]\npolicy = "{policy}"\n\n'
                f'[plugins.config.topic-guard]\nrefuse_produce_to = {json.dumps(pattern)}\n')
        # An authorizer all along (alice a super user of `acl`): without one, a policy that
        # screens requests is the only authorization, and starting it needs a restart.
        return Settings(tail=tail, plugin_dir=plugins, super_users=["User:alice"])

    def refused(outcome: tuple[int, list]) -> bool:
        delivered, errors = outcome
        return delivered == 0 and any(e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for e in errors)

    node = ReloadNode(launcher, name, settings("passthrough"))
    gw = node.gateway()
    conf = confluent_conf(gw, "SCRAM-SHA-512", *gw.user("alice"))
    assert produce_outcome(conf, audit, n=1) == (1, [])

    # A producer whose connection (and session) is open before the reload.
    errors: list = []
    early = Producer({**conf, "acks": "all", "error_cb": errors.append})
    early.produce(audit, b"before")
    assert early.flush(30) == 0

    before = node.reloads("applied")
    node.write(settings("topic-guard"))
    node.sighup()
    wait_for(lambda: node.reloads("applied") > before, 15, "the reload choosing topic-guard")
    assert refused(produce_outcome(conf, audit, n=1, timeout=15))
    assert produce_outcome(conf, orders, n=2) == (2, [])
    early.produce(audit, b"after, on the session from before")
    assert early.flush(30) == 0, errors

    node.write(settings("topic-guard", "^orders\\."))
    r = node.reload()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "plugins.config.topic-guard.refuse_produce_to" in r.stdout, r.stdout
    assert refused(produce_outcome(conf, orders, n=1, timeout=15))
    assert produce_outcome(conf, audit, n=2) == (2, [])

    node.write(settings("delegated", "^orders\\."))
    r = node.reload()
    assert r.returncode != 0, r.stdout + r.stderr
    assert "forwarding.policy" in r.stdout + r.stderr, r.stdout + r.stderr
    assert refused(produce_outcome(conf, orders, n=1, timeout=15))
    assert produce_outcome(conf, audit, n=1) == (1, [])
    assert not errors, [e.str() for e in errors]
