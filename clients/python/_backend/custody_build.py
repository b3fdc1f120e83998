"""A PEP 517 build backend for this package, standard library only.

These machines reach no Python package index, and pip builds a package in
an isolated environment into which it installs the backend's requirements
from an index: with setuptools as the backend, a plain
`pip install ./clients/python` fails offline. This backend needs nothing,
so it does not. It builds a pure-Python wheel of custody_client (and the
sdist, and an editable install as a .pth file).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import tarfile
import tomllib
import zipfile
from typing import Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "custody_client"


def _project() -> Dict:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def _dist() -> Tuple[str, str]:
    p = _project()
    return p["name"].replace("-", "_"), p["version"]


def _metadata() -> bytes:
    p = _project()
    lines = ["Metadata-Version: 2.1", f"Name: {p['name']}", f"Version: {p['version']}", f"Summary: {p['description']}"]
    if "requires-python" in p:
        lines.append(f"Requires-Python: {p['requires-python']}")
    readme = p.get("readme")
    body = ""
    if readme:
        lines.append("Description-Content-Type: text/markdown")
        with open(os.path.join(ROOT, readme), encoding="utf-8") as f:
            body = f.read()
    return ("\n".join(lines) + "\n\n" + body).encode("utf-8")


def _package_files() -> List[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, PACKAGE)):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(".py") or name == "py.typed":
                out.append(os.path.relpath(os.path.join(dirpath, name), ROOT))
    return out


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")
    return f"{path},sha256={digest},{len(data)}"


def _wheel(wheel_directory: str, files: Dict[str, bytes]) -> str:
    name, version = _dist()
    info = f"{name}-{version}.dist-info"
    files = dict(files)
    files[f"{info}/METADATA"] = _metadata()
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: custody_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files[f"{info}/top_level.txt"] = (PACKAGE + "\n").encode()
    record = [_record_line(p, d) for p, d in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    filename = f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED) as zf:
        for path, data in files.items():
            zi = zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0))
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(zi, data)
    return filename


def get_requires_for_build_wheel(config_settings: Optional[Dict] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[Dict] = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Optional[Dict] = None) -> List[str]:
    return []


def build_wheel(wheel_directory: str, config_settings: Optional[Dict] = None,
                metadata_directory: Optional[str] = None) -> str:
    files = {}
    for rel in _package_files():
        with open(os.path.join(ROOT, rel), "rb") as f:
            files[rel.replace(os.sep, "/")] = f.read()
    return _wheel(wheel_directory, files)


def build_editable(wheel_directory: str, config_settings: Optional[Dict] = None,
                   metadata_directory: Optional[str] = None) -> str:
    name, _ = _dist()
    return _wheel(wheel_directory, {f"{name}.pth": (ROOT + "\n").encode()})


def build_sdist(sdist_directory: str, config_settings: Optional[Dict] = None) -> str:
    name, version = _dist()
    base = f"{name}-{version}"
    filename = base + ".tar.gz"
    rels = ["pyproject.toml", "README.md", os.path.join("_backend", "custody_build.py")] + _package_files()
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz", format=tarfile.PAX_FORMAT) as tf:
        for rel in rels:
            tf.add(os.path.join(ROOT, rel), arcname=f"{base}/{rel}", recursive=False)
        pkg_info = _metadata()
        ti = tarfile.TarInfo(f"{base}/PKG-INFO")
        ti.size = len(pkg_info)
        ti.mode = 0o644
        tf.addfile(ti, io.BytesIO(pkg_info))
    return filename
