"""Shared pieces of the multi-node tests (issue 13: several Portcullis nodes, one security state).

- `ClusterTls`: the inter-node TLS material, made with the openssl CLI: a cluster CA, a certificate
  per node (CN=<name>, IP:127.0.0.1, serverAuth + clientAuth), and on demand certificates for
  impostors (same CA without ClusterAction, or another CA).
- `start_cluster`: N nodes with `[store] kind = "kafka"` on one fresh topic and cluster id,
  `[cluster]` inter-node listeners, the ACL authorizer (super users: User:alice and the nodes'
  certificate principals, which therefore hold ClusterAction), and the suite's users written to the
  topic with `portcullis scram add` before the nodes start.
- `store_sections`: the `[store]`/`[cluster]` sections that turn any suite node into a one-node
  cluster on the kafka store (`INTEROP_STORE=kafka`, the CI variant of the interop suite).
- `admin`, `scram_upsert`, `acl_binding`, `wait_for`: small confluent-kafka helpers.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

from conftest import PORTCULLIS_USERS, Launcher, PortcullisProcess, free_ports, toml_str, wait_for_port

# --------------------------------------------------------------------------------------------------
# TLS


@dataclasses.dataclass
class ClusterTls:
    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    def _run(self, *args: str) -> None:
        subprocess.run(["openssl", *args], cwd=self.directory, check=True, capture_output=True, timeout=60)

    def make_ca(self, name: str = "ca") -> Path:
        if not (self.directory / f"{name}.pem").exists():
            self._run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", f"{name}.key")
            self._run("req", "-x509", "-new", "-key", f"{name}.key", "-sha256", "-days", "2", "-subj",
                      f"/CN=portcullis-{name}", "-addext", "basicConstraints=critical,CA:TRUE", "-addext",
                      "keyUsage=critical,keyCertSign,cRLSign", "-out", f"{name}.pem")
        return self.directory / f"{name}.pem"

    def cert(self, cn: str, ca: str = "ca") -> tuple[Path, Path]:
        """(certificate, key) for CN=<cn>, signed by CA `ca`, usable as server and client."""
        self.make_ca(ca)
        stem = f"{ca}-{cn}"
        cert, key = self.directory / f"{stem}.pem", self.directory / f"{stem}.key"
        if cert.exists():
            return cert, key
        self._run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key.name)
        self._run("req", "-new", "-key", key.name, "-subj", f"/CN={cn}", "-out", f"{stem}.csr")
        (self.directory / f"{stem}.ext").write_text(
            "basicConstraints=critical,CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=serverAuth,clientAuth\n"
            "subjectAltName=IP:127.0.0.1\n")
        self._run("x509", "-req", "-in", f"{stem}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
                  "-CAcreateserial", "-days", "2", "-sha256", "-extfile", f"{stem}.ext", "-out", cert.name)
        return cert, key


_TLS_LOCK = threading.Lock()


def cluster_tls(run_dir: Path) -> ClusterTls:
    if shutil.which("openssl") is None:
        raise RuntimeError("openssl is required for the cluster tests")
    with _TLS_LOCK:
        tls = ClusterTls(run_dir / "cluster-tls")
        tls.directory.mkdir(parents=True, exist_ok=True)
        tls.make_ca()
        return tls


def node_principal(cn: str) -> str:
    return f"User:CN={cn}"


# --------------------------------------------------------------------------------------------------
# Configuration


def store_sections(tls: ClusterTls, *, cluster_id: str, node_name: str, listener_port: int,
                   session_timeout_ms: int = 6000) -> str:
    cert, key = tls.cert(node_name)
    return (
        "\n[store]\n"
        'kind = "kafka"\n'
        f"topic = {toml_str('__portcullis_' + cluster_id)}\n"
        f"cluster_id = {toml_str(cluster_id)}\n"
        f"session_timeout_ms = {session_timeout_ms}\n"
        "\n[cluster]\n"
        f"listener = {toml_str(f'127.0.0.1:{listener_port}')}\n"
        f"cert_file = {toml_str(str(cert))}\n"
        f"key_file = {toml_str(str(key))}\n"
        f"ca_file = {toml_str(str(tls.ca))}\n"
        "forward_timeout_ms = 30000\n"
    )


def single_node_store_sections(workdir: Path, name: str) -> str:
    """`INTEROP_STORE=kafka`: the sections that put a suite node on its own kafka-store cluster."""
    tls = cluster_tls(workdir.parent)
    cluster_id = f"single-{name}-{os.getpid()}-{time.time_ns() % 10**10}"
    return store_sections(tls, cluster_id=cluster_id, node_name=f"node-{name}", listener_port=free_ports(1)[0])


@dataclasses.dataclass
class Cluster:
    nodes: list[PortcullisProcess]
    cluster_id: str
    topic: str
    tls: ClusterTls
    inter_node_ports: list[int]

    def node_name(self, i: int) -> str:
        return f"{self.cluster_id}-node-{i + 1}"

    def status(self) -> str:
        r = subprocess.run([str(self.nodes[0].binary), "cluster", "status", "--config", str(self.nodes[0].config)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, f"cluster status failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
        return r.stdout

    def writer(self, timeout: float = 30.0, among: list[int] | None = None) -> int:
        """The index of the node that is the writer now (from its log: `metadata writer` lines are
        not enough, the node says so in `cluster status`)."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            last = self.status()
            for line in last.splitlines()[2:]:
                parts = line.split()
                if len(parts) >= 3 and parts[2] == "writer":
                    index = int(parts[0]) - 1
                    if among is None or index in among:
                        return index
            time.sleep(0.3)
        raise AssertionError(f"no writer within {timeout}s:\n{last}")


