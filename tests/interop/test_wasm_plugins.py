"""Sandboxed WASM plugins (examples/wasm, built here for wasm32-wasip2) end to end: a node loads
the components from its plugin directory next to a file that is no component (refused, naming the
file; the node starts anyway); a real client (kafka-python) authenticates with the WASM
`PORTCULLIS-DEMO` mechanism and is authorized by the WASM prefix authorizer, producing and
consuming through Portcullis to Kafka. A second node's components misbehave on purpose — an
authorizer that loops forever, a mechanism that traps — and each such call fails closed
(TOPIC_AUTHORIZATION_FAILED, SASL_AUTHENTICATION_FAILED) while the node keeps serving. Another
maps principals with a component principal builder and logs every event with a component event
subscriber. A last one gets a component dropped into its plugin directory after start, chosen by
a reload, then replaced by other content."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import KafkaError
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaTimeoutError, TopicAuthorizationFailedError
from kafka.sasl import register_sasl_mechanism

from clients import CaptureErrors
from conftest import PORTCULLIS_USERS, target
from reload_support import ReloadNode, Settings
from test_plugin_kinds import produce_outcome, start_node
from test_plugin_mechanism import DemoMechanism
from test_reload_authorizer import create_topics, prefix_settings, produces

pytestmark = pytest.mark.skipif(target() != "portcullis", reason="Portcullis-only: its plugin directory")

REPO = Path(__file__).resolve().parents[2]
TOKENS = {"alice": "wasm-token-alice", "bob": "wasm-token-bob"}


class MisbehavingMechanism(DemoMechanism):
    """The client half of the misbehaving component: one message, like PORTCULLIS-DEMO."""


register_sasl_mechanism("X-MISBEHAVING", MisbehavingMechanism, overwrite=True)


def built_components() -> Path:
    """Builds examples/wasm (a no-op when current) and returns where the components are."""
    target_dir = Path(os.environ.get("INTEROP_CARGO_TARGET_DIR") or REPO / "target")
    subprocess.run(["cargo", "build", "-q", "--release", "--target", "wasm32-wasip2",
                    "--manifest-path", str(REPO / "examples/wasm/Cargo.toml")],
                   cwd=REPO, check=True, timeout=900, env={**os.environ, "CARGO_TARGET_DIR": str(target_dir)})
    return target_dir / "wasm32-wasip2" / "release"


def wasm_node(launcher, name: str, components: dict[str, str], extra: str, mechanisms: list[str]):
    """A node whose plugin directory holds `components` (plugin name -> built file stem)."""
    built = built_components()
    p = start_node(launcher, name, [], extra, start=False)
    plugins = p.workdir / "plugins"
    for plugin, stem in components.items():
        shutil.copy(built / f"{stem}.wasm", plugins / f"{plugin}.wasm")
    (plugins / "broken.wasm").write_bytes(b"\0asm but not really")
    text = p.config.read_text().replace(
        "sasl_mechanisms = [", "sasl_mechanisms = [" + "".join(f'"{m}", ' for m in mechanisms), 1)
    p.config.write_text(text)
    p.start()
    launcher.processes.append(p)
    return p


def demo_conf(p, user: str, token: str) -> dict:
    return dict(bootstrap_servers=p.bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism="PORTCULLIS-DEMO",
                sasl_plain_username=user, sasl_plain_password=token, request_timeout_ms=20000)


@pytest.fixture(scope="module")
def node(launcher):
    tokens = ", ".join(f"{u} = {json.dumps(t)}" for u, t in TOKENS.items())
    return wasm_node(launcher, "wasm-plugins",
                     {"PORTCULLIS-DEMO": "wasm_mechanism", "prefix-authorizer": "wasm_authorizer"},
                     '[authorizer]\nplugin = "prefix-authorizer"\n\n'
                     f"[plugins.config.PORTCULLIS-DEMO]\ntokens = {{ {tokens} }}\n",
                     ["PORTCULLIS-DEMO"])


def test_the_broken_file_is_refused_naming_it_and_the_components_are_listed(node):
    log = node.log_path.read_text(errors="replace")
    assert "broken.wasm" in log and "not a valid WebAssembly component" in log, log[-3000:]
    out = subprocess.run([str(node.binary), "plugins", "--config", str(node.config)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    text = out.stdout + out.stderr
    for plugin in ["PORTCULLIS-DEMO.wasm", "prefix-authorizer.wasm", "broken.wasm"]:
        assert plugin in text, text
    assert node.alive()


def test_a_real_client_authenticates_with_the_wasm_mechanism_and_the_wasm_authorizer_decides(node, unique):
    own, other = f"alice.{unique('wasm')}", f"bob.{unique('wasm')}"
    conf = demo_conf(node, "alice", TOKENS["alice"])
    producer = KafkaProducer(acks="all", max_block_ms=20000, **conf)
    try:
        for i in range(10):
            producer.send(own, key=str(i).encode(), value=f"wasm-{i}".encode()).get(timeout=30)
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send(other, b"not alice's").get(timeout=30)
    finally:
        producer.close(timeout=5)
    consumer = KafkaConsumer(own, group_id=f"g-{own}", auto_offset_reset="earliest", consumer_timeout_ms=15000,
                             **conf)
    got = {m.key.decode(): m.value.decode() for m in consumer}
    consumer.close()
    assert got == {str(i): f"wasm-{i}" for i in range(10)}


def test_a_wrong_token_is_refused_by_the_wasm_mechanism(node):
    with CaptureErrors() as captured:
        producer = KafkaProducer(max_block_ms=4000, **demo_conf(node, "alice", "not-the-token"))
        try:
            with pytest.raises(KafkaTimeoutError):
                producer.send("never-created", b"x").get(timeout=10)
        finally:
            producer.close(timeout=2)
    assert any("Invalid username or token" in m for m in captured.messages), captured.messages[:5]


def test_misbehaving_components_fail_closed_and_the_node_keeps_serving(launcher, unique):
    p = wasm_node(launcher, "wasm-misbehaving",
                  {"X-MISBEHAVING": "wasm_misbehaving_mechanism", "misbehaving": "wasm_misbehaving_authorizer"},
                  '[authorizer]\nplugin = "misbehaving"\n\n'
                  '[plugins.config.misbehaving]\nmode = "loop"\n\n'
                  '[plugins.wasm.misbehaving]\nfuel_per_call = 1000000\n\n'
                  '[plugins.config.X-MISBEHAVING]\nmode = "trap"\n',
                  ["X-MISBEHAVING"])
    conf = {"bootstrap.servers": p.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": PORTCULLIS_USERS["alice"],
            "log_level": 3}
    for _ in range(2):
        # The authorizer loops on this topic until its fuel runs out: the request is denied.
        delivered, errors = produce_outcome(conf, unique("loop"), n=1, timeout=15)
        assert delivered == 0
        assert any(e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for e in errors), [e.str() for e in errors]
        # The next request is answered (the component allows `ok.*`).
        assert produce_outcome(conf, unique("ok.calm")) == (5, [])
    # The mechanism traps in its step: that login fails with Kafka's error, others still get in.
    with CaptureErrors() as captured:
        producer = KafkaProducer(max_block_ms=4000, bootstrap_servers=p.bootstrap, security_protocol="SASL_PLAINTEXT",
                                 sasl_mechanism="X-MISBEHAVING", sasl_plain_username="mallory",
                                 sasl_plain_password="x", request_timeout_ms=20000)
        try:
            with pytest.raises(KafkaTimeoutError):
                producer.send("never-created", b"x").get(timeout=10)
        finally:
            producer.close(timeout=2)
    assert any("Authentication failed" in m for m in captured.messages), captured.messages[:5]
    assert produce_outcome(conf, unique("ok.after")) == (5, [])
    assert p.alive()
    failures = [line for line in p.log_path.read_text(errors="replace").splitlines()
                if "wasm plugin failed closed" in line]
    assert any("while authorizing" in line and "timeout" in line for line in failures), failures[-5:]
    assert any("while stepping an exchange" in line and "trap" in line for line in failures), failures[-5:]
    # The component's input (the user name, the token) is never logged.
    assert not any("mallory" in line for line in failures), failures[-5:]


def put(plugins: Path, name: str, source: Path) -> None:
    """`source` put into the plugin directory as `name` in one rename, as an operator's tooling would."""
    tmp = plugins / (name + ".tmp")
    shutil.copy(source, tmp)
    os.replace(tmp, plugins / name)


