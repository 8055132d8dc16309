"""A Kafka broker of a test's own, which the test may kill and restart (the suite's shared broker
must stay up for every other test). Started by scripts/lib/kafka.sh like the suite's broker, on its
own free ports and run directory.

    k = OwnKafka(run_dir / "kafka-faults"); k.start()
    k.kill()        # SIGKILL: the kernel closes its sockets at once
    k.relaunch()    # the same broker again: same ports, same data (scripts/lib/kafka.sh kafka_launch)
    k.stop()        # SIGTERM, SIGKILL after 30 s
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KAFKA_SH = REPO / "scripts" / "lib" / "kafka.sh"


class OwnKafka:
    def __init__(self, run_dir: Path, properties: dict[str, str] | None = None):
        self.run_dir = run_dir
        # Broker settings of this test's own (KAFKA_EXTRA_PROPERTIES of scripts/lib/kafka.sh).
        self.properties = properties or {}
        self.env: dict[str, str] = {}
        self.pid: int | None = None

    def _bash(self, script: str, timeout: float = 180) -> str:
        # The JVM is started in the background by kafka.sh and outlives this shell.
        r = subprocess.run(["bash", "-c", f"set -euo pipefail; source {shlex.quote(str(KAFKA_SH))}; {script}"],
                           capture_output=True, text=True, timeout=timeout,
                           env={**os.environ, "KAFKA_REAUTH_MS": "0",
                                "KAFKA_EXTRA_PROPERTIES": "\n".join(f"{k}={v}" for k, v in self.properties.items())})
        if r.returncode != 0:
            raise RuntimeError(f"kafka.sh failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
        return r.stdout

    def start(self) -> None:
        env_file = self.run_dir / "env"
        self._bash(f"kafka_start {shlex.quote(str(self.run_dir))}; kafka_env_file {shlex.quote(str(env_file))}")
        for line in env_file.read_text().splitlines():
            name, _, value = line.removeprefix("export ").partition("=")
            self.env[name] = subprocess.run(["bash", "-c", f"printf %s {value}"], capture_output=True,
                                            text=True, check=True).stdout
        self.pid = int(self.env["KAFKA_PID"])

    @property
    def bootstrap(self) -> str:
        return self.env["KAFKA_BOOTSTRAP"]

    def alive(self) -> bool:
        if self.pid is None:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        # A zombie (not reaped: the JVM is not our child) counts as gone.
        try:
            state = Path(f"/proc/{self.pid}/stat").read_text().split(")")[-1].split()[0]
        except FileNotFoundError:
            return False
        return state != "Z"

    def _wait_gone(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                return True
            time.sleep(0.05)
        return False

    def kill(self) -> float:
        """SIGKILL; returns the monotonic time at which the process was seen gone."""
        assert self.pid is not None
        os.kill(self.pid, signal.SIGKILL)
        if not self._wait_gone(30):
            raise RuntimeError(f"Kafka {self.pid} survived SIGKILL")
        return time.monotonic()

    def relaunch(self) -> None:
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items() if k != "KAFKA_PID")
        out = self._bash(f"export {exports}; kafka_launch >&2; echo $KAFKA_PID")
        self.pid = int(out.strip().splitlines()[-1])
        self.env["KAFKA_PID"] = str(self.pid)

    def stop(self) -> None:
        if self.pid is None or not self.alive():
            return
        os.kill(self.pid, signal.SIGTERM)
        if not self._wait_gone(30):
            os.kill(self.pid, signal.SIGKILL)
            self._wait_gone(30)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join((self.run_dir / "kafka.log").read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"
