"""`python -m ablate.external.convert KIND PATH... --pattern '{algo}_s{seed}' --out runs.csv`: what a
trainer wrote, as the tidy table `python -m ablate.stats RUNS --study STUDY.yaml` reads.

KIND is one of ablate.external.readers.READERS (tensorboard, trl, verl, summary, wandb: files below PATH)
or wandb-csv (a CSV exported from the W&B runs table, or a line-plot panel's CSV). Which run is which:

  --pattern P   a run's condition and seed from its path: P is matched against each directory (or file stem)
                below PATH, e.g. `{algo}_s{seed}` reads grpo_s3/runs/Nov28_host/events.out... as algo=grpo,
                seed 3; `lr{lr}/seed{seed}` spans two directories. Files under no match are listed, not read.
  --map CSV     a table with a `path` column (relative to the CSV) and the condition columns and `seed`: each
                path is one run's directory or file.
  wandb         without --pattern: each run's own config (in its run-<id>.wandb log, read by wandb's own
                reader: ablate.external.wandb_runs) gives `seed` and the --conditions keys.
  wandb-csv     the table's own columns (seed and --conditions), or --pattern on its Name column.

It prints which runs and metrics it found and one line per problem (a damaged event file, a path no
pattern matches, a run whose state is not finished), and writes the table atomically.
"""

from __future__ import annotations

import argparse
import io
import re
import sys
from pathlib import Path

import pandas as pd

from ablate.external.readers import READERS
from ablate.external.wandb_runs import runs_by_config, wandb_csv
from ablate.rundir.atomic import write_bytes

def compile_pattern(pattern: str) -> re.Pattern:
    """`{algo}_s{seed}` -> a regex with one named group per field (a field never spans a `/`)."""
    out, pos = [], 0
    for m in re.finditer(r"\{([A-Za-z_][\w.]*)\}", pattern):
        out.append(re.escape(pattern[pos:m.start()]))
        out.append(f"(?P<{m.group(1).replace('.', '__')}>[^/]+?)")
        pos = m.end()
    out.append(re.escape(pattern[pos:]))
    if "(?P<seed>" not in "".join(out):
        raise ValueError(f"--pattern {pattern!r} has no {{seed}} field: every run needs its seed")
    return re.compile("".join(out))


def identify(rel: Path, pattern: re.Pattern) -> tuple[int, dict[str, str]] | None:
    """(how many leading parts of `rel` name the run, its fields) for the first span of parts the pattern
    matches whole (a file's own name counts without its suffixes), else None."""
    parts = list(rel.parts)
    if parts:
        parts[-1] = parts[-1].split(".")[0] or parts[-1]
    width = pattern.pattern.replace("[^/]", "").count("/") + 1  # the directories the pattern spans
    for end in range(width, len(parts) + 1):
        m = pattern.fullmatch("/".join(parts[end - width:end]))
        if m:
            return end, {k.replace("__", "."): v for k, v in m.groupdict().items()}
    return None


def globs(glob: str | tuple[str, ...]) -> tuple[str, ...]:
    """A reader's file name glob(s) (ablate.external.readers.READERS) as a tuple."""
    return (glob,) if isinstance(glob, str) else tuple(glob)


def discover(root: Path, glob: str | tuple[str, ...]) -> list[Path]:
    return [root] if root.is_file() else sorted({p for g in globs(glob) for p in root.rglob(g) if p.is_file()})


def runs_by_pattern(roots: list[Path], glob, pattern: re.Pattern, problems: list[str]) -> dict:
    """run name -> (fields, files): every file below `roots` grouped by the directory the pattern named."""
    runs: dict[str, tuple[dict, list[Path]]] = {}
    for root in roots:
        base = root.parent if root.is_file() else root
        for path in discover(root, glob):
            rel = path.relative_to(base)
            found = identify(rel, pattern)
            if found is None:
                problems.append(f"{path}: the pattern {pattern.pattern!r} matches no directory of it; not read")
                continue
            end, fields = found
            name = "/".join([base.name, *rel.parts[:end]])
            runs.setdefault(name, (fields, []))[1].append(path)
    return runs


def runs_by_map(mapping: Path, glob, problems: list[str]) -> dict:
    table = pd.read_csv(mapping, dtype=str, keep_default_na=False)
    if "path" not in table.columns or "seed" not in table.columns:
        raise SystemExit(f"error: --map {mapping} needs a `path` and a `seed` column")
    runs = {}
    for i, row in table.iterrows():
        path = (mapping.parent / row["path"]) if not Path(row["path"]).is_absolute() else Path(row["path"])
        files = discover(path, glob) if path.exists() else []
        if not files:
            problems.append(f"--map {mapping.name} line {i + 2}: {path} holds no {' or '.join(globs(glob))}; run not read")
            continue
        runs[str(row["path"])] = ({k: v for k, v in row.items() if k != "path"}, files)
    return runs


