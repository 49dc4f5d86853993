"""`make test` on a fresh machine: missing Debian packages are installed when make runs as root
(or with sudo that needs no password), saying what it does; otherwise the one command to run is
printed and make stops. Run through `make tools-check` with a PATH where the tools are missing
and `id`, `sudo` and `apt-get` are stand-ins that record what they were asked."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HAS_POSTGRES = bool(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
MISSING = ["prometheus", "wrk", *([] if HAS_POSTGRES else ["postgresql"]), "chromium",
           "default-jre-headless"]


def _fake_bin(tmp_path: Path, uid: int, sudo_ok: bool) -> tuple[Path, Path]:
    """A PATH of make, the shell's helpers and stand-ins; returns it and the call log."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    for tool in ("make", "sh", "ls", "env"):
        found = shutil.which(tool)
        assert found is not None, tool
        (bin_dir / tool).symlink_to(found)
    scripts = {
        "id": f'[ "$1" = -u ] && echo {uid} || echo someone\n',
        "apt-get": f'echo "apt-get $*" >> {log}\n',
        "sudo": (f'[ "$1" = -n ] && exit {0 if sudo_ok else 1}\n'
                 f'echo "sudo $1" >> {log}\n"$@"\n'),
    }
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(0o755)
    return bin_dir, log


def _tools_check(bin_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["make", "-s", "tools-check"], cwd=ROOT, capture_output=True, text=True,
                          env={"PATH": str(bin_dir), "HOME": os.environ.get("HOME", "/")},
                          timeout=60, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("as_root", [True, False])
def test_missing_debian_packages_are_installed_as_root_or_with_sudo(
    tmp_path: Path, as_root: bool,
) -> None:
    bin_dir, log = _fake_bin(tmp_path, uid=0 if as_root else 1000, sudo_ok=not as_root)
    done = _tools_check(bin_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    calls = log.read_text().splitlines()
    apt = [c for c in calls if c.startswith("apt-get")]
    assert apt == ["apt-get update -q", f"apt-get install -y -q {' '.join(MISSING)}"], calls
    assert ("sudo env" in calls) == (not as_root)
    assert f"installing the Debian packages it needs, missing here: {' '.join(MISSING)}" in \
        done.stdout


def test_without_root_or_sudo_the_one_command_is_printed(tmp_path: Path) -> None:
    bin_dir, log = _fake_bin(tmp_path, uid=1000, sudo_ok=False)
    done = _tools_check(bin_dir)
    assert done.returncode != 0 and not log.exists()
    [line] = [x for x in done.stdout.splitlines() if x.strip()]
    assert line.endswith(f"apt-get update && apt-get install -y {' '.join(MISSING)}"), line
