"""The out-of-tree SASL mechanism plugin (examples/custom-mechanism, `PORTCULLIS-DEMO`) end to end:
the host loads it from its plugin directory, next to a library with the wrong ABI version and a
file that is no plugin at all (both refused with a reason, the node starts anyway), and a real
client (kafka-python, with the mechanism registered on its side) authenticates with it and
produces and consumes through Portcullis to Kafka. A wrong token is refused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaTimeoutError
from kafka.sasl import register_sasl_mechanism
from kafka.sasl.abc import SaslMechanism

from clients import CaptureErrors
from conftest import PortcullisProcess, _need, target

pytestmark = pytest.mark.skipif(target() != "portcullis", reason="Portcullis-only: its plugin directory")

REPO = Path(__file__).resolve().parents[2]
TOKENS = {"alice": "demo-token-alice"}


class DemoMechanism(SaslMechanism):
    """The client half of PORTCULLIS-DEMO: one message, `username NUL token`, empty answer."""

    def __init__(self, **config):
        self.username = config["sasl_plain_username"]
        self.token = config["sasl_plain_password"]
        self._done = False
        self._ok = False

    def auth_bytes(self):
        return self.username.encode() + b"\0" + self.token.encode()

    def receive(self, auth_bytes):
        self._done = True
        self._ok = auth_bytes == b""

    def is_done(self):
        return self._done

    def is_authenticated(self):
        return self._ok

    def auth_details(self):
        return f"Authenticated as {self.username} via PORTCULLIS-DEMO"


register_sasl_mechanism("PORTCULLIS-DEMO", DemoMechanism, overwrite=True)


def built_library(package: str, stem: str) -> Path:
    target_dir = Path(os.environ.get("INTEROP_CARGO_TARGET_DIR") or REPO / "target")
    lib = target_dir / "debug" / f"lib{stem}.so"
    # Always ask cargo: a no-op when the library is current, a rebuild when the sources changed.
    subprocess.run(["cargo", "build", "-q", "-p", package], cwd=REPO, check=True, timeout=600,
                   env={**os.environ, "CARGO_TARGET_DIR": str(target_dir)})
    assert lib.exists(), lib
    return lib


@pytest.fixture(scope="module")
def node(run_dir):
    binary = Path(_need("PORTCULLIS_BIN"))
    workdir = run_dir / "portcullis-plugin"
    workdir.mkdir(parents=True, exist_ok=False)
    plugins = workdir / "plugins"
    plugins.mkdir()
    shutil.copy(built_library("portcullis-example-custom-mechanism", "portcullis_example_custom_mechanism"), plugins)
    shutil.copy(built_library("portcullis-example-bad-abi-plugin", "portcullis_example_bad_abi_plugin"), plugins)
    (plugins / "libnot-a-plugin.so").write_bytes(b"\x7fELF but not really")
    p = PortcullisProcess(binary, workdir, "plugin")
    p.write_config(upstream={"bootstrap_servers": [_need("KAFKA_BOOTSTRAP")], "security_protocol": "PLAINTEXT"},
                   tls=None, plugin_dir=plugins)
    text = p.config.read_text().replace('sasl_mechanisms = [', 'sasl_mechanisms = ["PORTCULLIS-DEMO", ', 1)
    text += "\n[plugins.config.PORTCULLIS-DEMO]\ntokens = { " + ", ".join(
        f"{u} = {json.dumps(t)}" for u, t in TOKENS.items()) + " }\n"
    p.config.write_text(text)
    p.start()
    yield p
    p.stop()


def test_plugins_command_lists_the_loaded_and_the_refused(node):
    out = subprocess.run([str(node.binary), "plugins", "--config", str(node.config)], capture_output=True,
                         text=True, timeout=60)
    # `plugins` needs no lock on the data dir, so it works next to the running node.
    assert out.returncode == 0, out.stderr
    text = out.stdout + out.stderr
    assert "PORTCULLIS-DEMO" in text
    assert "libportcullis_example_bad_abi_plugin.so" in text and "ABI version 1, this host speaks 2" in text
    assert "libnot-a-plugin.so" in text
    assert node.alive()


def test_a_real_client_authenticates_with_the_plugin_mechanism(node):
    topic = f"plugin-demo-{int(time.time() * 1000)}"
    conf = dict(bootstrap_servers=node.bootstrap, security_protocol="SASL_PLAINTEXT",
                sasl_mechanism="PORTCULLIS-DEMO", sasl_plain_username="alice",
                sasl_plain_password=TOKENS["alice"], request_timeout_ms=20000)
    producer = KafkaProducer(**conf)
    for i in range(20):
        producer.send(topic, key=str(i).encode(), value=f"demo-{i}".encode()).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(topic, group_id=f"g-{topic}", auto_offset_reset="earliest",
                             consumer_timeout_ms=15000, **conf)
    got = {m.key.decode(): m.value.decode() for m in consumer}
    consumer.close()
    assert got == {str(i): f"demo-{i}" for i in range(20)}


def test_a_wrong_token_is_refused(node):
    conf = dict(bootstrap_servers=node.bootstrap, security_protocol="SASL_PLAINTEXT",
                sasl_mechanism="PORTCULLIS-DEMO", sasl_plain_username="alice",
                sasl_plain_password="not-the-token", request_timeout_ms=20000)
    with CaptureErrors() as captured:
        producer = KafkaProducer(max_block_ms=4000, **conf)
        try:
            with pytest.raises(KafkaTimeoutError):
                producer.send("never-created", b"x").get(timeout=10)
        finally:
            producer.close(timeout=2)
    assert any("Invalid username or token" in m for m in captured.messages), captured.messages[:5]