def read_runs(kind: str, runs: dict, problems: list[str]) -> pd.DataFrame:
    """The tidy table of identified runs: their fields, `run`, then the reader's rows."""
    _, reader, _ = READERS[kind]
    parts = []
    for name, (fields, files) in sorted(runs.items()):
        frame = reader(files, problems, name)
        if frame is None:
            problems.append(f"{name}: nothing read; run left out of the table")
            continue
        if "step" not in frame.columns:
            frame.insert(0, "step", 0)
        for key, value in reversed(list(fields.items())):
            frame.insert(0, key, value)
        frame.insert(0, "run", name)
        parts.append(frame)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def found_lines(table: pd.DataFrame, fields: list[str]) -> list[str]:
    if not len(table):
        return ["found no runs"]
    per_run = table.groupby("run", sort=True)
    metrics = [c for c in table.columns if c not in {"run", "step", "started_at", *fields}]
    lines = [f"found {per_run.ngroups} run(s), {len(metrics)} metric(s): {', '.join(metrics[:30])}"
             + (" ..." if len(metrics) > 30 else "")]
    for name, rows in per_run:
        first = rows.iloc[0]
        what = ", ".join(f"{f}={first[f]}" for f in fields if f in rows.columns)
        steps = f"{rows['step'].nunique()} step(s)" if "step" in rows.columns else "1 row"
        lines.append(f"  {name}: {what}; {steps}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ablate.external.convert", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", choices=[*READERS, "wandb-csv"])
    p.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    p.add_argument("--pattern", help="a run's condition and seed from its path, e.g. '{algo}_s{seed}'")
    p.add_argument("--map", type=Path, help="CSV: path, condition columns, seed (paths relative to it)")
    p.add_argument("--conditions", default="", help="wandb / wandb-csv: the condition keys, e.g. algo,optim.lr")
    p.add_argument("--out", type=Path, required=True, help="the tidy table to write (.csv, .parquet or .jsonl)")
    args = p.parse_args(argv)
    missing = [str(x) for x in args.paths if not x.exists()]
    if missing:
        p.error(f"no such path: {', '.join(missing)}")
    try:
        pattern = compile_pattern(args.pattern) if args.pattern else None
    except (ValueError, re.error) as exc:
        p.error(str(exc))
    conditions = [c.strip() for c in args.conditions.split(",") if c.strip()]
    problems: list[str] = []
    table = _convert(args, pattern, conditions, problems, p)
    fields = [*conditions, *([] if pattern is None else [g.replace("__", ".") for g in pattern.groupindex]), "seed"]
    fields = [f for f in dict.fromkeys(fields) if f != "seed"] + ["seed"]
    for line in found_lines(table, list(dict.fromkeys(fields))):
        print(line)
    for line in problems:
        print(f"problem: {line}")
    if not len(table):
        return 1
    write_bytes(args.out, _encode(table, args.out))
    print(f"wrote {args.out}: {len(table)} row(s); next: python -m ablate.stats {args.out} --study STUDY.yaml")
    return 0


def _convert(args, pattern, conditions, problems, parser) -> pd.DataFrame:
    if args.kind == "wandb-csv":
        return pd.concat([wandb_csv(path, pattern, problems) for path in args.paths], ignore_index=True)
    glob = READERS[args.kind][0]
    if args.map is not None:
        runs = runs_by_map(args.map, glob, problems)
    elif pattern is not None:
        runs = runs_by_pattern(args.paths, glob, pattern, problems)
    elif args.kind == "wandb":
        return runs_by_config(args.paths, conditions, problems)
    else:
        parser.error("say which run is which: --pattern '{algo}_s{seed}' or --map runs_map.csv")
    return read_runs(args.kind, runs, problems)


def _encode(table: pd.DataFrame, out: Path) -> bytes:
    buf = io.BytesIO()
    suffix = out.suffix.lower()
    if suffix in (".parquet", ".pq"):
        table.to_parquet(buf, index=False)
    elif suffix in (".jsonl", ".ndjson", ".json"):
        buf.write(table.to_json(orient="records", lines=True).encode())
    else:
        table.to_csv(buf, index=False)
    return buf.getvalue()


if __name__ == "__main__":
    sys.exit(main())
