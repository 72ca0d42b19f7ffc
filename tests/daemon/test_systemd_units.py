"""The shipped systemd units: `systemd-analyze verify` accepts them and the service's security
exposure stays at or below 2.5, the figure the README promises.

Units are checked as installed copies named for a concrete instance (``retentiond@broker-a``),
with ExecStart pointing at the ``retentiond`` of the environment under test: verify insists
that the executable exists, and /usr/local/bin/retentiond exists only on an installed host.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from retentiond.daemon import control
from tests.conftest import need

UNITS = Path(__file__).resolve().parents[2] / "systemd"
INSTALLED_EXE = "/usr/local/bin/retentiond"
MAX_EXPOSURE = 2.5
_OVERALL = re.compile(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)")


def _systemd_analyze() -> str:
    path = shutil.which("systemd-analyze")
    need(path is not None, "systemd-analyze is not installed")
    assert path is not None
    return path


def _unit_files() -> list[Path]:
    return sorted(p for p in UNITS.iterdir() if p.suffix in (".service", ".timer"))


def _installed_copy(unit: Path, directory: Path) -> Path:
    """The unit as it would be installed, for instance ``broker-a`` if it is a template."""
    exe = Path(sys.executable).with_name("retentiond")
    assert exe.exists(), f"{exe} missing: pip install -e . first"
    name = unit.name.replace("@.", "@broker-a.")
    copy = directory / name
    copy.write_text(unit.read_text().replace(INSTALLED_EXE, str(exe)))
    return copy


def test_the_units_exist() -> None:
    assert (UNITS / "retentiond@.service").exists()


@pytest.mark.parametrize("unit", _unit_files(), ids=lambda p: p.name)
def test_unit_passes_systemd_analyze_verify(unit: Path, tmp_path: Path) -> None:
    tool = _systemd_analyze()
    copy = _installed_copy(unit, tmp_path)
    result = subprocess.run([tool, "verify", str(copy)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "", f"verify warned:\n{result.stderr}"


@pytest.mark.parametrize(
    "unit", [p for p in _unit_files() if p.suffix == ".service"], ids=lambda p: p.name
)
def test_service_security_exposure_is_at_most_2_5(unit: Path, tmp_path: Path) -> None:
    tool = _systemd_analyze()
    copy = _installed_copy(unit, tmp_path)
    # --threshold is in tenths: systemd-analyze itself fails above 2.5 as well.
    result = subprocess.run(
        [tool, "security", "--offline=yes", f"--threshold={int(MAX_EXPOSURE * 10)}", str(copy)],
        capture_output=True,
        text=True,
    )
    match = _OVERALL.search(result.stdout)
    assert match, f"no overall exposure in the output:\n{result.stdout}\n{result.stderr}"
    exposure = float(match.group(1))
    assert exposure <= MAX_EXPOSURE, result.stdout
    assert result.returncode == 0, result.stdout + result.stderr


def test_reload_and_stop_contract_of_the_service() -> None:
    """What the daemon relies on: SIGHUP reloads, it notifies, and the main PID alone may."""
    text = (UNITS / "retentiond@.service").read_text()
    settings = {
        line.split("=", 1)[0]: line.split("=", 1)[1]
        for line in text.splitlines()
        if "=" in line and not line.startswith("#")
    }
    assert settings["Type"] == "notify"
    assert settings["NotifyAccess"] == "main"
    assert settings["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert settings["Restart"] == "on-failure"
    assert "/etc/retentiond/%i.yaml" in settings["ExecStart"]
    assert settings["RuntimeDirectory"] == "retentiond/%i"


def test_clients_find_the_socket_of_the_unit_from_the_config_path() -> None:
    """The unit's daemon puts its socket in ``$RUNTIME_DIRECTORY``; an operator's shell has no
    such variable, and `status --config /etc/retentiond/broker-a.yaml` must still find it."""
    text = (UNITS / "retentiond@.service").read_text()
    settings = dict(
        line.split("=", 1) for line in text.splitlines() if "=" in line and line[0] != "#"
    )
    instance = "broker-a"
    runtime = "/run/" + settings["RuntimeDirectory"].replace("%i", instance)
    config = Path(settings["ExecStart"].split("--config ", 1)[1].split()[0].replace("%i", instance))
    daemon_side = control.default_socket_path(config, {"RUNTIME_DIRECTORY": runtime})
    assert daemon_side == Path(runtime) / "control.sock"
    assert daemon_side in control.client_socket_paths(config, None, {})


def _settings(unit: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in (UNITS / unit).read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            out.setdefault(key, []).append(value)
    return out


def test_the_kafka_rescue_runs_once_before_the_broker() -> None:
    """Enabled for a broker, the rescue is a oneshot ordered before the broker's unit and
    wanted by it; a broker already up (exit 8: it holds the lock) is no failure."""
    s = _settings("retentiond-kafka-rescue@.service")
    assert s["Type"] == ["oneshot"]
    assert "kafka@%i.service" in s["Before"][0].split()
    assert s["WantedBy"] == ["kafka@%i.service"]
    [exec_start] = s["ExecStart"]
    assert " rescue --config /etc/retentiond/%i.properties $RESCUE_ARGS" in exec_start
    assert s["SuccessExitStatus"] == ["8"]
    assert "--target-ratio" in s["Environment"][0]
    assert "--beyond-retention" not in s["Environment"][0]  # never by default


def test_the_kafka_daemon_unit_beside_the_rocketmq_template() -> None:
    s = _settings("retentiond-kafka@.service")
    assert s["Type"] == ["notify"] and s["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert "run --config /etc/retentiond/%i.properties" in s["ExecStart"][0]
    assert s["User"] == ["kafka"] and s["After"][-1] == "kafka@%i.service"
    runtime = "/run/" + s["RuntimeDirectory"][0].replace("%i", "broker-1")
    config = Path("/etc/retentiond/broker-1.properties")
    daemon_side = control.default_socket_path(config, {"RUNTIME_DIRECTORY": runtime})
    assert daemon_side in control.client_socket_paths(config, None, {})
