"""What every refusal in the hostile-input corpus (tests/test_hostile_*.py) must look like.

A bad input is refused with status 2 and one line that names the input (item, file, flag or variable) and the
problem; never a traceback, never a secret. The corpus files feed real commands (`capjudge ...`, lmms-eval
runs) with broken and malicious inputs and pass what they printed here.
"""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path
from typing import Iterable


def encoded_forms(secret: str) -> set[str]:
    """The ways a credential can show up once a client has sent it: as given, as HTTP Basic auth carries a
    `user:password` pair, percent-encoded as a URL carries it, and as hex bytes in either case."""
    from urllib.parse import quote

    raw = secret.encode()
    forms = {secret, quote(secret, safe=""), base64.b64encode(raw).decode(), raw.hex(), raw.hex().upper()}
    return {form for form in forms if form}


def assert_no_secret(texts: Iterable[str], secrets: Iterable[str], where: str = "output") -> None:
    for text in texts:
        for secret in secrets:
            for form in encoded_forms(secret):
                assert form not in text, f"a credential ({form[:4]}...) reached the {where}"


def assert_no_secret_on_disk(folder: Path, secrets: Iterable[str]) -> None:
    """No file under `folder` (samples, results, caches, logs) holds a credential in any form."""
    secrets = list(secrets)
    for path in folder.rglob("*"):
        if path.is_file():
            assert_no_secret([path.read_bytes().decode("utf-8", "replace")], secrets, where=str(path))


def refusal_line(done: subprocess.CompletedProcess[str], *wanted: str, secrets: Iterable[str] = (),
                 status: int = 2) -> str:
    """The one line a refused command printed: status 2 (or `status`), no traceback, no secret in any form on
    stdout or stderr, and one error line holding every `wanted` fragment. Returns that line."""
    output = (done.stdout or "") + (done.stderr or "")
    assert done.returncode == status, f"exit {done.returncode}, wanted {status}:\n{output[-3000:]}"
    assert "Traceback" not in output, output[-3000:]
    assert_no_secret([output], secrets)
    lines = [line for line in (done.stderr or "").splitlines() if all(part in line for part in wanted)]
    assert len(lines) == 1, f"wanted one line with {wanted!r}, got {lines!r} in:\n{done.stderr[-3000:]}"
    return lines[0]
