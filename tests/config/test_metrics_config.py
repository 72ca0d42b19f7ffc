"""The retentiond.metrics.* keys: accepted forms, and every refusal the loader owes an operator."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from retentiond.config.metrics import is_loopback, parse_listen, read_password
from retentiond.config.problems import ConfigError
from retentiond.config.settings import DEFAULT_METRICS_LISTEN
from retentiond.daemon.reload import RESTART_KEYS
from retentiond.kinds import load_settings
from tests.helpers.tls import make_cert

Write = Callable[[str, str], Path]


@pytest.fixture
def write(tmp_path: Path) -> Write:
    def write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write


def metrics_yaml(**keys: str) -> str:
    lines = ["retentiond:", "  metrics:"]
    lines += [f"    {k}: {v}" for k, v in keys.items()]
    return "\n".join(lines) + "\n"


def load(path: Path):
    return load_settings(path, check_store=False)


def refusals(path: Path) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        load(path)
    return {p.key: p.message for p in info.value.problems}


@pytest.fixture(scope="module")
def cert_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_cert(tmp_path_factory.mktemp("tls"), "localhost")


# --- listen --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9465", ("127.0.0.1", 9465)),
        ("0.0.0.0:80", ("0.0.0.0", 80)),
        ("[::1]:9465", ("::1", 9465)),
        ("[::]:9465", ("::", 9465)),
        ("localhost:9465", ("localhost", 9465)),
        ("broker-a.example.internal:9465", ("broker-a.example.internal", 9465)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
    ],
)
def test_listen_forms_that_are_accepted(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen(text) == expected


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("9465", "port is missing"),
        (":9465", "host is missing"),
        ("127.0.0.1:", "is not a number"),
        ("127.0.0.1:http", "is not a number"),
        ("127.0.0.1:65536", "above 65535"),
        ("127.0.0.1:-1", "is not a number"),
        ("::1:9465", "in brackets"),
        ("[::1]9465", "host:port"),
        ("[not-v6]:9465", "not an IPv6 address"),
        ("bad host:9465", "not an IP address or a host name"),
        ("127.0.0.1:９４６５", "is not a number"),
    ],
)
def test_listen_forms_that_are_refused(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_listen(text)


def test_the_default_is_loopback_only() -> None:
    assert DEFAULT_METRICS_LISTEN == "127.0.0.1:9465"
    assert is_loopback(parse_listen(DEFAULT_METRICS_LISTEN)[0])
    assert is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("broker-a")


def test_a_bad_listen_address_is_refused_with_the_key(write: Write) -> None:
    problems = refusals(write("b.yaml", metrics_yaml(listen="'localhost'")))
    assert "port is missing" in problems["retentiond.metrics.listen"]


def test_listen_in_broker_conf_is_dotted(write: Write) -> None:
    got = load(write("broker.conf", "retentiond.metrics.listen=[::1]:9999\n"))
    assert got.daemon.metrics_listen == "[::1]:9999"


def test_dotted_metrics_keys_are_refused_in_yaml(write: Write) -> None:
    problems = refusals(write("b.yaml", "retentiond:\n  metrics.listen: '127.0.0.1:1'\n"))
    assert "nested" in problems["retentiond.metrics.listen"]


def test_unknown_metrics_key_is_refused_with_a_hint(write: Write) -> None:
    problems = refusals(write("b.yaml", metrics_yaml(lisen="'127.0.0.1:1'")))
    assert "retentiond.metrics.listen" in problems["retentiond.metrics.lisen"]


# --- TLS -----------------------------------------------------------------------------------


def test_tls_with_cert_and_key(write: Write, cert_pair: tuple[Path, Path]) -> None:
    cert, key = cert_pair
    got = load(write("b.yaml", metrics_yaml(tlsCertFile=str(cert), tlsKeyFile=str(key))))
    assert (got.daemon.metrics_tls_cert_file, got.daemon.metrics_tls_key_file) == (cert, key)


def test_half_configured_tls_is_refused(write: Write, cert_pair: tuple[Path, Path]) -> None:
    cert, key = cert_pair
    problems = refusals(write("a.yaml", metrics_yaml(tlsCertFile=str(cert))))
    assert "half configured" in problems["retentiond.metrics.tlsCertFile"]
    assert "tlsKeyFile" in problems["retentiond.metrics.tlsCertFile"]
    problems = refusals(write("b.yaml", metrics_yaml(tlsKeyFile=str(key))))
    assert "half configured" in problems["retentiond.metrics.tlsKeyFile"]


def test_a_missing_certificate_is_refused(write: Write, tmp_path: Path, cert_pair) -> None:
    _, key = cert_pair
    missing = tmp_path / "nope.pem"
    problems = refusals(
        write("b.yaml", metrics_yaml(tlsCertFile=str(missing), tlsKeyFile=str(key)))
    )
    assert problems["retentiond.metrics.tlsCertFile"] == "file does not exist"


def test_a_directory_is_not_a_certificate(write: Write, tmp_path: Path, cert_pair) -> None:
    _, key = cert_pair
    problems = refusals(
        write("b.yaml", metrics_yaml(tlsCertFile=str(tmp_path), tlsKeyFile=str(key)))
    )
    assert problems["retentiond.metrics.tlsCertFile"] == "is not a regular file"


def test_a_key_that_does_not_match_is_refused(write: Write, tmp_path: Path, cert_pair) -> None:
    cert, _ = cert_pair
    garbage = write(
        "key.pem", "-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n"
    )
    problems = refusals(
        write("b.yaml", metrics_yaml(tlsCertFile=str(cert), tlsKeyFile=str(garbage)))
    )
    assert "cannot use this certificate" in problems["retentiond.metrics.tlsCertFile"]


def test_a_relative_certificate_path_is_refused(write: Write) -> None:
    problems = refusals(write("b.yaml", metrics_yaml(tlsCertFile="cert.pem", tlsKeyFile="key.pem")))
    assert "absolute" in problems["retentiond.metrics.tlsCertFile"]


# --- basic auth ----------------------------------------------------------------------------


def test_basic_auth_with_a_password_file(write: Write) -> None:
    secret = write("pw", "s3cret\n")
    got = load(
        write("b.yaml", metrics_yaml(basicAuthUsername="prom", basicAuthPasswordFile=str(secret)))
    )
    assert got.daemon.metrics_basic_auth_username == "prom"
    assert got.daemon.metrics_basic_auth_password_file == secret
    assert read_password(secret) == "s3cret"


def test_half_configured_basic_auth_is_refused(write: Write) -> None:
    secret = write("pw", "s3cret\n")
    problems = refusals(write("a.yaml", metrics_yaml(basicAuthUsername="prom")))
    assert "basicAuthPasswordFile" in problems["retentiond.metrics.basicAuthUsername"]
    problems = refusals(write("b.yaml", metrics_yaml(basicAuthPasswordFile=str(secret))))
    assert "basicAuthUsername" in problems["retentiond.metrics.basicAuthPasswordFile"]


def test_missing_or_empty_password_files_are_refused(write: Write, tmp_path: Path) -> None:
    problems = refusals(
        write(
            "a.yaml", metrics_yaml(basicAuthUsername="p", basicAuthPasswordFile=str(tmp_path / "x"))
        )
    )
    assert problems["retentiond.metrics.basicAuthPasswordFile"] == "file does not exist"
    empty = write("empty", "\n")
    problems = refusals(
        write("b.yaml", metrics_yaml(basicAuthUsername="p", basicAuthPasswordFile=str(empty)))
    )
    assert "empty" in problems["retentiond.metrics.basicAuthPasswordFile"]


def test_a_colon_in_the_user_name_is_refused(write: Write) -> None:
    secret = write("pw", "x")
    problems = refusals(
        write("b.yaml", metrics_yaml(basicAuthUsername="'a:b'", basicAuthPasswordFile=str(secret)))
    )
    assert "':'" in problems["retentiond.metrics.basicAuthUsername"]


def test_the_password_never_appears_in_messages_or_the_hash_input(write: Write) -> None:
    secret = write("pw", "hunter2-very-secret\n")
    path = write(
        "b.yaml", metrics_yaml(basicAuthUsername="'a:b'", basicAuthPasswordFile=str(secret))
    )
    with pytest.raises(ConfigError) as info:
        load(path)
    assert "hunter2" not in str(info.value)
    ok = load(
        write("c.yaml", metrics_yaml(basicAuthUsername="a", basicAuthPasswordFile=str(secret)))
    )
    assert "hunter2" not in repr(ok.as_dict())


@pytest.mark.parametrize(
    ("data", "expected"),
    [(b"pw\n", "pw"), (b"pw\r\n", "pw"), (b"pw", "pw"), (b"pw\n\n", "pw\n"), (b" pw ", " pw ")],
)
def test_one_trailing_newline_is_ignored(tmp_path: Path, data: bytes, expected: str) -> None:
    path = tmp_path / "pw"
    path.write_bytes(data)
    assert read_password(path) == expected


# --- reload and hash -----------------------------------------------------------------------


def test_metrics_keys_need_a_restart() -> None:
    for key in (
        "listen",
        "tlsCertFile",
        "tlsKeyFile",
        "basicAuthUsername",
        "basicAuthPasswordFile",
    ):
        assert f"retentiond.metrics.{key}" in RESTART_KEYS


def test_paired_keys_change_the_hash(write: Write, cert_pair: tuple[Path, Path]) -> None:
    cert, key = cert_pair
    secret = write("pw", "x")
    base = load(write("a.yaml", ""))
    tls = load(write("b.yaml", metrics_yaml(tlsCertFile=str(cert), tlsKeyFile=str(key))))
    auth = load(
        write("c.yaml", metrics_yaml(basicAuthUsername="p", basicAuthPasswordFile=str(secret)))
    )
    assert len({base.config_hash, tls.config_hash, auth.config_hash}) == 3


def test_a_refused_file_is_not_also_called_half_configured(write: Write, tmp_path: Path) -> None:
    secret = write("pw", "x")
    problems = refusals(
        write(
            "b.yaml",
            metrics_yaml(
                tlsCertFile=str(tmp_path / "missing.pem"),
                tlsKeyFile=str(secret),
                basicAuthUsername="p",
                basicAuthPasswordFile=str(tmp_path / "missing"),
            ),
        )
    )
    assert problems == {
        "retentiond.metrics.tlsCertFile": "file does not exist",
        "retentiond.metrics.basicAuthPasswordFile": "file does not exist",
    }


def test_a_password_file_that_is_not_text_is_refused(write: Write, tmp_path: Path) -> None:
    binary = tmp_path / "pw.bin"
    binary.write_bytes(b"\xff\xfe\x00")
    problems = refusals(
        write("b.yaml", metrics_yaml(basicAuthUsername="p", basicAuthPasswordFile=str(binary)))
    )
    assert problems["retentiond.metrics.basicAuthPasswordFile"] == (
        "the password file is not UTF-8 text"
    )
