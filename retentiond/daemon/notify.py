"""sd_notify(3), written by hand: one datagram per message to ``$NOTIFY_SOCKET``.

The protocol is a few ``KEY=value`` lines in a single datagram, so a dependency (or libsystemd)
buys nothing; writing it here also lets the end-to-end test bind a plain datagram socket and
read exactly what systemd would. Outside systemd ``NOTIFY_SOCKET`` is unset and every call is a
no-op. A failed send is logged once and never stops the daemon: losing systemd's ear must not
stop the cleaning.
"""

from __future__ import annotations

import os
import socket
import time

import structlog

log = structlog.get_logger(__name__)


def monotonic_usec() -> int:
    """CLOCK_MONOTONIC in µs, the clock systemd compares ``MONOTONIC_USEC`` against."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


def socket_address(value: str) -> str | bytes:
    """``@name`` is an abstract socket: the leading ``@`` stands for a NUL byte."""
    if value.startswith("@"):
        return b"\0" + value[1:].encode()
    return value


def watchdog_interval_s(environ: dict[str, str] | None = None) -> float | None:
    """Half of ``WATCHDOG_USEC`` (sd_watchdog_enabled's advice), or None when no watchdog is
    asked of this process (unset, malformed, or ``WATCHDOG_PID`` names another process)."""
    env = os.environ if environ is None else environ
    usec = env.get("WATCHDOG_USEC", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    pid = env.get("WATCHDOG_PID", "")
    if pid and (not pid.isdigit() or int(pid) != os.getpid()):
        return None
    return int(usec) / 2 / 1_000_000


def one_line(text: str, limit: int = 200) -> str:
    """STATUS= is a single line; keep it short enough for `systemctl status`."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class Notifier:
    """The daemon's side of the notify protocol; thread-safe (each send is one syscall)."""

    def __init__(self, address: str | None = None) -> None:
        if address is None:
            address = os.environ.get("NOTIFY_SOCKET") or None
        if address is not None and not address.startswith(("/", "@")):
            log.warning(
                "ignoring NOTIFY_SOCKET that is neither a path nor @abstract", value=address
            )
            address = None
        self.address = address
        self._warned = False
        self._sock: socket.socket | None = None
        if address is not None:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, *lines: str) -> bool:
        """Send one message; True if it left this process."""
        if self._sock is None or self.address is None:
            return False
        payload = "\n".join(lines).encode()
        try:
            # Never block: a receiver that stopped reading (its queue holds only a few
            # datagrams) must cost us a lost message, not a stuck round or reload.
            self._sock.sendto(payload, socket.MSG_DONTWAIT, socket_address(self.address))
        except OSError as exc:
            if not self._warned:
                log.warning("sd_notify failed", socket=self.address, error=str(exc))
                self._warned = True
            return False
        return True

    def ready(self, status: str | None = None) -> bool:
        lines = ["READY=1"]
        if status:
            lines.append(f"STATUS={one_line(status)}")
        return self.send(*lines)

    def reloading(self) -> bool:
        return self.send("RELOADING=1", f"MONOTONIC_USEC={monotonic_usec()}")

    def stopping(self, status: str = "stopping") -> bool:
        return self.send("STOPPING=1", f"STATUS={one_line(status)}")

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def status(self, text: str) -> bool:
        return self.send(f"STATUS={one_line(text)}")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
