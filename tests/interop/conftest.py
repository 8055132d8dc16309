"""Fixtures for Portcullis' interop suite: real clients -> Portcullis -> a real Apache Kafka.

The Kafka broker is started once per run by scripts/test.sh (scripts/lib/kafka.sh) and described to
this suite through environment variables; this file starts Portcullis processes from the built
binary, pointed at that Kafka, and tears them down at the end of the session.

Environment (exported by scripts/test.sh):
  KAFKA_BOOTSTRAP        Kafka's PLAINTEXT listener (Portcullis' upstream)
  KAFKA_SASL_BOOTSTRAP   Kafka's SASL_PLAINTEXT listener (SCRAM-SHA-512/256, PLAIN)
  KAFKA_SASL_USER/KAFKA_SASL_PASSWORD, KAFKA_ADMIN_USER/KAFKA_ADMIN_PASSWORD  users known to Kafka
  KAFKA_LIB              the Kafka jars (for the Java clients and javac)
  PORTCULLIS_BIN         the built `portcullis` binary
  PORTCULLIS_CACHE       cache dir (compiled Java helpers go under it)
  INTEROP_RUN_DIR        where configs, data dirs and Portcullis logs go (default: a pytest temp dir)
  INTEROP_TARGET         "portcullis" (default) or "kafka": run the client tests straight against
                         Kafka's SASL listener, to check the suite itself; tests marked
                         `portcullis_only` are then deselected (not skipped).
  FREE_PORT_SLICE        "k/n": this run's part of the free-port pool (scripts/lib/free_ports.py)

Parallel runs (pytest-xdist, `-n N --dist loadgroup`, as scripts/test.sh runs the suite): each worker
has its own session fixtures (its own gateways), its own run directory (`<run dir>/interop/gwN`) and
its own part of the free-port pool. Tests are handed out a file at a time, so a module's fixtures
start once; the files that change state every test shares (the shared Kafka's ACLs and delegation
tokens) form one group that runs on one worker, one file after another (`SHARED_STATE_GROUPS`).
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "scripts" / "lib"))
import free_ports as _free_ports  # noqa: E402  (the scripts' port picker, shared with the suite)

# Passwords for the users Portcullis knows. They differ from Kafka's own users' passwords on purpose:
# a client that authenticates through Portcullis proves Portcullis checked the credential itself.
PORTCULLIS_USERS = {
    "alice": "alice-through-portcullis",
    # carol exists only in Portcullis, never in Kafka.
    "carol": "carol-through-portcullis",
}
ENABLED_MECHANISMS = ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"]
KAFKA_NODE_ID = 1  # scripts/lib/kafka.sh runs a single node with node.id=1


# --------------------------------------------------------------------------------------------------
# Parallel workers

# Files that change state of the shared Kafka which other files' tests read, by group. A group runs
# its files on one worker, one after another, as the serial suite did; every other file runs beside
# them. (The differential authorization table, whose `User:*` ACLs would reach everyone, runs on a
# Kafka of its own: test_differential.py.)
SHARED_STATE_GROUPS = {
    # ACLs on the users alice, bob, carol and dave and on their User resources, and their delegation
    # tokens: each file adds, lists and removes them, and lists must show its own changes only.
    "kafka-user-acls": {"test_acl_tools.py", "test_token_differential.py", "test_delegation_tokens.py"},
    # The `delegated` policy's users (dlg-*, the OAuth clients' subjects), who act on Kafka as
    # themselves: each file grants them ACLs and counts the upstream tokens Kafka holds per owner.
    "kafka-delegated-users": {"test_delegated.py", "test_oauth_delegated.py"},
}


def xdist_group_of(filename: str) -> str:
    """The group a test file's tests run in: its shared-state group, or the file itself."""
    for group, files in SHARED_STATE_GROUPS.items():
        if filename in files:
            return group
    return filename


