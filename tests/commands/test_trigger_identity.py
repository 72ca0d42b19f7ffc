"""`trigger-delete` acts only through a daemon that says it serves this very file."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

from tests.conftest import run_cli
from tests.helpers.stores import make_store


def test_a_daemon_that_does_not_say_which_file_it_serves_is_never_asked_to_delete(
    tmp_path: Path, short_dir: Path
) -> None:
    sock_path = short_dir / "control.sock"
    store = make_store(tmp_path, retentiond={"controlSocket": str(sock_path)})
    commands: list[str] = []
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(sock_path))
    server.listen(8)
    server.settimeout(30)

    def older_daemon() -> None:
        # Answers every request as a retentiond before control replies named their daemon.
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                line = conn.makefile("rb").readline()
                commands.append(json.loads(line)["command"])
                conn.sendall(json.dumps({"ok": True, "result": {"manual_rounds": 20}}).encode())

    thread = threading.Thread(target=older_daemon, daemon=True)
    thread.start()
    try:
        out = run_cli("trigger-delete", "--config", str(store.config))
    finally:
        server.close()
        thread.join(timeout=30)
    assert out.code == 7, out.out + out.err
    assert "does not say which configuration it serves" in out.err
    assert "trigger-delete" not in commands  # asked for its status only
