"""An OpenID provider of a test module's own, started by scripts/lib/oidc.sh like the run's shared
one, on its own free ports and run directory.

For tests that change the provider itself (rotate its signing keys, take its key set down): on the
run's shared provider that would reach every other test validating tokens at the same time, and
Kafka's OAUTH listener, which holds the shared provider's keys.

    own = OwnOidc(run_dir / "oidc-keys"); own.start()
    own.oidc        # an oauth_support.Oidc for it (URLs, clients, admin API)
    own.stop()      # SIGTERM, SIGKILL after a grace period
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

from oauth_support import Oidc

REPO = Path(__file__).resolve().parents[2]
OIDC_SH = REPO / "scripts" / "lib" / "oidc.sh"


class OwnOidc:
    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self.env: dict[str, str] = {}
        self.pid: int | None = None

    def start(self) -> Oidc:
        env_file = self.run_dir / "env"
        script = (f"set -euo pipefail; source {shlex.quote(str(OIDC_SH))}; "
                  f"oidc_start {shlex.quote(str(self.run_dir))}; oidc_env_file {shlex.quote(str(env_file))}")
        # The provider is started in the background by oidc.sh and outlives this shell (its output
        # goes to its log file, not to this pipe).
        r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120,
                           env=dict(os.environ))
        if r.returncode != 0:
            raise RuntimeError(f"oidc.sh failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
        for line in env_file.read_text().splitlines():
            name, _, value = line.removeprefix("export ").partition("=")
            # %q-quoted by oidc_env_file: let bash undo the quoting.
            self.env[name] = subprocess.run(["bash", "-c", f"printf %s {value}"], capture_output=True,
                                            text=True, check=True).stdout
        self.pid = int(self.env["OIDC_PID"])
        return self.oidc

    @property
    def oidc(self) -> Oidc:
        return Oidc(self.env)

    def stop(self) -> None:
        if self.pid is None:
            return
        try:
            os.kill(self.pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                os.kill(self.pid, 0)
                time.sleep(0.05)
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.pid = None
