"""The differential authorization table (tests/differential): the same scenarios, with the same Java
client code, against Kafka's StandardAuthorizer and through Portcullis' authorizer.

One run of tests/differential/run.sh per session executes the table against the SASL listener of a
Kafka of its own (run.sh starts and stops it) and (unless INTEROP_TARGET=kafka) through a Portcullis
started here with `[authorizer] plugin = "acl"`, whose ACLs are applied through Portcullis' own
CreateAcls/DeleteAcls. The table's ACLs include `User:*` ones (a DENY of ALL on every topic among
them): on the suite's shared Kafka they would reach every test acting there as a non-super user at
the same time (the parallel workers of scripts/test.sh). Then:
  - Kafka's live outcomes must equal the ones recorded from Kafka in tests/differential/expected.yaml;
  - Portcullis' outcome must equal Kafka's for every scenario.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import PortcullisProcess, _need, target

REPO = Path(__file__).resolve().parents[2]
RUN_SH = REPO / "tests" / "differential" / "run.sh"

# Portcullis' own users for the table. Passwords differ from Kafka's: Portcullis authenticates them.
PORTCULLIS_ACL_USERS = {
    "admin": "admin-through-portcullis",
    "bob": "bob-through-portcullis",
    "carol": "carol-through-portcullis",
    "dave": "dave-through-portcullis",
}

AUTHORIZER_SECTION = """
[authorizer]
plugin = "acl"
super_users = ["User:admin"]
allow_everyone_if_no_acl_found = false
"""


@dataclasses.dataclass
class DifferentialRun:
    report: dict
    output: str
    returncode: int
    portcullis_error: str | None
    portcullis_hint: str = ""

    def outcomes(self, name: str) -> dict[str, str]:
        return {s["id"]: s.get(name) for s in self.report["scenarios"]}


def start_portcullis_with_authorizer(run_dir: Path, name: str = "differential") -> PortcullisProcess:
    """A Portcullis with `[authorizer] plugin = "acl"` and the users of PORTCULLIS_ACL_USERS."""
    binary = Path(_need("PORTCULLIS_BIN"))
    workdir = run_dir / f"portcullis-{name}"
    workdir.mkdir(parents=True, exist_ok=False)
    plugins = workdir / "plugins"
    plugins.mkdir()
    p = PortcullisProcess(binary, workdir, name)
    p.hint = ""
    # Upstream PLAINTEXT: Portcullis acts on Kafka as User:ANONYMOUS, a super user there, so only
    # Portcullis' own authorizer decides.
    p.write_config(upstream={"bootstrap_servers": [_need("KAFKA_BOOTSTRAP")], "security_protocol": "PLAINTEXT"},
                   tls=None, plugin_dir=plugins)
    p.config.write_text(p.config.read_text() + AUTHORIZER_SECTION)
    check = subprocess.run([str(binary), "check-config", "--config", str(p.config)], capture_output=True, text=True,
                           timeout=60)
    if check.returncode != 0:
        raise RuntimeError(f"portcullis check-config refuses the [authorizer] section:\n{check.stdout}{check.stderr}")
    if "authorizer" not in check.stdout.lower():
        # A build that ignores [authorizer] runs without authorization: every denial then differs.
        p.hint = f"check-config does not mention the authorizer; this build may ignore [authorizer]:\n{check.stdout}"
    for user, password in PORTCULLIS_ACL_USERS.items():
        p.scram_add(user, password, "SCRAM-SHA-512")
    p.start()
    return p


@pytest.fixture(scope="session")
def differential(kafka_env, run_dir) -> DifferentialRun:
    out_dir = run_dir / "differential"
    out_dir.mkdir(exist_ok=True)
    report_path = out_dir / "report.json"
    args = [str(RUN_SH), "--report", str(report_path)]
    portcullis = None
    portcullis_error = None
    hint = ""
    if target() == "portcullis":
        try:
            portcullis = start_portcullis_with_authorizer(run_dir)
            hint = portcullis.hint
            users = out_dir / "portcullis-users.properties"
            users.write_text("".join(f"{u}={pw}\n" for u, pw in PORTCULLIS_ACL_USERS.items()))
            args += ["--portcullis", f"{portcullis.bootstrap}@{users}"]
        except Exception as e:  # reported by the Portcullis test; the Kafka half still runs
            portcullis_error = str(e)
    # Without the shared Kafka's address run.sh starts a Kafka of its own for the table (see above).
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_SASL_BOOTSTRAP"}
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=900, env=env)
    finally:
        if portcullis is not None:
            portcullis.stop()
    (out_dir / "output.txt").write_text(r.stdout + r.stderr)
    if r.returncode not in (0, 1) or not report_path.exists():
        pytest.fail(f"the differential runner failed ({r.returncode}):\n{r.stdout[-6000:]}\n{r.stderr[-4000:]}",
                    pytrace=False)
    return DifferentialRun(json.loads(report_path.read_text()), r.stdout, r.returncode, portcullis_error, hint)


def mismatch_table(rows: list[tuple[str, str, str]], left: str, right: str) -> str:
    width = max(len(r[0]) for r in rows)
    lines = [f"{'scenario':<{width}} | {left} | {right}"]
    lines += [f"{sid:<{width}} | {a} | {b}" for sid, a, b in rows]
    return "\n".join(lines)


def test_kafka_outcomes_equal_the_recorded_ones(differential):
    """Kafka's live answers are the ones recorded in expected.yaml: the table is deterministic and the
    recording is current (re-record with tests/differential/run.sh --record after a Kafka upgrade)."""
    scenarios = differential.report["scenarios"]
    assert len(scenarios) >= 60
    rows = [(s["id"], str(s["recorded"]), s["kafka"]) for s in scenarios if s["recorded"] != s["kafka"]]
    assert not rows, f"{len(rows)} of {len(scenarios)} differ from the recording:\n" + mismatch_table(
        rows, "recorded", "kafka now")
    # The table must exercise both sides of authorization, not only one.
    outcomes = [s["kafka"] for s in scenarios]
    assert sum(o.startswith("OK") for o in outcomes) >= 20
    assert sum("AUTHORIZATION_FAILED" in o for o in outcomes) >= 20


@pytest.mark.portcullis_only
def test_portcullis_authorizes_every_scenario_as_kafka_does(differential):
    """Portcullis (ACLs created through its own ACL APIs, upstream as a Kafka super user) gives the
    same outcome as Kafka for every scenario of the table."""
    if differential.portcullis_error is not None:
        pytest.fail(f"Portcullis with [authorizer] did not start, so no scenario ran through it:\n"
                    f"{differential.portcullis_error}", pytrace=False)
    kafka = differential.outcomes("kafka")
    portcullis = differential.outcomes("portcullis")
    rows = [(sid, kafka[sid], portcullis.get(sid)) for sid in kafka if kafka[sid] != portcullis.get(sid)]
    assert not rows, (f"{len(rows)} of {len(kafka)} scenarios differ between Kafka and Portcullis:\n"
                      + mismatch_table(rows, "kafka", "portcullis")
                      + (f"\n\n{differential.portcullis_hint}" if differential.portcullis_hint else ""))
