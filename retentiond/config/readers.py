"""The readers of a key table: which of its keys a YAML or a Java properties file sets.

YAML is read strictly (a duplicate key is refused, not silently overwritten; the daemon's keys
are nested mappings); a properties file is read as the JVM reads it (``config.properties``),
and there only keys that look like ours are judged: the rest belong to the broker.
"""

from __future__ import annotations

from retentiond.config.keys import java_trim
from retentiond.config.problems import ConfigProblem
from retentiond.config.properties import parse_properties
from retentiond.config.table import Entry, KeyTable

__all__ = ["read_properties", "read_yaml"]


def read_yaml(
    data: bytes, file: str, table: KeyTable
) -> tuple[dict[str, Entry], list[ConfigProblem]]:
    """The table's keys in a YAML file (``yamlreader.read_yaml``: imported here, when a YAML
    file is read, so that a command on a properties file does not import PyYAML)."""
    from retentiond.config.yamlreader import read_yaml as read

    return read(data, file, table)


def read_properties(
    data: bytes, file: str, table: KeyTable
) -> tuple[dict[str, Entry], list[ConfigProblem]]:
    """The table's keys in the broker's own properties file: other keys are the broker's
    business and ignored, unless they look like a misspelling of ours or are refused."""
    # Properties.load(InputStream) reads ISO-8859-1, and so does the broker: decoding the same
    # way gives the very path strings (and so the same bytes on disk) the broker uses.
    text = data.decode("iso-8859-1")
    problems: list[ConfigProblem] = []
    entries: dict[str, Entry] = {}
    for number, raw_key, raw_value, error in parse_properties(text):
        if raw_key is None:
            problems.append(ConfigProblem(file, "", None, f"line {number}: {error}"))
            continue
        key = java_trim(raw_key)
        value = java_trim(raw_value)
        if error is not None:
            problems.append(ConfigProblem(file, key, value, f"line {number}: {error}"))
            continue
        if key in table.by_key:
            if key in entries:
                problems.append(
                    ConfigProblem(
                        file,
                        key,
                        value,
                        f"duplicate key: first at line {entries[key].line}, again at line "
                        f"{number} (the broker would silently keep the last one)",
                    )
                )
            else:
                entries[key] = Entry(value, number)
            continue
        if key in table.unsupported:
            if value:
                problems.append(ConfigProblem(file, key, value, table.unsupported[key]))
            continue
        message = table.foreign_key_message(key)
        if message is not None:
            problems.append(ConfigProblem(file, key, value, message))
    return entries, problems
