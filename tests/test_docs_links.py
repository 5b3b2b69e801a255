"""Every relative link of README.md and docs/*.md resolves: the file (or folder) exists and, for an
`#anchor` into one of our markdown files, a heading of that file slugs to it (GitHub's rule). The README's
map of docs/ and its layout listing are checked against the tree, so neither can go stale by hand."""

import re
import subprocess
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


def section(title: str) -> str:
    """The README's text under `## title`, up to the next `## `."""
    text = (ROOT / "README.md").read_text()
    start = text.index(f"\n## {title}\n") + len(title) + 5
    end = text.find("\n## ", start)
    return text[start:end if end >= 0 else None]


def first_column(table: str) -> list[str]:
    return [row.split("|")[1].strip() for row in table.splitlines() if row.startswith("| ") and "---" not in row][1:]


def test_the_readme_maps_every_page_of_docs():
    listed = [re.search(r"\]\((docs/[^)]+)\)", cell).group(1) for cell in first_column(section("Documentation"))]
    assert sorted(listed) == sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))


def test_the_readme_lists_every_config_group_and_real_options():
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from ablate.config import CONF_DIR

    rows = [row.split("|") for row in section("Config groups").splitlines() if row.startswith("| `")]
    groups = {cells[1].strip().strip("`").rstrip("/"): cells[2] for cells in rows}
    on_disk = {p.name for p in CONF_DIR.iterdir() if p.is_dir() and p.name != "hydra"}
    assert sorted(groups) == sorted(on_disk | {"hydra/launcher"}), "README's config groups table vs conf/"
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        for group, chooses in groups.items():
            options = loader.get_group_options(group)
            options_named = re.findall(r"\(([^()]*)\)\s*$", chooses.strip())  # the options: the last (...)
            for named in re.findall(r"`([\w.*-]+)`", options_named[0] if options_named else ""):
                assert any(re.fullmatch(named.replace("*", r"\w*"), o) for o in options), (group, named, options)


def test_the_readme_layout_matches_the_tree():
    """Every tracked top-level folder is listed; every path the listing names exists or is git-ignored."""
    block = section("Layout").split("```")[1]
    entries = {line.split()[0]: line for line in block.splitlines() if line and not line[0].isspace()}
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    top = {path.split("/")[0] for path in tracked.splitlines() if "/" in path}
    assert sorted(e.split("/")[0] for e in entries) == sorted(top), "README's Layout vs the tracked folders"
    entry = ""
    for line in block.splitlines():
        entry = line.split()[0] if line and not line[0].isspace() else entry
        for name in re.findall(r"(?<![\w./-])((?:[\w.-]+/)+(?:[\w.-]+)?|[\w-]+\.(?:py|md|yaml))", line):
            here = [ROOT / name, ROOT / entry / name]
            ignored = subprocess.run(["git", "check-ignore", "-q", name], cwd=ROOT).returncode == 0
            assert any(p.exists() for p in here) or ignored, f"README's Layout names {name}, which is not there"


def test_the_quick_start_is_the_ci_test_command():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    command = ci[ci.index("# The README's test command:") + 1]
    quick = section("Quick start").split("```")[1]
    assert command in quick.splitlines()
