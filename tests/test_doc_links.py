"""Every link in the repository's Markdown files goes somewhere: a relative link names a file
or directory that is in the repository (and, into a Markdown file, a heading that is there); a
link out of the repository is an absolute ``https`` URL. Code spans and fenced code blocks are
text, not links. No page points readers at the ``shared/spec`` notes, which are not part of
the repository."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from functools import cache
from pathlib import Path, PurePosixPath

import pytest

REPO = Path(__file__).resolve().parents[1]

# [text](target "title") and ![alt](target); [label]: target; <scheme://...>
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+[\"'(][^)]*)?\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.MULTILINE)
AUTOLINK = re.compile(r"<([a-zA-Z][a-zA-Z0-9+.-]*:[^>\s]*)>")
BARE_HTTP = re.compile(r"(?<![\w/])http://\S+")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)


@cache
def repository_files() -> frozenset[PurePosixPath]:
    """The files of the repository: what git tracks, else (no git, an unpacked sdist) what is
    on disk outside hidden and generated directories."""
    git = shutil.which("git")
    if git and (REPO / ".git").exists():
        out = subprocess.run(
            [git, "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True,
            check=True,
        ).stdout.decode()
        return frozenset(PurePosixPath(p) for p in out.split("\0") if p)
    skip = {".git", ".venv", "__pycache__", "node_modules", "dist", "build", "demo"}
    return frozenset(
        PurePosixPath(p.relative_to(REPO).as_posix())
        for p in REPO.rglob("*")
        if p.is_file() and not skip & set(p.relative_to(REPO).parts)
    )


@cache
def repository_dirs() -> frozenset[PurePosixPath]:
    return frozenset(parent for f in repository_files() for parent in f.parents)


def markdown_files() -> list[PurePosixPath]:
    return sorted(p for p in repository_files() if p.suffix == ".md" and (REPO / p).is_file())


def prose(markdown: str) -> str:
    """``markdown`` without fenced code blocks and code spans (blank lines keep line count)."""
    return CODE_SPAN.sub(lambda m: "\n" * m.group(0).count("\n"), unfenced(markdown))


def unfenced(markdown: str) -> str:
    """``markdown`` with the lines of fenced code blocks blank."""
    lines, fence = [], None
    for line in markdown.splitlines():
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)[0] * len(m.group(1))
            lines.append("")
        elif fence is not None:
            if line.strip().startswith(fence) and not line.strip().strip(fence[0]):
                fence = None
            lines.append("")
        else:
            lines.append(line)
    return "\n".join(lines)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: links to their text, lower case, punctuation dropped,
    spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    text = re.sub(r"<[^>]+>", "", text).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """Every heading's anchor, the second of a name ``-1``, the third ``-2``, as GitHub does;
    and explicit ``<a name=...>`` / ``id=...`` anchors."""
    seen: Counter[str] = Counter()
    found = set()
    for line in unfenced(markdown).splitlines():
        m = re.match(r"\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            found.add(base if not seen[base] else f"{base}-{seen[base]}")
            seen[base] += 1
    found |= set(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", markdown))
    return found


def links(markdown: str) -> list[str]:
    """The targets of ``markdown``'s links, in the order: inline, reference definitions,
    autolinks, bare ``http://`` text (which GitHub would link too)."""
    text, found = prose(markdown), []
    for pattern in (INLINE, REFERENCE, AUTOLINK, BARE_HTTP):
        found += [m.group(1) if m.groups() else m.group(0) for m in pattern.finditer(text)]
        text = pattern.sub(" ", text)
    return found


def problems(page: PurePosixPath, markdown: str | None = None) -> list[str]:
    """What is wrong with the links of ``page`` (its text, or ``markdown`` as if it were its
    text), one line each."""
    if markdown is None:
        markdown = (REPO / page).read_text()
    found = []
    if "shared/spec" in markdown:
        found.append("mentions shared/spec, which is not in the repository")
    for target in links(markdown):
        if SCHEME.match(target):
            if not target.startswith("https://"):
                found.append(f"{target}: a link out of the repository must be an https:// URL")
            continue
        path, _, anchor = target.partition("#")
        if path.startswith("/"):
            found.append(f"{target}: absolute path; link relative to {page}")
            continue
        if path:
            resolved = PurePosixPath(*_normalise(page.parent / path))
            if resolved.parts[:1] == ("..",):
                found.append(f"{target}: points outside the repository")
                continue
            if resolved not in repository_files() and resolved not in repository_dirs():
                found.append(f"{target}: {resolved} is not in the repository")
                continue
            headings = (REPO / resolved).read_text() if resolved.suffix == ".md" else None
        else:
            resolved, headings = page, markdown
        if anchor and headings is not None and anchor not in anchors(headings):
            found.append(f"{target}: {resolved} has no heading with the anchor #{anchor}")
    return found


def _normalise(path: PurePosixPath) -> list[str]:
    parts: list[str] = []
    for part in path.parts:
        if part in ("", "."):
            continue
        if part == ".." and parts and parts[-1] != "..":
            parts.pop()
        else:
            parts.append(part)
    return parts or ["."]


def test_the_repository_has_its_markdown_pages() -> None:
    pages = {str(p) for p in markdown_files()}
    assert {"README.md", "CHANGELOG.md", "docs/runbooks.md", "tests/README.md"} <= pages


@pytest.mark.parametrize("page", markdown_files(), ids=str)
def test_every_link_goes_somewhere_in_the_repository_or_to_https(page: PurePosixPath) -> None:
    assert problems(page) == []


def test_the_checker_finds_each_kind_of_broken_link() -> None:
    """The rules above, on a page made for it (as if it were docs/x.md)."""
    page = PurePosixPath("docs/example-that-is-checked.md")
    sample = """# Title

## Second heading: with `code`, and (punctuation)!

[ok](../README.md) [ok dir](../retentiond) [ok anchor](#second-heading-with-code-and-punctuation)
[ok ext](https://prometheus.io/docs/) [ok file anchor](../README.md#set-up)
[missing](nothing-here.md) [outside](../../elsewhere.md) [insecure](http://example.com/)
[bad anchor](#no-such-heading) [bad file anchor](../README.md#no-such-section)
[absolute](/etc/passwd) <ftp://example.com/x> see http://example.org/page

`[in a span](nowhere.md)`

```sh
[in a fence](nowhere.md) http://127.0.0.1:9465/metrics
```
"""
    found = problems(page, sample)
    wrong = [line.split(": ")[0] for line in found]
    assert wrong == [
        "nothing-here.md",
        "../../elsewhere.md",
        "http://example.com/",
        "#no-such-heading",
        "../README.md#no-such-section",
        "/etc/passwd",
        "ftp://example.com/x",
        "http://example.org/page",
    ], found
