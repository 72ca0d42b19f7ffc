"""The registry of kinds: each kind says whether it claims a file; the one claiming kind reads
it; a file claimed by no kind, or by two, is refused naming them; another kind's keys in a
file make it ambiguous; ``kind_for`` makes the kind of the settings' section."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

import retentiond.kinds as registry
from retentiond.config.loader import Claim, ConfigFile, Draft
from retentiond.config.problems import ConfigError, ConfigProblem
from retentiond.config.settings import Settings, StoreSection
from retentiond.engine.kind import StoreKind
from retentiond.kinds import kind_for, load_settings
from retentiond.kinds.kafka.kind import Kafka
from retentiond.kinds.rocketmq.config import rocketmq_settings
from retentiond.kinds.rocketmq.kind import RocketMQ


class Standin:
    """A kind that claims every file at a fixed level and reads none."""

    def __init__(self, name: str, level: Claim) -> None:
        self.name = name
        self.title = name.title()
        self.identifying_keys = frozenset({f"{name}.key"})
        self.level = level

    def claim(self, file: ConfigFile) -> Claim:
        return self.level

    def read(self, file: ConfigFile, foreign: Mapping[str, str]) -> Draft[StoreSection]:
        problem = ConfigProblem(file.file, "", None, f"read by {self.name}; foreign {foreign}")
        return Draft(None, [problem])

    def owns(self, settings: Settings[StoreSection]) -> bool:
        return False

    def check_store(self, settings: Settings[StoreSection]) -> list[ConfigProblem]:
        return []

    def make(self, settings: Settings[StoreSection]) -> StoreKind:
        raise AssertionError("never made")


def refusal(path: Path) -> str:
    with pytest.raises(ConfigError) as e:
        load_settings(path)
    [problem] = e.value.problems
    assert problem.file == str(path)
    return problem.message


def test_two_kinds_claiming_a_file_are_refused_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "any.conf"
    path.write_text("a=1\n")
    kinds = (Standin("alpha", Claim.YES), Standin("beta", Claim.YES))
    monkeypatch.setattr(registry, "plugins", lambda: kinds)
    message = refusal(path)
    assert "several store kinds (Alpha and Beta)" in message and "refused" in message
    # two fallbacks are as ambiguous as two claims
    kinds = (Standin("alpha", Claim.FALLBACK), Standin("beta", Claim.FALLBACK))
    assert "(Alpha and Beta)" in refusal(path)


def test_a_file_no_kind_claims_is_refused_naming_the_kinds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "any.conf"
    path.write_text("a=1\n")
    kinds = (Standin("alpha", Claim.NO), Standin("beta", Claim.NO))
    monkeypatch.setattr(registry, "plugins", lambda: kinds)
    assert "not a configuration of any store kind retentiond knows (Alpha, Beta)" in refusal(path)


def test_a_claim_beats_a_fallback_and_the_reader_hears_the_other_kinds_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "any.conf"
    path.write_text("a=1\n")
    kinds = (Standin("alpha", Claim.FALLBACK), Standin("beta", Claim.YES))
    monkeypatch.setattr(registry, "plugins", lambda: kinds)
    assert refusal(path) == "read by beta; foreign {'alpha.key': 'Alpha'}"


def test_the_real_kinds_claim_their_files(tmp_path: Path) -> None:
    kafka = tmp_path / "server.properties"
    kafka.write_text("log.dirs=/nowhere\n")
    rocketmq = tmp_path / "broker.conf"
    rocketmq.write_text("fileReservedTime=48\n")
    assert isinstance(kind_for(load_settings(kafka, check_store=False)), Kafka)
    assert isinstance(kind_for(load_settings(rocketmq, check_store=False)), RocketMQ)
    settings = rocketmq_settings(store_path_root_dir=Path("/s"), store_path_commitlog=())
    assert isinstance(kind_for(settings), RocketMQ)
    assert registry.plugin_named("kafka") is not None and registry.plugin_named("x") is None
