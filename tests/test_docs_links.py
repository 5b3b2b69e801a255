"""Every relative link of README.md and docs/*.md resolves: the file (or folder) exists and, for an
`#anchor` into one of our markdown files, a heading of that file slugs to it (GitHub's rule). The README's
map of docs/ and its layout listing are checked against the tree, so neither can go stale by hand."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)  # http:, https:, mailto:


def prose(text: str) -> str:
    """The markdown outside fenced code blocks (a `[x](y)` in code is not a link)."""
    return FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (not - or _), spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in prose(page.read_text()).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """`page: target (why)` for each relative link of `page` that does not resolve."""
    bad = []
    for target in LINK.findall(prose(page.read_text())):
        if EXTERNAL.match(target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{page.relative_to(root)}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{page.relative_to(root)}: {target} (no heading #{anchor} in {dest.name})")
    return bad


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    assert broken_links(page) == []


def test_a_broken_link_or_anchor_is_caught(tmp_path):
    (tmp_path / "other.md").write_text("# A title (`x=...`)\n\n## Twice\n\n## Twice\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md#a-title-x) [ok](other.md#twice-1) [ok](#here) [web](https://example.org/x)\n"
                    "# Here\n```\n[in code](nowhere.md)\n```\n"
                    "[gone](missing.md) [no anchor](other.md#nope) [dup](other.md#twice-2)\n")
    assert broken_links(page, tmp_path) == ["page.md: missing.md (no such file)",
                                            "page.md: other.md#nope (no heading #nope in other.md)",
                                            "page.md: other.md#twice-2 (no heading #twice-2 in other.md)"]