def _split_port_slice_among_workers() -> None:
    """Gives this xdist worker its own part of the run's free-port slice (set before any port is
    picked: at import, which comes before every fixture)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")  # "gw0", "gw1", ...
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not worker or not count:
        return
    k, n = _free_ports.slice_of(os.environ.get("FREE_PORT_SLICE", ""))
    workers = int(count)
    os.environ["FREE_PORT_SLICE"] = f"{k * workers + int(worker.removeprefix('gw'))}/{n * workers}"


_split_port_slice_among_workers()


# --------------------------------------------------------------------------------------------------
# Environment


def _need(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise pytest.UsageError(
            f"{name} is not set: run the interop suite through scripts/test.sh "
            "(or scripts/test.sh --interop-only), which starts Kafka and exports it"
        )
    return value


def target() -> str:
    t = os.environ.get("INTEROP_TARGET", "portcullis")
    if t not in ("portcullis", "kafka"):
        raise pytest.UsageError(f"INTEROP_TARGET must be portcullis or kafka, not {t!r}")
    return t


def free_ports(n: int) -> list[int]:
    """`n` distinct free ports, never handed out before in this run (scripts/lib/free_ports.py)."""
    return _free_ports.free_ports(n)


def free_port_pair() -> tuple[int, int]:
    """(listener port, broker port) with broker port - 1 usable as broker_port_base."""
    for _ in range(50):
        listener, broker = free_ports(2)
        if broker > 1024 and broker - KAFKA_NODE_ID != listener:
            return listener, broker
    raise RuntimeError("no free port pair found")


def wait_for_port(host: str, port: int, timeout: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before {host}:{port} accepted")
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"{host}:{port} did not accept connections within {timeout}s")


def host_port(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host, int(port)


# --------------------------------------------------------------------------------------------------
# Pytest hooks



@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the groups into node ids
def pytest_collection_modifyitems(config, items):
    # Every test gets its file's group (pytest-xdist's loadgroup hands out a group at a time).
    for item in items:
        item.add_marker(pytest.mark.xdist_group(xdist_group_of(item.path.name)))
    if target() != "kafka":
        return
    keep, drop = [], []
    for item in items:
        (drop if item.get_closest_marker("portcullis_only") else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_collection_finish(session):
    """A parallel run whose scheduler does not see the groups would run a group's files side by side,
    or one file's tests on several workers: refuse it, rather than let the tests flake."""
    # `loadgroup` exists only while pytest-xdist is loaded (a run with -p no:xdist has no option).
    if getattr(session.config.option, "loadgroup", False) and any("@" not in item.nodeid for item in session.items):
        raise pytest.UsageError(
            "pytest-xdist's --dist loadgroup does not see the tests' groups (their node ids carry no "
            "@group): use the pytest and pytest-xdist versions pinned in scripts/lib/venv.sh")


LOG_OFFSETS = pytest.StashKey[dict]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    # Remember where each Portcullis log ended, so a failure shows only what this test caused.
    item.stash[LOG_OFFSETS] = {p: p.log_size() for p in PortcullisProcess.started}
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        offsets = item.stash.get(LOG_OFFSETS, {})
        for proc in PortcullisProcess.started:
            text = proc.log_since(offsets.get(proc, 0), 80)
            if text:
                report.sections.append((f"portcullis[{proc.name}] log during this test", text))


# --------------------------------------------------------------------------------------------------
# TLS material


@dataclasses.dataclass
class TlsFiles:
    ca_cert: Path
    server_cert: Path
    server_key: Path


def make_tls_files(directory: Path) -> TlsFiles:
    """A throwaway CA and a server certificate for 127.0.0.1/localhost, made with the openssl CLI."""
    if shutil.which("openssl") is None:
        raise RuntimeError("openssl is required for the SASL_SSL tests")
    directory.mkdir(parents=True, exist_ok=True)

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True, timeout=60)

    run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "ca.key")
    run("req", "-x509", "-new", "-key", "ca.key", "-sha256", "-days", "2", "-subj", "/CN=portcullis-test-ca",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        "-out", "ca.pem")
    run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "server.key")
    run("req", "-new", "-key", "server.key", "-subj", "/CN=localhost", "-out", "server.csr")
    (directory / "server.ext").write_text(
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
    )
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "2", "-sha256", "-extfile", "server.ext", "-out", "server.pem")
    return TlsFiles(directory / "ca.pem", directory / "server.pem", directory / "server.key")


# --------------------------------------------------------------------------------------------------
# Portcullis processes


