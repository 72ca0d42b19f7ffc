"""The config loader on arbitrary broker.yaml and broker.conf text: it returns Settings or
raises ConfigError with at least one problem, and nothing else — for random text, and for
files made of the real keys with random values (the realistic way to get a config wrong)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from retentiond.config.problems import ConfigError
from retentiond.config.settings import Settings
from retentiond.kinds import load_settings
from retentiond.kinds.rocketmq.config import KEYS as ROCKETMQ_KEYS
from retentiond.kinds.rocketmq.config import LEGACY_KEYS
from tests.fuzz.conftest import FUZZ, scratch_dir

_DIR = scratch_dir("rd-fuzz-config-")
(_DIR / "store" / "commitlog").mkdir(parents=True)
(_DIR / "store" / "lock").write_bytes(b"lock")
(_DIR / "store" / "checkpoint").write_bytes(bytes(4096))
# Pools drawn by index: flat integer draws keep 10,000 cases fast; free text covers the rest.
KEYS = (
    [spec.key for spec in ROCKETMQ_KEYS]
    + sorted(LEGACY_KEYS)
    + [
        "fileReservedTim",
        "FileReservedTime",
        "deletewhen",
        "retentiond",
        "",
        " ",
        "a.b.c",
        "#x",
    ]
)
VALUES = [
    "04", "00;23", "04; 05", "24", "-1", "0", "1", "2147483647", "2147483648", "1e3", "0x10",
    "true", "false", "True", "yes", "0.85", "85", "0.3", "0.29", "95", "96", "UTC",
    "Asia/Shanghai", "Mars/Base", "", "~", "null", "~/store", str(_DIR / "store"),
    f"{_DIR}/store/commitlog,{_DIR}/x,", "/nonexistent", "relative/path", "[1, 2]", "{a: 1}",
    "'04'", '"x', "- a", "&a", "*a", "!!binary x", "\\u0041", "a\\", "\udc80", "\x00",
    "1073741824", "6000000", "6000001", "20", "1", "5000000",
]  # fmt: skip


def _text(lines: list[tuple[int, int]], nested: list[tuple[int, int]], yaml: bool) -> str:
    """A broker.yaml or broker.conf made of (mostly) real keys with tricky values."""
    pairs = [(KEYS[k % len(KEYS)], VALUES[v % len(VALUES)]) for k, v in lines]
    if not yaml:
        return f"storePathRootDir={_DIR / 'store'}\n" + "".join(f"{k}={v}\n" for k, v in pairs)
    text = f"storePathRootDir: {_DIR / 'store'}\n"
    text += "".join(f"{k.removeprefix('retentiond.')}: {v}\n" for k, v in pairs)
    if nested:
        inner = [(KEYS[k % len(KEYS)], VALUES[v % len(VALUES)]) for k, v in nested]
        text += "retentiond:\n" + "".join(f"  {k.split('.')[-1]}: {v}\n" for k, v in inner)
    return text


@FUZZ
@given(blob=st.binary(max_size=200), mode=st.integers(0, 7))
def test_the_loader_returns_settings_or_refuses(blob: bytes, mode: int) -> None:
    """Random bytes, or real keys with tricky values; as broker.yaml or broker.conf; with or
    without the store check (``mode`` bits). One load per case: a YAML parse costs about a
    millisecond. The structured file takes its (key, value) choices from the blob's bytes."""
    yaml, check_store, free = bool(mode & 1), bool(mode & 2), bool(mode & 4)
    if free:
        data = blob
    else:
        pairs = list(zip(blob[0::2], blob[1::2], strict=False))
        cut = len(pairs) * 3 // 4
        data = _text(pairs[:cut], pairs[cut:], yaml).encode("utf-8", "surrogatepass")
    path = _DIR / ("fuzz.yaml" if yaml else "fuzz.conf")
    path.write_bytes(data)
    try:
        result = load_settings(path, check_store=check_store)
    except ConfigError as exc:
        assert exc.problems
        str(exc)
    else:
        assert isinstance(result, Settings)
        assert result.config_hash
