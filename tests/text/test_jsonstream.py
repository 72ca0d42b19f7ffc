"""The streamed plan document is byte for byte what ``json.dump(indent=2)`` writes."""

from __future__ import annotations

import dataclasses
import io
import json

from retentiond.engine.cleaner import Cleaner
from retentiond.kinds import kind_for, load_settings
from retentiond.kinds.rocketmq.triggers import hour_of_day
from retentiond.storegen.rocketmq import PRESETS, generate_store, write_config
from retentiond.text import jsonstream
from retentiond.text.jsonstream import Rows


def _both(doc) -> tuple[str, str]:
    out = io.StringIO()
    jsonstream.dump(doc, out)
    return out.getvalue(), json.dumps(jsonstream.materialize(doc), indent=2)


def test_documents_of_every_shape_match_json_dump():
    rows = [{"a": 1, "b": 'é\n"x', "c": None, "d": True, "e": 1.5, "f": [1, {"g": 2}]}, {}]
    doc = {
        "empty": {}, "none": [], "rows": Rows(lambda: iter(rows)), "no rows": Rows(lambda: ()),
        "nested": {"l": [1, "two", [3, []], {"k": "v"}], "n": -7}, "s": "ünï", "z": None,
    }  # fmt: skip
    streamed, whole = _both(doc)
    assert streamed == whole
    assert _both([])[0] == "[]" and _both("x")[0] == '"x"'


def test_a_real_plan_streams_as_as_dict_dumps(tmp_path):
    spec = dataclasses.replace(PRESETS["daemon-test"], now_ms=1_790_000_000_000)
    clock = spec.now_ms + 60_000
    store = generate_store(tmp_path / "store", spec)
    config = write_config(
        store.root, spec, tmp_path / "broker.yaml", fileReservedTime=24,
        deleteWhen=f"{hour_of_day(clock, 'UTC'):02d}", retentiond={"timezone": "UTC"},
    )  # fmt: skip
    plan = Cleaner(kind_for(load_settings(config)), clock_ms=lambda: clock).plan()
    assert plan.queues.examined and plan.queues.queues
    out = io.StringIO()
    jsonstream.dump(plan.as_document(), out)
    assert out.getvalue() == json.dumps(plan.as_dict(), indent=2)