def toml_str(s: str) -> str:
    # JSON string escapes are valid TOML basic-string escapes for the characters used here.
    return json.dumps(s)


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return toml_str(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise TypeError(f"no TOML form for {v!r}")


class PortcullisProcess:
    """One `portcullis serve` process with its own config, data dir and log file."""

    started: list["PortcullisProcess"] = []

    def __init__(self, binary: Path, workdir: Path, name: str):
        self.binary = binary
        self.name = name
        self.workdir = workdir
        self.config = workdir / "portcullis.toml"
        self.log_path = workdir / "portcullis.log"
        self.proc: subprocess.Popen | None = None
        self.listener_port = 0
        self.broker_port_base = 0
        self.stopping = False
        self.crash_reported = False

    def write_config(self, *, upstream: dict, tls: TlsFiles | None, plugin_dir: Path,
                     kafka_like_failure_delay: bool = True) -> None:
        """`kafka_like_failure_delay` caps the failed-authentication delay at Kafka's fixed 100 ms:
        the shared gateways get the deliberate failures of many tests, all from 127.0.0.1, and the
        client tests compare with Kafka; the growing delay has its own tests (test_limits.py)."""
        self.listener_port, broker_port = free_port_pair()
        self.broker_port_base = broker_port - KAFKA_NODE_ID
        lines = [
            "[node]",
            "id = 1",
            f"data_dir = {toml_str(str(self.workdir / 'data'))}",
            "",
            "[plugins]",
            f"dir = {toml_str(str(plugin_dir))}",
            "",
            "[listener]",
            f"address = {toml_str(f'127.0.0.1:{self.listener_port}')}",
            'advertised_host = "127.0.0.1"',
            f"broker_port_base = {self.broker_port_base}",
            "sasl_mechanisms = [" + ", ".join(toml_str(m) for m in ENABLED_MECHANISMS) + "]",
            "",
        ]
        if tls is not None:
            lines += [
                "[listener.tls]",
                f"cert_file = {toml_str(str(tls.server_cert))}",
                f"key_file = {toml_str(str(tls.server_key))}",
                'client_auth = "none"',
                "",
            ]
        if kafka_like_failure_delay:
            lines += ["[limits.failed_authentication]", "max_delay_ms = 100", ""]
        lines += ["[upstream]"]
        lines += [f"{k} = {toml_value(v)}" for k, v in upstream.items()]
        lines += ["", "[forwarding]", 'policy = "passthrough"', "deny_api_keys = []", ""]
        if os.environ.get("INTEROP_STORE") == "kafka":
            # The kafka-store variant of the suite (scripts/test.sh): each node a one-node cluster.
            from cluster_support import single_node_store_sections
            lines += [single_node_store_sections(self.workdir, self.name)]
        self.config.write_text("\n".join(lines))

    def scram_add(self, user: str, password: str, mechanism: str, iterations: int | None = None) -> None:
        cmd = [str(self.binary), "scram", "add", "--config", str(self.config), "--user", user,
               "--mechanism", mechanism, "--password-stdin"]
        if iterations is not None:
            cmd[-1:-1] = ["--iterations", str(iterations)]
        # The password goes in as `echo pw | portcullis scram add ...` would send it.
        r = subprocess.run(cmd, input=password + "\n", capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            # On one line: pytest's short summary (and so a CI log) keeps only a reason's first.
            said = " | ".join(line for line in (r.stdout + r.stderr).splitlines() if line.strip())
            raise RuntimeError(f"scram add of {user} ({mechanism}) failed ({r.returncode}): {said}; "
                               f"command: {' '.join(cmd)}")

    def start(self, timeout: float = 30.0, wait: bool = True) -> None:
        """Starts the process; with `wait`, returns once its bootstrap and broker ports accept."""
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "info")
        env.setdefault("RUST_BACKTRACE", "1")
        # Keep the suite's own PORTCULLIS_* variables (PORTCULLIS_BIN, PORTCULLIS_CACHE) away from
        # the config's env overrides.
        for k in list(env):
            if k.startswith("PORTCULLIS_"):
                del env[k]
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [str(self.binary), "serve", "--config", str(self.config)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.workdir,
        )
        log.close()
        PortcullisProcess.started.append(self)
        if not wait:
            return
        try:
            wait_for_port("127.0.0.1", self.listener_port, timeout, self.proc)
            wait_for_port("127.0.0.1", self.broker_port_base + KAFKA_NODE_ID, timeout, self.proc)
        except Exception as e:
            self.stop()
            raise RuntimeError(f"portcullis[{self.name}] did not start: {e}\n{self.log_tail(80)}") from e

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def died_unexpectedly(self) -> bool:
        return (self.proc is not None and not self.stopping and not self.crash_reported
                and self.proc.poll() is not None)

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        self.stopping = True
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
        return self.proc.returncode

    def log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def log_since(self, offset: int, lines: int) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                text = f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""
        kept = text.splitlines()
        if len(kept) > lines:
            kept = [f"... {len(kept) - lines} earlier lines in {self.log_path}"] + kept[-lines:]
        return "\n".join(kept)

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.listener_port}"


