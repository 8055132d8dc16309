"""Reads Portcullis' security counters from its admin endpoint (`[telemetry] prometheus_address`,
`GET /metrics`, Prometheus text format), under the names the old JSON snapshot used, so that a
test can compare them before and after what it did."""

from __future__ import annotations

import re
import urllib.request
from dataclasses import dataclass

# counter name -> (Prometheus series, label subset it must match)
COUNTERS = {
    "successful_authentication": ("portcullis_authentications_total", {"outcome": "success", "reauthentication": "false"}),
    "failed_authentication": ("portcullis_authentications_total", {"outcome": "failure", "reauthentication": "false"}),
    "successful_reauthentication": ("portcullis_authentications_total", {"outcome": "success", "reauthentication": "true"}),
    "failed_reauthentication": ("portcullis_authentications_total", {"outcome": "failure", "reauthentication": "true"}),
    "expired_connections_killed": ("portcullis_sessions_closed_total", {"reason": "expired"}),
    "revoked_connections_closed": ("portcullis_sessions_closed_total", {"reason": "revoked"}),
}

_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class MetricsEndpoint:
    """The admin endpoint of one Portcullis."""
    address: str  # host:port

    @property
    def url(self) -> str:
        return f"http://{self.address}/metrics"


def scrape(endpoint: MetricsEndpoint, timeout: float = 5.0) -> list[tuple[str, dict[str, str], float]]:
    """Every sample: (series name, labels, value)."""
    with urllib.request.urlopen(endpoint.url, timeout=timeout) as r:
        if r.status != 200:
            raise AssertionError(f"{endpoint.url} answered {r.status}")
        text = r.read().decode()
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            raise AssertionError(f"unparsable Prometheus line from {endpoint.url}: {line!r}")
        samples.append((m.group(1), dict(_LABEL.findall(m.group(2) or "")), float(m.group(3))))
    return samples


def total(samples, series: str, **labels: str) -> float:
    """The sum of `series` over the samples whose labels include `labels`."""
    return sum(v for name, ls, v in samples
               if name == series and all(ls.get(k) == want for k, want in labels.items()))


def security_counters(endpoint: MetricsEndpoint) -> dict[str, int]:
    """The six security counters (0 for a series not yet created)."""
    samples = scrape(endpoint)
    return {name: int(total(samples, series, **labels)) for name, (series, labels) in COUNTERS.items()}