def test_a_component_dropped_in_after_start_is_chosen_by_reload_and_its_new_content_by_the_next(
        launcher, kafka_env, unique):
    built = built_components()
    node = ReloadNode(launcher, unique("wasm-reload"), Settings(super_users=["User:carol"]))
    plugins = node.process.workdir / "plugins"
    own = f"alice.{unique('t')}"
    create_topics(kafka_env, own)
    assert not produces(node, "alice", own), "acl, with no ACL for alice"

    put(plugins, "prefix-authorizer.wasm", built / "wasm_authorizer.wasm")
    node.write(prefix_settings("."))
    r = node.reload()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "prefix-authorizer.wasm (loaded)" in r.stdout and "authorizer.plugin" in r.stdout, r.stdout
    assert produces(node, "alice", own)

    # The same name, other content (an authorizer that loops on every topic but `ok.*` until its
    # fuel runs out): the next connection is decided by it, and fails closed.
    put(plugins, "prefix-authorizer.wasm", built / "wasm_misbehaving_authorizer.wasm")
    looping = prefix_settings(".")
    looping.tail += 'mode = "loop"\n'
    node.write(looping)
    r = node.reload()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "prefix-authorizer.wasm (loaded)" in r.stdout, r.stdout
    assert not produces(node, "alice", own)
    assert "wasm plugin failed closed" in node.process.log_tail(400)


def test_a_wasm_principal_builder_names_the_session_and_a_wasm_subscriber_sees_its_events(launcher, unique):
    """principal-mapping.wasm upper-cases names and refuses carol; event-log.wasm logs each event.
    alice is a super user only as `User:ALICE` (the `acl` authorizer has no ACL at all)."""
    p = wasm_node(launcher, "wasm-principal-events",
                  {"principal-mapping": "wasm_principal_mapping", "event-log": "wasm_event_log"},
                  '[principal]\nplugin = "principal-mapping"\n\n'
                  '[plugins.config.principal-mapping]\ncase = "upper"\nrefuse = ["carol"]\n\n'
                  '[[events.subscribers]]\nplugin = "event-log"\n\n'
                  '[authorizer]\nplugin = "acl"\nsuper_users = ["User:ALICE"]\n',
                  [])

    def conf(user: str) -> dict:
        return {"bootstrap.servers": p.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
                "sasl.password": PORTCULLIS_USERS[user], "log_level": 3}

    assert produce_outcome(conf("alice"), unique("wasm-mapped")) == (5, [])
    delivered, errors = produce_outcome(conf("carol"), unique("wasm-refused"), n=1, timeout=10)
    assert delivered == 0 and errors, "carol has no principal"
    log = p.log_path.read_text(errors="replace")
    assert "event session-authenticated User:ALICE SCRAM-SHA-512 127.0.0.1" in log, p.log_tail(30)
    assert "event authentication-failed SCRAM-SHA-512 127.0.0.1" in log, p.log_tail(30)
    assert "User:alice" not in log.split("event session-authenticated", 1)[1], "alice was never User:alice"
