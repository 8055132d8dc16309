"""Shared pieces of the live-reconfiguration tests (test_reload.py, issue 23).

- `ReloadNode`: a Portcullis of the test's own (free loopback ports, its own directory under the
  run directory, an admin endpoint), whose configuration file the test rewrites and reloads with
  `portcullis reload`, SIGHUP, or no trigger at all (TLS files replaced on disk).
- `server_cert`: another server certificate from the throwaway CA of `conftest.make_tls_files`,
  with a serial of the test's choice, so a TLS handshake tells which certificate is served.
- `served_serial`: the serial a new TLS handshake sees (Python's ssl, verifying against the CA).
- `reload_count`: `portcullis_config_reloads_total{result=...}` from the admin endpoint.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import ssl
import subprocess
import time
from pathlib import Path

from conftest import (ENABLED_MECHANISMS, KAFKA_NODE_ID, PORTCULLIS_USERS, Gateway, Launcher, PortcullisProcess,
                      TlsFiles, free_port_pair, free_ports, toml_value)
from prometheus import MetricsEndpoint, scrape, total


@dataclasses.dataclass
class Settings:
    """The keys the tests change; everything else is fixed."""

    mechanisms: list[str] = dataclasses.field(default_factory=lambda: list(ENABLED_MECHANISMS))
    tls: TlsFiles | None = None
    cert_file: Path | None = None  # overrides tls.server_cert
    key_file: Path | None = None  # overrides tls.server_key
    reauth_ms: int = 0
    super_users: list[str] | None = None  # None: no [authorizer]
    allow_everyone: bool = False  # [authorizer] allow_everyone_if_no_acl_found
    extra_listener: str = ""  # raw TOML lines added to [listener]
    address_port: int | None = None  # overrides the listener port in the file only
    tail: str = ""  # raw TOML appended at the end
    node_id: int = 1
    upstream: dict | None = None  # the [upstream] keys; default: Kafka's PLAINTEXT listener
    upstream_tls: dict | None = None  # an [upstream.tls] table
    plugin_dir: Path | None = None  # default: the node's own empty directory


class ReloadNode:
    """A dedicated Portcullis whose configuration the test rewrites."""

    def __init__(self, launcher: Launcher, name: str, settings: Settings, add_users: bool = True):
        """`add_users=False` for a further node of a kafka-store cluster: the users are in the
        cluster's topic already, and `scram add` there opens the cluster's transactional id, which
        races with the running node being elected writer (one of them is fenced)."""
        workdir = launcher.run_dir / f"portcullis-{name}"
        workdir.mkdir(parents=True, exist_ok=False)
        (workdir / "plugins").mkdir()
        self.kafka_bootstrap = launcher.kafka["KAFKA_BOOTSTRAP"]
        self.process = PortcullisProcess(launcher.binary, workdir, name)
        self.process.listener_port, broker = free_port_pair()
        self.process.broker_port_base = broker - KAFKA_NODE_ID
        (admin_port,) = free_ports(1)
        self.metrics = MetricsEndpoint(f"127.0.0.1:{admin_port}")
        self.binary = launcher.binary
        self.settings = settings
        self.write(settings)
        for user, password in PORTCULLIS_USERS.items() if add_users else ():
            self.process.scram_add(user, password, "SCRAM-SHA-512")
            self.process.scram_add(user, password, "SCRAM-SHA-256")
        self.process.start()
        launcher.processes.append(self.process)

    @property
    def config(self) -> Path:
        return self.process.config

    def text(self, s: Settings) -> str:
        p = self.process
        port = s.address_port or p.listener_port
        lines = [
            "[node]", f"id = {s.node_id}", f"data_dir = {toml_value(str(p.workdir / 'data'))}", "",
            "[plugins]", f"dir = {toml_value(str(s.plugin_dir or p.workdir / 'plugins'))}", "",
            "[listener]",
            f"address = {toml_value(f'127.0.0.1:{port}')}",
            'advertised_host = "127.0.0.1"',
            f"broker_port_base = {p.broker_port_base}",
            f"sasl_mechanisms = {toml_value(s.mechanisms)}",
            f"connections_max_reauth_ms = {s.reauth_ms}",
        ]
        if s.extra_listener:
            lines.append(s.extra_listener)
        lines.append("")
        if s.tls is not None:
            lines += [
                "[listener.tls]",
                f"cert_file = {toml_value(str(s.cert_file or s.tls.server_cert))}",
                f"key_file = {toml_value(str(s.key_file or s.tls.server_key))}",
                'client_auth = "none"', "",
            ]
        lines += ["[limits.failed_authentication]", "max_delay_ms = 100", ""]
        upstream = s.upstream or {"bootstrap_servers": [self.kafka_bootstrap], "security_protocol": "PLAINTEXT"}
        lines += ["[upstream]"] + [f"{k} = {toml_value(v)}" for k, v in upstream.items()] + [""]
        if s.upstream_tls is not None:
            lines += ["[upstream.tls]"] + [f"{k} = {toml_value(v)}" for k, v in s.upstream_tls.items()] + [""]
        if s.super_users is not None:
            lines += ["[authorizer]", 'plugin = "acl"', f"super_users = {toml_value(s.super_users)}"]
            if s.allow_everyone:
                lines.append("allow_everyone_if_no_acl_found = true")
            lines.append("")
        lines += ["[telemetry]", f"prometheus_address = {toml_value(self.metrics.address)}", ""]
        return "\n".join(lines) + s.tail

    def write(self, s: Settings) -> None:
        self.write_text(self.text(s))

    def write_text(self, text: str) -> None:
        # Replaced in one rename, as an editor or a configuration manager writes it.
        tmp = self.config.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.config)

    def reload(self) -> subprocess.CompletedProcess:
        """`portcullis reload --config FILE`, with the suite's own PORTCULLIS_* variables kept away."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("PORTCULLIS_")}
        return subprocess.run([str(self.binary), "reload", "--config", str(self.config)],
                              capture_output=True, text=True, timeout=60, env=env)

    def sighup(self) -> None:
        self.process.proc.send_signal(signal.SIGHUP)

    def reloads(self, result: str) -> int:
        return reload_count(self.metrics, result)

    def gateway(self, ca_file: Path | None = None) -> Gateway:
        return Gateway(
            name=self.process.name,
            bootstrap=self.process.bootstrap,
            security_protocol="SASL_SSL" if self.settings.tls is not None else "SASL_PLAINTEXT",
            users=dict(PORTCULLIS_USERS),
            broker_addresses={KAFKA_NODE_ID: f"127.0.0.1:{self.process.broker_port_base + KAFKA_NODE_ID}"},
            hidden_ports=set(),
            ca_file=ca_file,
            process=self.process,
        )


