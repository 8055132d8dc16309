"""Removes the build outputs of this workspace's own crates (and incremental state) from a Cargo
target directory, keeping the dependencies'. Used by .ci/run on its cache: every fresh clone
builds the workspace's crates again under a path of its own, so their outputs pile up there while
the dependencies' are reused.

    python3 scripts/lib/prune_target.py TARGET_DIR
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path


def workspace_names() -> set[str]:
    meta = json.loads(subprocess.run(["cargo", "metadata", "--no-deps", "--format-version", "1"],
                                     capture_output=True, text=True, check=True).stdout)
    names: set[str] = set()
    for package in meta["packages"]:
        names.add(package["name"])
        names.update(t["name"] for t in package["targets"] if t["name"] != "build-script-build")
    # Files use the crate name (`-` as `_`), fingerprint and build directories the package name.
    return names | {n.replace("-", "_") for n in names}


def main(target: Path) -> None:
    names = workspace_names()
    # `name-<16 hex digits>` with an optional `lib` prefix and extension: never a dependency whose
    # name merely starts the same way (`kafka` is not `kafka_protocol`).
    own = re.compile(r"^(?:lib)?(" + "|".join(map(re.escape, sorted(names))) + r")-[0-9a-f]{16}(?:\..*)?$")
    removed = 0
    for profile in (target / "debug", target / "release"):
        shutil.rmtree(profile / "incremental", ignore_errors=True)
        for sub in ("deps", ".fingerprint", "build"):
            d = profile / sub
            if not d.is_dir():
                continue
            for entry in d.iterdir():
                if own.match(entry.name):
                    if entry.is_dir():
                        shutil.rmtree(entry, ignore_errors=True)
                    else:
                        entry.unlink(missing_ok=True)
                    removed += 1
    print(f"pruned {removed} outputs of the workspace's crates from {target}", file=sys.stderr)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
