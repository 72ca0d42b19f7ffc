"""The tolerant fastjson parser and the progress files, on the samples of consumers.md §A."""

from __future__ import annotations

import pytest

from retentiond.engine.loss import Progress
from retentiond.kinds.rocketmq.progress import (
    FastjsonError,
    parse_fastjson,
    read_config_file,
    read_progress,
)
from tests.kinds.rocketmq.progress_files import (
    consumer_offset_json,
    delay_offset_json,
    subscription_group_json,
    write_text,
)

# consumers.md §A.1.2, verbatim (TAB indents, no trailing newline)
SPEC_SAMPLE = (
    '{\n\t"dataVersion":{\n\t\t"counter":0,\n\t\t"stateVersion":0,\n\t\t"timestamp":1700000000000\n'
    '\t},\n\t"groupTopicMap":{\n\t\t"B":["A"],\n\t\t"D":["C"],\n\t\t"G2":["TopicTest"],\n'
    '\t\t"please_rename_unique_group_name_4":["TopicTest","%RETRY%please_rename_unique_group_name_4"]\n'
    '\t},\n\t"offsetTable":{\n\t\t"A@B":{},\n'
    '\t\t"TopicTest@please_rename_unique_group_name_4":{0:250,1:250,2:249,3:251\n\t\t},\n'
    '\t\t"TopicTest@G2":{1:9007199254740993\n\t\t},\n\t\t"C@D":{3:-1\n\t\t},\n'
    '\t\t"%RETRY%please_rename_unique_group_name_4@please_rename_unique_group_name_4":{0:0\n'
    "\t\t}\n\t}\n}"
)


def test_the_spec_sample_parses_exactly():
    doc = parse_fastjson(SPEC_SAMPLE)
    assert isinstance(doc, dict)
    table = doc["offsetTable"]
    assert table["A@B"] == {}
    assert table["TopicTest@please_rename_unique_group_name_4"] == {
        "0": 250, "1": 250, "2": 249, "3": 251
    }  # fmt: skip
    assert table["TopicTest@G2"] == {"1": 9007199254740993}  # above 2^53, exact
    assert table["C@D"] == {"3": -1}
    assert table["%RETRY%please_rename_unique_group_name_4@please_rename_unique_group_name_4"]


def test_the_writer_matches_the_spec_sample_byte_for_byte():
    table = {"TopicTest@please_rename_unique_group_name_4": {0: 250, 1: 250},
             "TopicTest@G2": {0: 1, 1: 7}}  # fmt: skip
    expected = (
        '{\n\t"dataVersion":{\n\t\t"counter":0,\n\t\t"stateVersion":0,\n'
        '\t\t"timestamp":1700000000000\n\t},\n\t"groupTopicMap":{\n\t\t"G2":["TopicTest"],\n'
        '\t\t"please_rename_unique_group_name_4":["TopicTest"]\n\t},\n\t"offsetTable":{\n'
        '\t\t"TopicTest@please_rename_unique_group_name_4":{0:250,1:250\n\t\t},\n'
        '\t\t"TopicTest@G2":{0:1,1:7\n\t\t}\n\t}\n}'
    )
    assert consumer_offset_json(table) == expected


def test_strings_that_look_like_keys_and_escaped_quotes_are_left_alone():
    text = '{"a":"x,{0:1}\\",2:3","b":{7:8,-2:9\n}}'
    assert parse_fastjson(text) == {"a": 'x,{0:1}",2:3', "b": {"7": 8, "-2": 9}}


def test_quoted_and_bare_keys_mix_as_fastjson_reads_them():
    assert parse_fastjson('{"offsetTable":{"T@G":{"0":5,1:6}}}') == {
        "offsetTable": {"T@G": {"0": 5, "1": 6}}
    }


def test_blanks_around_a_bare_key_are_read_too():
    """The broker writes none, but a hand-edited file may: the same reading, the slow way."""
    assert parse_fastjson('{"T@G":{ 0 :5,\n 1: 6, -3 :7}}') == {"T@G": {"0": 5, "1": 6, "-3": 7}}


@pytest.mark.parametrize("text", ["", "{", '{"offsetTable":{"T@G":{0:25', "{0:}"])
def test_torn_text_is_an_error_not_a_guess(text):
    with pytest.raises(FastjsonError):
        parse_fastjson(text) if text else parse_fastjson("")


def test_torn_main_falls_back_to_bak_and_says_so(tmp_path):
    path = tmp_path / "consumerOffset.json"
    good = consumer_offset_json({"T@G": {0: 5}})
    write_text(path, good[: len(good) // 2])
    write_text(tmp_path / "consumerOffset.json.bak", good)
    got = read_config_file(path)
    assert got.progress is Progress.KNOWN
    assert got.doc is not None and got.doc["offsetTable"] == {"T@G": {"0": 5}}
    assert got.problem and ".bak" in got.problem


def test_corrupt_without_bak_and_missing(tmp_path):
    path = tmp_path / "consumerOffset.json"
    got = read_config_file(path)
    assert got.progress is Progress.UNKNOWN and got.doc is None and "missing" in got.problem
    write_text(path, '{\n\t"offsetTable":{\n\t\t"T@G":{0:')
    got = read_config_file(path)
    assert got.progress is Progress.CORRUPT and got.doc is None
    assert "consumerOffset.json.bak missing" in got.problem


def test_read_progress_keys_groups_levels(tmp_path):
    config = tmp_path / "config"
    table = {"T@G1": {0: 3, 1: 4}, "T@": {0: 1}, "@G9": {0: 2}}
    write_text(config / "consumerOffset.json", consumer_offset_json(table))
    write_text(
        config / "subscriptionGroup.json", subscription_group_json({"G1": True, "G2": False})
    )
    (tmp_path / "consumequeue" / "SCHEDULE_TOPIC_XXXX").mkdir(parents=True)
    write_text(config / "delayOffset.json", delay_offset_json({1: 3, 2: 5, 18: 0}))
    p = read_progress(tmp_path)
    assert p.progress is Progress.KNOWN
    # "T@" splits into one part and is ignored, as Java's split does; "@G9" splits into
    # topic "" and G9, a topic that cannot be a directory: skipped, and said
    assert p.offsets == {"T": {"G1": {0: 3, 1: 4}}}
    assert p.enabled == {"G1": True, "G2": False}
    assert p.delay == {1: 3, 2: 5, 18: 0}
    assert any("1 entries" in text for _, text in p.problems)


@pytest.mark.parametrize("topic", ["bad\u0000topic", "a/b", "Orders/0", ".", "..", ""])
def test_a_topic_that_cannot_be_a_directory_name_is_skipped_and_said(tmp_path, topic):
    """A topic names a directory under consumequeue/: one with a NUL or a "/", "." or ".."
    (or none) names none of the topic's own. The entry is skipped with a problem line; the
    others are read as usual. Groups the same (a retry topic is named after its group)."""
    config = tmp_path / "config"
    table = {"T@G1": {0: 3}, f"{topic}@G2": {0: 0}, f"T@{topic or 'G3'}x/": {0: 1}}
    if topic:
        table[f"T@{topic}"] = {0: 0}
    write_text(config / "consumerOffset.json", consumer_offset_json(table))
    p = read_progress(tmp_path)
    assert p.progress is Progress.KNOWN
    assert p.offsets == {"T": {"G1": {0: 3}}}
    bad = len(table) - 1
    assert (
        str(config / "consumerOffset.json"),
        f"{bad} entries name a topic or group that cannot be a directory name: skipped",
    ) in p.problems
