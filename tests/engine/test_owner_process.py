"""The broker beside us, with real processes: a stand-in broker takes the store lock, maps
files, opens descriptors and lowers its own RLIMIT_NOFILE; what ``engine.proc.owner`` reports must
be exactly that. Plus a fixture /proc tree read through psutil's PROCFS_PATH (a host /proc
mounted elsewhere: another PID namespace), and the start-up warning about processes that
cannot be looked into, from a daemon without capabilities."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from structlog.testing import capture_logs

from retentiond.engine.proc.files import LockOwner, find_owner
from retentiond.engine.proc.inuse import InUse
from retentiond.engine.proc.owner import OwnerWatch, count_maps, read_owner, recognise
from retentiond.kinds.kafka.kind import Kafka
from retentiond.kinds.rocketmq.kind import RocketMQ
from tests.conftest import need
from tests.helpers.broker_proc import FakeBroker

# Both kinds' brokers, as the kinds declare them.
BROKERS = (*RocketMQ.brokers, *Kafka.brokers)

MAX_MAP_COUNT = int(Path("/proc/sys/vm/max_map_count").read_text())


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    root.mkdir()
    (root / "lock").write_bytes(b"")
    for i in range(3):
        (root / f"file{i}").write_bytes(b"x" * 4096)
    return root


def watch_once(store: Path) -> tuple[OwnerWatch, object]:
    watch = OwnerWatch(brokers=BROKERS)
    return watch, watch.refresh(find_owner(str(store / "lock")))


def test_a_broker_holding_the_lock_shows_its_maps_descriptors_and_limit(store: Path) -> None:
    with FakeBroker(store / "lock") as broker:
        watch = OwnerWatch(brokers=BROKERS)
        owner = find_owner(str(store / "lock"))
        assert owner.pids == {broker.pid}
        before = watch.refresh(owner).process
        assert before is not None and before.pid == broker.pid
        assert before.type == "rocketmq"
        assert before.main_class == "org.apache.rocketmq.broker.BrokerStartup"
        assert before.unreadable == ()

        broker.map(700, store / "file0")
        broker.map(300, store / "file1")
        broker.open(37, store / "file2")
        broker.nofile(4321)
        report = watch.refresh(find_owner(str(store / "lock")))
        after = report.process
        assert after is not None
        # N maps more, on top of its own libraries and heap.
        assert after.memory_maps == before.memory_maps + 1000  # type: ignore[operator]
        assert after.memory_maps >= 1000 + 20  # type: ignore[operator]
        maps = Path(f"/proc/{broker.pid}/maps").read_text()
        assert maps.count(str(store / "file0")) == 700
        assert after.open_fds == before.open_fds + 37  # type: ignore[operator]
        assert after.open_fds == len(os.listdir(f"/proc/{broker.pid}/fd"))
        assert after.max_fds == 4321
        assert report.vm_max_map_count == MAX_MAP_COUNT
        assert after.rss_bytes is not None and after.rss_bytes > 1 << 20  # an interpreter
        assert after.start_time_s is not None
        assert abs(after.start_time_s - psutil.Process(broker.pid).create_time()) < 0.02
        assert time.time() - 120 < after.start_time_s <= time.time()
        assert after.user == "root" if os.geteuid() == 0 else after.user
        assert after.name and after.name.startswith("python")
        assert watch.reads == 2  # one reading per refresh, never more


def test_kafka_is_recognised_and_anything_else_warned_about_once(store: Path) -> None:
    with FakeBroker(store / "lock", ("kafka.Kafka", "config/server.properties")) as kafka:
        _, report = watch_once(store)
        assert report.process.type == "kafka"  # type: ignore[attr-defined]
        assert report.process.main_class == "kafka.Kafka"  # type: ignore[attr-defined]
        assert report.process.pid == kafka.pid  # type: ignore[attr-defined]
    with FakeBroker(store / "lock", ("--not-a-broker",)) as other:
        watch = OwnerWatch(brokers=BROKERS)
        with capture_logs() as logs:
            for _ in range(3):
                report = watch.refresh(find_owner(str(store / "lock")))
        assert report.process is not None and report.process.type == "other"
        warnings = [e for e in logs if "neither a RocketMQ broker" in e["event"]]
        assert len(warnings) == 1 and warnings[0]["log_level"] == "warning"
        assert warnings[0]["pid"] == other.pid
        assert "--not-a-broker" in warnings[0]["command"]


def test_no_owner_means_no_figures(store: Path, tmp_path: Path) -> None:
    _, report = watch_once(store)  # the lock file exists, nobody holds it
    assert report.running is False and report.process is None  # type: ignore[attr-defined]
    report = OwnerWatch(brokers=BROKERS).refresh(find_owner(str(tmp_path / "no-such-lock")))
    assert report.running is False and report.process is None
    assert report.vm_max_map_count == MAX_MAP_COUNT
    # A holder from another PID namespace: running, but no pid to describe.
    report = OwnerWatch(brokers=BROKERS).refresh(LockOwner(True, frozenset()))
    assert report.running is True and report.process is None


def test_main_classes() -> None:
    rocketmq = ["java", "-cp", "a:b", "org.apache.rocketmq.broker.BrokerStartup"]
    assert recognise(rocketmq, BROKERS) == ("rocketmq", rocketmq[-1])
    container = ["java", "org.apache.rocketmq.container.BrokerContainerStartup"]
    assert recognise(container, BROKERS)[0] == "rocketmq"
    assert recognise(["java", "kafka.Kafka", "server.properties"], BROKERS) == (
        "kafka", "kafka.Kafka"
    )  # fmt: skip
    assert recognise(["java", "-Dx=BrokerStartup.log", "Main"], BROKERS) == ("other", None)
    assert recognise([], BROKERS) == ("other", None)
    # Only the brokers a kind declares are recognised.
    assert recognise(rocketmq, Kafka.brokers) == ("other", None)


def _fixture_process(root: Path, pid: int) -> None:
    """A process as a host /proc mounted elsewhere shows it: not our PID namespace."""
    d = root / str(pid)
    (d / "fd").mkdir(parents=True)
    (root / "sys" / "vm").mkdir(parents=True)
    (root / "sys" / "vm" / "max_map_count").write_text("262144\n")
    (root / "stat").write_text("cpu 1 2 3 4\nbtime 1700000000\n")
    ticks = os.sysconf("SC_CLK_TCK") * 123
    fields = ["S", "1", str(pid), str(pid), "0", "-1", "4194560"] + ["0"] * 12 + [str(ticks)]
    (d / "stat").write_text(f"{pid} (java) {' '.join(fields + ['0'] * 30)}\n")
    (d / "status").write_text("Name:\tjava\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\n")
    (d / "cmdline").write_bytes(b"java\0-server\0org.apache.rocketmq.broker.BrokerStartup\0")
    (d / "statm").write_text("1000 300 10 1 0 500 0\n")
    (d / "limits").write_text(
        "Limit                     Soft Limit           Hard Limit           Units     \n"
        "Max open files            65535                524288               files     \n"
    )
    (d / "maps").write_text("7f00-7f10 r--s 00000000 fe:00 12    /store/commitlog/0\n" * 9)
    for fd in range(6):
        os.symlink("/dev/null", d / "fd" / str(fd))


def test_a_fixture_proc_root_is_read_through_psutil_procfs_path(tmp_path: Path) -> None:
    root = tmp_path / "proc"
    pid = 4_000_000  # beyond any pid_max: certainly not a process of ours
    _fixture_process(root, pid)
    before = psutil.PROCFS_PATH
    figures = read_owner(pid, str(root), BROKERS)
    assert before == psutil.PROCFS_PATH  # put back for everyone else
    assert figures is not None
    assert (figures.name, figures.type, figures.user) == ("java", "rocketmq", "root")
    assert figures.memory_maps == 9 == count_maps(pid, str(root))
    assert figures.open_fds == 6
    assert figures.max_fds == 65535  # from <root>/<pid>/limits, not prlimit(4000000)
    assert figures.rss_bytes == 300 * os.sysconf("SC_PAGE_SIZE")
    assert figures.start_time_s == pytest.approx(1700000123.0)
    report = OwnerWatch(str(root), BROKERS).refresh(LockOwner(True, frozenset({pid})))
    assert report.vm_max_map_count == 262144 and report.process == figures
    # Gone between the lock lookup and the reading: no figures, no exception.
    shutil.rmtree(root / str(pid))
    assert read_owner(pid, str(root)) is None


def test_a_broker_we_may_not_look_into_still_shows_what_is_world_readable(
    store: Path,
) -> None:
    """Without capabilities, a root broker's maps are refused (ptrace access): that figure is
    None and named, the rest (command line, RSS, the limit from /proc/<pid>/limits, where
    prlimit is refused too) is reported."""
    need(os.geteuid() == 0, "dropping capabilities needs root to start with")
    need(shutil.which("setpriv") is not None, "setpriv (util-linux) is needed")
    script = (
        "import json, sys\n"
        "from retentiond.engine.proc.files import find_owner\n"
        "from retentiond.engine.proc.owner import OwnerWatch\n"
        "from retentiond.kinds.rocketmq.kind import RocketMQ\n"
        "r = OwnerWatch(brokers=RocketMQ.brokers).refresh(find_owner(sys.argv[1]))\n"
        "print(json.dumps(r.process.as_dict()))\n"
    )
    with FakeBroker(store / "lock") as broker:
        broker.nofile(2345)
        out = subprocess.run(
            [*DROP_CAPS, sys.executable, "-c", script, str(store / "lock")],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert out.returncode == 0, out.stderr
    p = json.loads(out.stdout)
    assert p["pid"] == broker.pid and p["type"] == "rocketmq"
    # maps needs ptrace access; the fd directory can be listed by its owner (same uid).
    assert p["memory_maps"] is None and "memory_maps" in {u.split(":")[0] for u in p["unreadable"]}
    assert p["max_fds"] == 2345 and p["rss_bytes"] > 0


DROP_CAPS = [
    "setpriv", "--securebits", "+noroot,+noroot_locked", "--bounding-set", "-all",
    "--inh-caps", "-all",
]  # fmt: skip


def test_unreadable_processes_are_named_once_in_a_warning(tmp_path: Path) -> None:
    """A daemon without capabilities cannot look into a process that has them (as any VM's
    pid 1 is to everyone): one warning, not an error, naming pid, user and command, and saying
    what follows for deletions. The proc root shows only that process (symlinks into /proc),
    so other jobs on the machine cannot change the answer."""
    need(os.geteuid() == 0, "dropping capabilities needs root to start with")
    need(shutil.which("setpriv") is not None, "setpriv (util-linux) is needed")
    (tmp_path / "store").mkdir()
    script = (
        "import sys\n"
        "from retentiond.observe.logging import configure\n"
        "from retentiond.engine.proc.inuse import InUse\n"
        "configure(json=True)\n"
        "u = InUse(sys.argv[3])\n"
        "for _ in range(3):\n"
        "    u.begin_round(sys.argv[1])\n"
        "    u.holder_map([sys.argv[2]], 0)\n"
    )
    marker = "unreadable-marker-for-the-test"
    proc = tmp_path / "proc"
    proc.mkdir()
    for name in ("locks", "stat", "sys"):
        os.symlink(f"/proc/{name}", proc / name)
    with FakeBroker(None, argv0=marker) as other:
        os.symlink(f"/proc/{other.pid}", proc / str(other.pid))
        out = subprocess.run(
            [*DROP_CAPS, sys.executable, "-c", script, str(tmp_path / "lock"),
             str(tmp_path / "store"), str(proc)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = [json.loads(x) for x in out.stderr.splitlines() if x.startswith("{")]
    said = [x for x in lines if x["event"].startswith("cannot see every process's open files")]
    assert len(said) == 1, lines
    warning = said[0]
    assert warning["level"] == "warning"
    assert warning["unreadable_count"] == 1
    text = warning["event"]
    assert f"1 process cannot be looked into (pid {other.pid} (root): {marker} -c import" in text
    assert "Deletions go on" in text and "forcible interval" in text
    # root without CAP_SYS_PTRACE: the remedy is that capability, never "run as root"
    assert "without CAP_SYS_PTRACE" in text and "Run retentiond as root" not in text


def test_the_unreadable_warning_in_process_names_what_this_machine_hides() -> None:
    """As root, on this very machine: if some process is unreadable (a VM's init), the
    warning names it; otherwise there is nothing to say."""
    with capture_logs() as logs:
        u = InUse()
        u.begin_round("/nonexistent/lock")
        hm = u.holder_map([], 0)
        u.holder_map([], 0)
    said = [e for e in logs if e["event"].startswith("cannot see every process")]
    assert len(said) == (0 if hm.complete else 1)
    assert all(e["log_level"] == "warning" for e in said)
    for pid in hm.unreadable[:10]:
        assert f"pid {pid} (" in said[0]["event"]


def test_reading_the_limit_does_not_touch_our_own(store: Path) -> None:
    ours = resource.getrlimit(resource.RLIMIT_NOFILE)
    with FakeBroker(store / "lock") as broker:
        broker.nofile(1111)
        _, report = watch_once(store)
        assert report.process.max_fds == 1111  # type: ignore[attr-defined]
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == ours