def start_cluster(launcher: Launcher, name: str, n: int = 3, *, session_timeout_ms: int = 6000,
                  extra_super_users: tuple[str, ...] = ()) -> Cluster:
    tls = cluster_tls(launcher.run_dir)
    cluster_id = f"{name}-{os.getpid()}-{time.time_ns() % 10**10}"
    ports = free_ports(n)
    nodes = []
    super_users = ["User:alice"] + [node_principal(f"{cluster_id}-node-{i + 1}") for i in range(n)]
    super_users += list(extra_super_users)
    for i in range(n):
        node_name = f"{cluster_id}-node-{i + 1}"
        workdir = launcher.run_dir / f"portcullis-{name}-{i + 1}"
        workdir.mkdir(parents=True, exist_ok=False)
        plugins = workdir / "plugins"
        plugins.mkdir()
        p = PortcullisProcess(launcher.binary, workdir, f"{name}-{i + 1}")
        p.write_config(upstream={"bootstrap_servers": [launcher.kafka["KAFKA_BOOTSTRAP"]],
                                 "security_protocol": "PLAINTEXT"}, tls=None, plugin_dir=plugins)
        text = p.config.read_text()
        assert "\nid = 1\n" in text
        text = text.replace("\nid = 1\n", f"\nid = {i + 1}\n", 1)
        text += store_sections(tls, cluster_id=cluster_id, node_name=node_name, listener_port=ports[i],
                               session_timeout_ms=session_timeout_ms)
        text += ("\n[authorizer]\nplugin = \"acl\"\n"
                 f"super_users = [{', '.join(toml_str(u) for u in super_users)}]\n"
                 "allow_everyone_if_no_acl_found = false\n")
        text += "\n[delegation_tokens]\nsecret = \"cluster-token-secret\"\n"
        p.config.write_text(text)
        p.config.chmod(0o600)  # it holds the token secret
        nodes.append(p)
    # The users go into the cluster's topic before any node starts.
    for user, password in PORTCULLIS_USERS.items():
        nodes[0].scram_add(user, password, "SCRAM-SHA-512")
        nodes[0].scram_add(user, password, "SCRAM-SHA-256")
    for p in nodes:
        p.start(wait=False)
        launcher.processes.append(p)
    for p in nodes:
        wait_started(p)
    return Cluster(nodes, cluster_id, f"__portcullis_{cluster_id}", tls, ports)


def wait_started(p: PortcullisProcess, timeout: float = 60.0) -> None:
    """Waits until a node started with `start(wait=False)` accepts clients (its bootstrap port
    listens once the store is replayed and the upstream discovered)."""
    try:
        wait_for_port("127.0.0.1", p.listener_port, timeout, p.proc)
    except Exception as e:
        raise RuntimeError(f"portcullis[{p.name}] did not start: {e}\n{p.log_tail(80)}") from e


# --------------------------------------------------------------------------------------------------
# Clients


def admin_conf(p: PortcullisProcess, user: str = "alice", **extra) -> dict:
    return {
        "bootstrap.servers": p.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": PORTCULLIS_USERS[user],
        **extra,
    }


def wait_for(what: str, check, timeout: float, interval: float = 0.02):
    """Polls `check()` until it returns a true value; returns (value, seconds it took)."""
    start = time.monotonic()
    deadline = start + timeout
    last_error = None
    while True:
        try:
            value = check()
            if value:
                return value, time.monotonic() - start
        except Exception as e:  # noqa: BLE001 - reported if the deadline passes
            last_error = e
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout}s (last error: {last_error!r})")
        time.sleep(interval)
