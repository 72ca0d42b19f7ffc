"""Validation of the ``retentiond.metrics.*`` keys, kept beside the server that uses them.

The config loader calls in here (``parse_listen`` for one value, ``cross_checks`` for the keys
that only make sense together) so that a bad address, a missing certificate or half a TLS
setup is refused when the file is loaded — by ``check-config``, at start and on reload —
instead of surfacing later as a /metrics endpoint that silently is not there.

Nothing here imports prometheus_client: the loader runs for every CLI command.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from pathlib import Path

LISTEN_KEY = "retentiond.metrics.listen"
CERT_KEY = "retentiond.metrics.tlsCertFile"
KEY_KEY = "retentiond.metrics.tlsKeyFile"
USER_KEY = "retentiond.metrics.basicAuthUsername"
PASSWORD_KEY = "retentiond.metrics.basicAuthPasswordFile"

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*")


def parse_listen(text: str) -> tuple[str, int]:
    """``host:port`` or ``[ipv6]:port`` → (host, port); raises ValueError saying what is wrong.

    The host must be explicit: an empty host would mean every interface, which nobody should
    get by leaving a word out (write ``0.0.0.0`` or ``[::]`` to mean it). Port 0 asks the
    kernel for a free port (the bound address is logged); tests use it.
    """
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise ValueError("must be host:port, with an IPv6 address in brackets: [::1]:9465")
        port_text = rest[1:]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{host!r} in brackets is not an IPv6 address") from None
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise ValueError("must be host:port, e.g. 127.0.0.1:9465 (the port is missing)")
        if not host:
            raise ValueError(
                "the host is missing; write 127.0.0.1 for loopback only, or 0.0.0.0 to listen "
                "on every interface"
            )
        if ":" in host:
            raise ValueError("an IPv6 address must be written in brackets: [::1]:9465")
        if not _HOSTNAME.fullmatch(host):
            raise ValueError(f"{host!r} is not an IP address or a host name")
    if not port_text.isascii() or not port_text.isdigit():
        raise ValueError(f"port {port_text!r} is not a number")
    port = int(port_text)
    if port > 65535:
        raise ValueError(f"port {port} is above 65535")
    return host, port


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_password(path: Path) -> str:
    """The password in ``path``: the whole file minus one trailing newline (as ``echo`` or an
    editor leaves it). Raises OSError or ValueError (empty, not UTF-8)."""
    data = Path(path).read_bytes()
    text = data.decode("utf-8")
    if text.endswith("\r\n"):
        text = text[:-2]
    elif text.endswith("\n"):
        text = text[:-1]
    if not text:
        raise ValueError("the password file is empty")
    return text


def file_problem(path: Path) -> str | None:
    """None if ``path`` is a regular file we can read; otherwise why not (the schema's check
    of a file key)."""
    if not path.exists():
        return "file does not exist"
    if not path.is_file():
        return "is not a regular file"
    if not os.access(path, os.R_OK):
        return "file is not readable by this user"
    return None


def _half(
    values: Mapping[str, object], a: str, b: str, what: str
) -> tuple[str, object, str] | None:
    """A refusal if exactly one of the keys ``a``, ``b`` is set. A key missing from ``values``
    was refused already (its own message says why): no second message about the pair."""
    if a not in values or b not in values or (values[a] is None) == (values[b] is None):
        return None
    present, missing = (a, b) if values[a] is not None else (b, a)
    message = f"{what} is half configured: {missing} is not set; set both or neither"
    return present, str(values[present]), message


def cross_checks(values: Mapping[str, object]) -> list[tuple[str, object, str]]:
    """Checks that need several metrics keys; (key to blame, its value, message) each.

    Messages never contain the password: only the file's path is ever shown.
    """
    found = [
        half
        for half in (
            _half(values, CERT_KEY, KEY_KEY, "TLS"),
            _half(values, USER_KEY, PASSWORD_KEY, "basic auth"),
        )
        if half is not None
    ]
    cert, key = values.get(CERT_KEY), values.get(KEY_KEY)
    if isinstance(cert, Path) and isinstance(key, Path):
        import ssl  # only with a certificate configured (start-up time of every command)

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            context.load_cert_chain(cert, key)
        except (ssl.SSLError, OSError) as exc:
            reason = getattr(exc, "reason", None) or exc.strerror or str(exc)
            found.append((CERT_KEY, str(cert), f"cannot use this certificate with {key}: {reason}"))
    user, password = values.get(USER_KEY), values.get(PASSWORD_KEY)
    if isinstance(user, str) and ":" in user:
        found.append((USER_KEY, user, "must not contain ':' (HTTP basic auth cannot carry it)"))
    if isinstance(password, Path):
        try:
            read_password(password)
        except UnicodeDecodeError:
            found.append((PASSWORD_KEY, str(password), "the password file is not UTF-8 text"))
        except (OSError, ValueError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            found.append((PASSWORD_KEY, str(password), why))
    return found
