"""Self-signed certificates made by the openssl CLI, for the /metrics server's TLS."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.conftest import need


def make_cert(directory: Path, name: str = "server") -> tuple[Path, Path]:
    need(shutil.which("openssl") is not None, "openssl is needed to make a test certificate")
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            f"/CN={name}",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key
