"""`pip install ./clients/python` works offline: pip builds the wheel with the
in-tree backend (no build requirement to fetch from an index) and the
installed package imports from where pip put it."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _pip(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, env=env)


def test_pip_install_offline(tmp_path: Path) -> None:
    target = tmp_path / "site"
    p = _pip("install", "--no-index", "--target", str(target), str(ROOT))
    assert p.returncode == 0, p.stdout.decode() + p.stderr.decode()
    probe = subprocess.run([sys.executable, "-c", "import custody_client, custody_client.client as c; "
                            "print(custody_client.__file__); print(c.Client('/x').socket_path)"],
                           capture_output=True, cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(target)))
    assert probe.returncode == 0, probe.stderr.decode()
    where, sock = probe.stdout.decode().split()
    assert Path(where).is_relative_to(target) and sock == "/x"


def test_wheel_holds_the_package_and_its_record(tmp_path: Path) -> None:
    p = _pip("wheel", "--no-index", "--no-deps", "-w", str(tmp_path), str(ROOT))
    assert p.returncode == 0, p.stdout.decode() + p.stderr.decode()
    (whl,) = tmp_path.glob("custody_client-*-py3-none-any.whl")
    with zipfile.ZipFile(whl) as zf:
        names = set(zf.namelist())
        record = zf.read(next(n for n in names if n.endswith(".dist-info/RECORD"))).decode()
    for mod in ("__init__", "client", "errors", "events", "types", "_wire"):
        assert f"custody_client/{mod}.py" in names
    assert "custody_client/py.typed" in names
    # Every file but RECORD itself is in RECORD with its digest.
    listed = {line.split(",")[0] for line in record.splitlines() if line}
    assert listed == names, names ^ listed
