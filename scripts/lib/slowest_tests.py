"""Prints the slowest tests of one or more pytest JUnit XML reports (scripts/test.sh's summary).

Usage: slowest_tests.py COUNT REPORT.xml...   (missing reports are skipped)

A test's time is pytest's: its setup, call and teardown together, so a module-scoped fixture's
start-up counts for the first test that uses it.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def without_group(name: str) -> str:
    """A parallel run's names end in pytest-xdist's `@group` (tests/interop/conftest.py), after any
    parameters (which may hold an `@` of their own)."""
    at = name.rfind("@")
    return name[:at] if at > name.rfind("]") else name


def main() -> int:
    count = int(sys.argv[1])
    rows: list[tuple[float, str]] = []
    for report in map(Path, sys.argv[2:]):
        if not report.is_file():
            continue
        for case in ET.parse(report).iter("testcase"):
            name = f"{case.get('classname', '')}::{without_group(case.get('name', ''))}"
            rows.append((float(case.get("time") or 0), name))
    for seconds, name in sorted(rows, reverse=True)[:count]:
        print(f"{seconds:8.1f}s  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