@dataclasses.dataclass
class Gateway:
    """Where a client test connects: a Portcullis listener, or Kafka itself with INTEROP_TARGET=kafka."""

    name: str
    bootstrap: str
    security_protocol: str  # SASL_PLAINTEXT or SASL_SSL
    users: dict[str, str]  # user -> password, valid for every enabled mechanism
    broker_addresses: dict[int, str]  # node id -> the address clients must be given
    hidden_ports: set[int]  # Kafka ports that must never reach a client
    ca_file: Path | None = None
    process: PortcullisProcess | None = None

    @property
    def host(self) -> str:
        return host_port(self.bootstrap)[0]

    @property
    def port(self) -> int:
        return host_port(self.bootstrap)[1]

    def user(self, name: str = "alice") -> tuple[str, str]:
        return name, self.users[name]


class Launcher:
    """Starts Portcullis processes for the session and stops them all at the end."""

    def __init__(self, binary: Path, run_dir: Path, kafka: dict[str, str]):
        self.binary = binary
        self.run_dir = run_dir
        self.kafka = kafka
        self.processes: list[PortcullisProcess] = []

    def start(
        self,
        name: str,
        *,
        tls: TlsFiles | None = None,
        upstream: str = "plaintext",
        plugin_dir: Path | None = None,
        users: dict[str, str] | None = None,
    ) -> PortcullisProcess:
        workdir = self.run_dir / f"portcullis-{name}"
        workdir.mkdir(parents=True, exist_ok=False)
        if plugin_dir is None:
            plugin_dir = workdir / "plugins"  # empty: only the built-in plugins
            plugin_dir.mkdir()
        if upstream == "plaintext":
            up = {"bootstrap_servers": [self.kafka["KAFKA_BOOTSTRAP"]], "security_protocol": "PLAINTEXT"}
        elif upstream == "sasl":
            up = {
                "bootstrap_servers": [self.kafka["KAFKA_SASL_BOOTSTRAP"]],
                "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": "SCRAM-SHA-512",
                "username": self.kafka["KAFKA_ADMIN_USER"],
                "password": self.kafka["KAFKA_ADMIN_PASSWORD"],
            }
        else:
            raise ValueError(upstream)
        p = PortcullisProcess(self.binary, workdir, name)
        p.write_config(upstream=up, tls=tls, plugin_dir=plugin_dir)
        # SCRAM users are written offline, before start: `scram add` locks the node's data dir.
        for i, (user, password) in enumerate((users or PORTCULLIS_USERS).items()):
            p.scram_add(user, password, "SCRAM-SHA-512")
            # Exercise --iterations on one credential; the default on the others.
            p.scram_add(user, password, "SCRAM-SHA-256", iterations=8192 if i == 0 else None)
        p.start()
        self.processes.append(p)
        return p

    def stop_all(self) -> list[str]:
        problems = []
        for p in self.processes:
            if p.died_unexpectedly():
                problems.append(f"portcullis[{p.name}] was already dead (exit {p.proc.returncode if p.proc else '?'})")
            p.stop()
        return problems


# --------------------------------------------------------------------------------------------------
# Session fixtures


@pytest.fixture(scope="session")
def kafka_env() -> dict[str, str]:
    names = ["KAFKA_BOOTSTRAP", "KAFKA_SASL_BOOTSTRAP", "KAFKA_LIB", "KAFKA_SASL_USER",
             "KAFKA_SASL_PASSWORD", "KAFKA_ADMIN_USER", "KAFKA_ADMIN_PASSWORD"]
    return {n: _need(n) for n in names}


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory) -> Path:
    d = os.environ.get("INTEROP_RUN_DIR")
    if d:
        # A directory per parallel worker: each starts its own gateways under the same names.
        p = Path(d) / "interop" / os.environ.get("PYTEST_XDIST_WORKER", "main")
        p.mkdir(parents=True, exist_ok=True)
        return p
    return tmp_path_factory.mktemp("interop")