def wait_for(predicate, timeout: float, what: str):
    """The predicate's first truthy value within `timeout` seconds (polled every 0.1 s), or an
    AssertionError naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.1)


def cluster_fingerprints(binary: Path, config: Path) -> dict[int, str]:
    """`portcullis cluster status`: each reporting node's CONFIG column, by node id."""
    r = subprocess.run([str(binary), "cluster", "status", "--config", str(config)],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise AssertionError(f"cluster status failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    lines = r.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("NODE"))
    column = lines[header].split().index("CONFIG")
    return {int(line.split()[0]): line.split()[column] for line in lines[header + 1:] if line.strip()}


def reload_count(endpoint: MetricsEndpoint, result: str) -> int:
    return int(total(scrape(endpoint), "portcullis_config_reloads_total", result=result))


def server_cert(tls: TlsFiles, directory: Path, serial: int) -> tuple[Path, Path]:
    """A new key and a certificate for 127.0.0.1 signed by `tls`' CA, with serial `serial`."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_dir = tls.ca_cert.parent

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True, timeout=60)

    run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "server.key")
    run("req", "-new", "-key", "server.key", "-subj", "/CN=localhost", "-out", "server.csr")
    run("x509", "-req", "-in", "server.csr", "-CA", str(tls.ca_cert), "-CAkey", str(ca_dir / "ca.key"),
        "-set_serial", str(serial), "-days", "2", "-sha256", "-extfile", str(ca_dir / "server.ext"),
        "-out", "server.pem")
    return directory / "server.pem", directory / "server.key"


def served_serial(host: str, port: int, ca_file: Path) -> int:
    """The serial number of the certificate a new TLS handshake is given (verified with the CA)."""
    context = ssl.create_default_context(cafile=str(ca_file))
    context.check_hostname = False
    with socket.create_connection((host, port), timeout=5) as raw:
        with context.wrap_socket(raw) as tls:
            return int(tls.getpeercert()["serialNumber"], 16)


def replace_file(source: Path, target: Path) -> None:
    """Puts `source`'s bytes at `target` with one rename, as certificate tooling does."""
    tmp = target.with_name(target.name + ".new")
    tmp.write_bytes(source.read_bytes())
    os.replace(tmp, target)
