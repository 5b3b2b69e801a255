"""Numbers in docs/findings.md's prose must come from a rendered table, or say they are the paper's.

The tables between `<!-- claims:... -->` / `<!-- mechanisms:... -->` markers are rendered from the
committed reports; the prose around them is written by hand, and a number typed there can outlive the
method that produced it (001's "±0.015" of the replaced hierarchical bootstrap). `unbacked` lists every
decimal number of the prose that is
  - in no rendered table (the findings.md blocks, and every committed report's tables and CSVs under
    docs/findings, compared at the precision the prose quotes), and
  - not a declared value (a preset's effect, margin, threshold: conf/experiment/*.yaml), nor a wall
    time or size (a number followed by min, s, h, x, M, GB: the machine, not a finding), and
  - not marked as the paper's: `paper` within the few words before it, or `(paper)` right after.
`python -m tools.findings --check` fails on any (tests/test_findings.py runs it in CI).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

_NUMBER = re.compile(r"(?<![\w.@/:^-])[-+−±]?(\d+\.\d+)(?![\w.]*[/@])(?!\d)")
_BLOCKS = re.compile(r"<!-- (claims|mechanisms):[\w-]+ -->.*?<!-- /(claims|mechanisms) -->", re.S)
_CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)
_PAPER = re.compile(r"paper\W*(\w+\W+){0,6}$", re.I)
_UNIT = re.compile(r"^(\s*[-–]\s*\d+(\.\d+)?)?\s*(min|minutes?|s\b|h\b|hours?|ms|GB|GiB|MB|M\b|x\b|×|seconds?)")  # wall time, sizes: not findings
_TABLE_NUMBER = re.compile(r"\d+\.\d+(?:e-?\d+)?|\d+")
PAPER_MARK = "(paper)"


def _values(texts: Iterable[str]) -> set[float]:
    out: set[float] = set()
    for text in texts:
        for m in _TABLE_NUMBER.finditer(text):
            try:
                out.add(abs(float(m.group(0))))
            except ValueError:
                continue
    return out


REPLACED = "bootstrap_"  # comparisons.csv columns of the replaced hierarchical bootstrap: prose may not quote them


def _text(path: Path) -> str:
    """A committed file's text, less the columns of a replaced method (so prose cannot cite them)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix != ".csv" or REPLACED not in text.split("\n", 1)[0]:
        return text
    import csv
    import io

    rows = list(csv.reader(io.StringIO(text)))
    keep = [i for i, name in enumerate(rows[0]) if not name.startswith(REPLACED)]
    return "\n".join(",".join(row[i] for i in keep if i < len(row)) for row in rows)


def table_values(markdown: str, findings_dir: Path, conf_dir: Path | None) -> set[float]:
    """Every number of the rendered blocks, the committed reports and CSVs, and the presets."""
    texts = [m.group(0) for m in _BLOCKS.finditer(markdown)]
    for pattern in ("**/report.md", "**/committed.yaml", "**/claims.csv", "**/reach.csv", "**/comparisons.csv",
                    "**/mechanisms.csv"):  # the rendered reports' tables (not every curve point of curves.csv.gz)
        texts += [_text(p) for p in sorted(Path(findings_dir).glob(pattern))]
    if conf_dir is not None:
        texts += [p.read_text(encoding="utf-8") for p in sorted(Path(conf_dir).glob("experiment/*.yaml"))]
    return _values(texts)


def _backed(text: str, values: set[float], percent: bool) -> bool:
    decimals = len(text.split(".")[1])
    want = round(float(text), decimals)
    scale = 100.0 if percent else 1.0
    return any(round(v * scale, decimals) == want or round(v, decimals) == want for v in values)


def unbacked(markdown: str, values: set[float]) -> list[tuple[int, str, str]]:
    """(line, number, the line's text) of every prose number no table backs and nothing marks."""
    prose = _BLOCKS.sub(lambda m: "\n" * m.group(0).count("\n"), markdown)
    prose = _CODE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), prose)
    out = []
    for lineno, line in enumerate(prose.splitlines(), 1):
        if line.lstrip().startswith(("|", "#", "![")):  # a table, a heading, a figure: not prose
            continue
        for m in _NUMBER.finditer(line):
            after = line[m.end():]
            if _PAPER.search(line[: m.start()]) or after.lstrip().startswith(PAPER_MARK) or _UNIT.match(after):
                continue
            if not _backed(m.group(1), values, after.startswith("%")):
                out.append((lineno, m.group(0), line.strip()))
    return out


def check(doc: Path, findings_dir: Path, conf_dir: Path | None) -> list[str]:
    """One line per unbacked prose number of `doc`: where, which, and the fix."""
    text = doc.read_text(encoding="utf-8")
    found = unbacked(text, table_values(text, findings_dir, conf_dir))
    return [f"{doc}:{line}: {number} is in no rendered table and not marked as the paper's "
            f"(quote a table, or write '{PAPER_MARK}' after a paper's number): {context[:140]}"
            for line, number, context in found]