@pytest.fixture(scope="session")
def launcher(kafka_env, run_dir):
    """Starts extra Portcullis processes (`launcher.start(name, tls=..., upstream=..., plugin_dir=...)`)."""
    if target() != "portcullis":
        raise RuntimeError("a portcullis_only test ran with INTEROP_TARGET=kafka")
    binary = Path(_need("PORTCULLIS_BIN"))
    if not os.access(binary, os.X_OK):
        raise pytest.UsageError(f"PORTCULLIS_BIN={binary} is not an executable (build it first)")
    lau = Launcher(binary, run_dir, kafka_env)
    yield lau
    problems = lau.stop_all()
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@pytest.fixture(autouse=True)
def _portcullis_still_running(request):
    """After every test: each Portcullis started so far must still be alive (no crash, no panic exit)."""
    yield
    dead = [p for p in PortcullisProcess.started if p.died_unexpectedly()]
    for p in dead:
        p.crash_reported = True
    if dead:
        pytest.fail(
            "\n".join(f"portcullis[{p.name}] exited with {p.proc.returncode}:\n{p.log_tail(60)}" for p in dead),
            pytrace=False,
        )


def _kafka_gateway(kafka_env) -> Gateway:
    host, port = host_port(kafka_env["KAFKA_SASL_BOOTSTRAP"])
    return Gateway(
        name="kafka",
        bootstrap=kafka_env["KAFKA_SASL_BOOTSTRAP"],
        security_protocol="SASL_PLAINTEXT",
        users={kafka_env["KAFKA_SASL_USER"]: kafka_env["KAFKA_SASL_PASSWORD"],
               kafka_env["KAFKA_ADMIN_USER"]: kafka_env["KAFKA_ADMIN_PASSWORD"]},
        broker_addresses={KAFKA_NODE_ID: kafka_env["KAFKA_SASL_BOOTSTRAP"]},
        hidden_ports=set(),
    )


def _portcullis_gateway(name: str, p: PortcullisProcess, kafka_env, protocol: str, ca: Path | None) -> Gateway:
    return Gateway(
        name=name,
        bootstrap=p.bootstrap,
        security_protocol=protocol,
        users=dict(PORTCULLIS_USERS),
        broker_addresses={KAFKA_NODE_ID: f"127.0.0.1:{p.broker_port_base + KAFKA_NODE_ID}"},
        hidden_ports={host_port(kafka_env[k])[1] for k in ("KAFKA_BOOTSTRAP", "KAFKA_SASL_BOOTSTRAP")},
        ca_file=ca,
        process=p,
    )


@pytest.fixture(scope="session")
def gateway(request, kafka_env) -> Gateway:
    """The SASL_PLAINTEXT endpoint the client tests use: Portcullis (upstream PLAINTEXT) by default."""
    if target() == "kafka":
        # The users are then Kafka's own; tests that need a Portcullis-only user are portcullis_only.
        return _kafka_gateway(kafka_env)
    lau = request.getfixturevalue("launcher")
    p = lau.start("main")
    return _portcullis_gateway("portcullis", p, kafka_env, "SASL_PLAINTEXT", None)


@pytest.fixture(scope="session")
def tls_files(run_dir) -> TlsFiles:
    return make_tls_files(run_dir / "tls")


@pytest.fixture(scope="session")
def gateway_tls(launcher, kafka_env, tls_files) -> Gateway:
    """Portcullis with a SASL_SSL listener (self-signed CA), upstream PLAINTEXT."""
    p = launcher.start("tls", tls=tls_files)
    return _portcullis_gateway("portcullis-tls", p, kafka_env, "SASL_SSL", tls_files.ca_cert)


@pytest.fixture(scope="session")
def gateway_upstream_sasl(launcher, kafka_env) -> Gateway:
    """Portcullis whose own upstream connections authenticate to Kafka's SASL listener (SCRAM-SHA-512)."""
    p = launcher.start("upstream-sasl", upstream="sasl")
    return _portcullis_gateway("portcullis-upstream-sasl", p, kafka_env, "SASL_PLAINTEXT", None)


# ---- Plugins -------------------------------------------------------------------------------------
# The custom-mechanism end-to-end test (PORTCULLIS-DEMO, examples/custom-mechanism) plugs in here:
# build the cdylib, copy the .so into `plugin_dir`, then
#     p = launcher.start("plugin", plugin_dir=plugin_dir)
# The other gateways above start with an empty plugin dir (built-in plugins only).


@pytest.fixture(scope="session")
def plugin_dir(run_dir) -> Path:
    d = run_dir / "plugins"
    d.mkdir(exist_ok=True)
    return d


# --------------------------------------------------------------------------------------------------
# Client tools


class JavaTool:
    """Compiles tests/interop/java/*.java once (cached by source hash) and runs it on Kafka's jars."""

    def __init__(self, kafka_lib: Path, cache: Path):
        self.kafka_lib = kafka_lib
        sources = sorted((HERE / "java").glob("*.java"))
        h = hashlib.sha256()
        for s in sources:
            h.update(s.name.encode() + b"\0" + s.read_bytes())
        h.update(str(sorted(p.name for p in kafka_lib.glob("kafka-clients-*.jar"))).encode())
        self.classes = cache / "interop-java" / h.hexdigest()[:16]
        if not (self.classes / ".complete").exists():
            # Only a run killed by an older version of this code leaves a directory without the mark.
            shutil.rmtree(self.classes, ignore_errors=True)
            tmp = self.classes.with_name(self.classes.name + f".tmp{os.getpid()}")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            subprocess.run(
                ["javac", "-nowarn", "-cp", f"{kafka_lib}/*", "-d", str(tmp), *map(str, sources)],
                check=True, capture_output=True, text=True, timeout=300,
            )
            (tmp / ".complete").touch()
            # The complete directory appears in one rename. A parallel worker that compiled the same
            # sources first wins, and its classes (maybe in use already) are kept, never replaced.
            try:
                tmp.rename(self.classes)
            except OSError:
                if not (self.classes / ".complete").exists():
                    raise
                shutil.rmtree(tmp, ignore_errors=True)

    def run(self, main: str, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["java", "-Xmx256m", "-cp", f"{self.classes}:{self.kafka_lib}/*", main, *args],
            capture_output=True, text=True, timeout=timeout,
        )


@pytest.fixture(scope="session")
def java(kafka_env) -> JavaTool:
    if shutil.which("javac") is None:
        raise RuntimeError("javac (JDK 17) is required")
    cache = Path(os.environ.get("PORTCULLIS_CACHE", Path.home() / ".cache" / "portcullis"))
    return JavaTool(Path(kafka_env["KAFKA_LIB"]), cache)


class Kcat:
    """kcat, with either the system librdkafka or the newer one bundled in the confluent-kafka wheel.

    Debian 12's librdkafka 2.0.2 has a SCRAM bug (the client nonce is repeated in client-final, fixed
    in librdkafka 2.6.1) that Kafka 4.x rejects; `modern=True` runs the same kcat binary on the
    wheel's librdkafka (same C ABI) so SCRAM works.
    """

    def __init__(self, run_dir: Path):
        self.binary = shutil.which("kcat")
        if self.binary is None:
            raise RuntimeError("kcat is required (scripts/lib/common.sh installs it)")
        import confluent_kafka  # noqa: PLC0415 - only needed to find the bundled library

        libs = glob.glob(str(Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs" / "librdkafka*.so*"))
        if not libs:
            raise RuntimeError("the confluent-kafka wheel has no bundled librdkafka")
        self.modern_lib_dir = run_dir / "librdkafka-modern"
        self.modern_lib_dir.mkdir(exist_ok=True)
        link = self.modern_lib_dir / "librdkafka.so.1"
        if not link.exists():
            link.symlink_to(libs[0])

    def librdkafka_version(self, modern: bool) -> str:
        out = self.run(["-V"], modern=modern).stdout
        marker = "librdkafka "
        return out[out.index(marker) + len(marker):].split()[0]

    def run(self, args: list[str], *, modern: bool = False, input: str | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess:
        env = dict(os.environ)
        if modern:
            env["LD_LIBRARY_PATH"] = str(self.modern_lib_dir)
        else:
            env.pop("LD_LIBRARY_PATH", None)
        return subprocess.run([self.binary, *args], input=input, capture_output=True, text=True,
                              timeout=timeout, env=env)


@pytest.fixture(scope="session")
def kcat(run_dir) -> Kcat:
    return Kcat(run_dir)


@pytest.fixture
def unique():
    """A unique name for topics and groups, so tests sharing one Kafka never collide."""
    counter = {"n": 0}

    def make(prefix: str) -> str:
        counter["n"] += 1
        return f"{prefix}-{os.getpid()}-{time.time_ns() % 10**10}-{counter['n']}"

    return make


def pytest_report_header(config):
    return [
        f"interop target: {target()}",
        f"kafka: {os.environ.get('KAFKA_BOOTSTRAP')} (SASL {os.environ.get('KAFKA_SASL_BOOTSTRAP')})",
        f"portcullis: {os.environ.get('PORTCULLIS_BIN')}",
        f"python: {sys.version.split()[0]}",
    ]
