"""The damage fuzzer (issue 45): every file `ablate.stats` reads, of a finished run directory and of a
committed report directory, damaged one at a time (truncated at a random offset, random bytes, NaN /
inf / wrong-type values, a 50 MB line, deleted). Loading never raises and names the damaged file in the
problems it reports; the full `ablate.stats` (in-process, its own main) never raises on a spread of the
same damages. Prints the counts."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import random
import shutil
import time
import traceback
from pathlib import Path

import pytest
import yaml

from ablate.stats.__main__ import main as stats_main
from ablate.stats.read.load import load_sweep
from stats_fixtures import write_sweep

FINDINGS = Path(__file__).resolve().parents[1] / "docs" / "findings" / "curriculum_ladder_study_rerun"
RUN_FILES = [".hydra/overrides.yaml", ".hydra/config.yaml", "status.json", "metrics.csv",
             "eval/default/summary.json", "eval/default/samples.jsonl"]
SWEEP_FILES = ["multirun.yaml"]  # Hydra's record of the sweep: the jobs it was to launch
ARCHIVE_FILES = ["runs.jsonl.gz", "prompts.csv.gz"]
BAD_VALUES = [float("nan"), float("inf"), -float("inf"), "high", -5, [1, 2], {"a": 1}, True]
CASES_PER_FILE = int(os.environ.get('DAMAGE_CASES', 32))  # x 8 files: a few hundred damaged directories
FULL_EVERY = 16  # every 16th also through the whole of `ablate.stats`


def _leaves(obj, path=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(obj, list) and obj:
        for i, v in enumerate(obj):
            yield from _leaves(v, (*path, i))
    else:
        yield path


def _set(obj, path, value):
    for key in path[:-1]:
        obj = obj[key]
    obj[path[-1]] = value


# The values each file's reader uses (a damaged value nothing reads is harmless, and nothing can name it).
USED = {
    "samples.jsonl": lambda p: p[0] in ("n", "n_correct", "n_answered", "mean_length", "tool_calls", "n_calc",
                                        "verdicts"),
    "summary.json": lambda p: True,  # its numbers (see _pick)
    "status.json": lambda p: p[0] in ("state", "duration_s", "attempts"),
    # (its config and sweeper_params are free-form mappings: another mapping there is not detectable damage)
    "runs.jsonl.gz": lambda p: (len(p) == 1 and p[0] not in ("config", "sweeper_params"))
                                or p[0] in ("summaries", "metrics", "overrides")
                                or p[:2] == ("status", "state"),
}
# where a reader takes text, other text is a valid value: damage it with what is not text
NOT_TEXT = [v for v in BAD_VALUES if not isinstance(v, str)]
LAST: list[str] = []  # the last value damaged, for the failure message


def _get(obj, path):
    for key in path:
        obj = obj[key]
    return obj


def _pick(obj, used, numbers_only: bool, rng: random.Random):
    """A leaf a reader uses (of a summary only its numbers: its text is free-form), and a value it cannot hold."""
    def number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    leaves = [(p, _get(obj, p)) for p in _leaves(obj) if p and used(p)]
    leaves = [(p, v) for p, v in leaves if number(v) or not (numbers_only or p[0] == "summaries")]
    path, old = rng.choice(leaves)
    # a training curve may be any finite number (a loss is negative): there only non-numbers are damage
    bad = rng.choice([v for v in (NOT_TEXT if isinstance(old, str) else BAD_VALUES) if path[0] != "metrics" or v != -5])
    LAST[:] = [f"{'/'.join(map(str, path))}: {old!r} -> {bad!r}"]
    return path, bad


def _bad_value(text: str, name: str, rng: random.Random) -> str:
    """One value a reader uses replaced by a NaN, inf or a value of the wrong type."""
    if name.endswith(".csv"):
        lines = text.split("\n")
        header = lines[0].split(",")
        counts = [j for j, h in enumerate(header) if h not in ("run", "seed", "condition", "regime", "id")]
        row = rng.randrange(1, len([x for x in lines if x]))
        cells = lines[row].split(",")
        cells[rng.choice(counts)] = rng.choice(["inf", "-inf", "high", "1e999"] + (["-3"] if "id" in header else []))
        lines[row] = ",".join(cells)
        return "\n".join(lines)
    if name.endswith(".jsonl"):
        lines = [x for x in text.split("\n") if x]
        i = rng.randrange(len(lines))
        obj = json.loads(lines[i])
        _set(obj, *_pick(obj, USED[name + ".gz" if name == "runs.jsonl" else name], False, rng))
        lines[i] = json.dumps(obj, allow_nan=True)
        return "\n".join(lines) + "\n"
    obj = yaml.safe_load(text) if name.endswith(".yaml") else json.loads(text)
    _set(obj, *_pick(obj, USED.get(name, lambda p: True), name == "summary.json", rng))
    return yaml.safe_dump(obj) if name.endswith(".yaml") else json.dumps(obj, allow_nan=True)


def damage(path: Path, kind: str, rng: random.Random) -> None:
    gz = path.suffix == ".gz"
    raw = path.read_bytes()
    plain = gzip.decompress(raw) if gz else raw
    if kind == "delete":
        path.unlink()
        return
    if kind == "truncate":  # of the bytes on disk: a copy cut short (not just its last newline)
        out = raw[: rng.randrange(len(raw.rstrip()))]
    elif kind == "random_bytes":
        start = rng.randrange(len(raw))
        out = raw[:start] + rng.randbytes(rng.randrange(1, 4096)) + raw[start + rng.randrange(0, 64):]
    elif kind == "bad_value":
        name = path.name[:-3] if gz else path.name
        text = _bad_value(plain.decode(), name, rng).encode()
        out = gzip.compress(text) if gz else text
    elif kind == "huge_line":  # 50 MB of one line, where a line ends
        cut = plain.find(b"\n", rng.randrange(len(plain))) + 1 or len(plain)
        text = plain[:cut] + b"x" * (50 << 20) + b"\n" + plain[cut:]
        out = gzip.compress(text, compresslevel=1) if gz else text
    else:
        raise ValueError(kind)
    path.write_bytes(out)


KINDS = ["truncate", "random_bytes", "bad_value", "delete"]


def _problems(sweep) -> str:
    """Everything `ablate.stats` tells a reader about its input: data problems, run reasons, jobs not found."""
    lines = [*sweep.warnings, *(f"{r.rel}: {i}" for r in sweep.runs for i in r.issues),
             *(f"{r.rel}: {r.reason}" for r in sweep.runs), *(reason for *_, reason in sweep.never_started)]
    return "\n".join(lines)


@pytest.fixture(scope="module")
def originals(tmp_path_factory):
    base = tmp_path_factory.mktemp("damage")
    sweep = write_sweep(base / "sweep", {"none": 0.4, "static": 0.55}, seeds=(0, 1), n_prompts=24, n_samples=4)
    for run in sweep.iterdir():  # as a sweep of ablate.train leaves them: Hydra's record of the launch, its own copy
        if run.is_dir():
            (run / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump({"hydra": {"mode": "MULTIRUN"}}))
            shutil.copytree(run / ".hydra", run / ".ablate")
    archive = base / "report"
    archive.mkdir()
    for name in ARCHIVE_FILES:
        shutil.copy(FINDINGS / name, archive / name)
    return sweep, archive


def test_damaged_files_are_named_and_never_raise(originals, tmp_path):
    sweep, archive = originals
    rng = random.Random(45)
    counts = {"directories": 0, "tracebacks": 0, "unnamed": 0, "full_runs": 0, "harmless": 0}
    failures: list[str] = []
    targets = ([(sweep, "0/" + f) for f in RUN_FILES] + [(sweep, f) for f in SWEEP_FILES]
               + [(archive, f) for f in ARCHIVE_FILES])
    targets = [t for t in targets if os.environ.get("DAMAGE_ONLY", t[1]) in t[1]]
    for source, rel in targets:
        start = time.perf_counter()
        for i in range(CASES_PER_FILE):
            kind = "huge_line" if i == 0 else KINDS[i % len(KINDS)]
            work = tmp_path / f"case{counts['directories']}"
            shutil.copytree(source, work)
            before = (work / rel).read_bytes()
            LAST.clear()
            damage(work / rel, kind, rng)
            counts["directories"] += 1
            if (work / rel).exists() and (work / rel).read_bytes() == before:
                counts["harmless"] += 1  # e.g. the bad value equals the one it replaced
                shutil.rmtree(work)
                continue
            try:
                told = _problems(load_sweep(work))
                if i % FULL_EVERY == 1:  # the whole report too: analysis, rendering, the archive it writes
                    counts["full_runs"] += 1
                    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                        stats_main([str(work), "--out", str(tmp_path / "out"), "--no-plots", "--resamples", "100",
                                    "--quiet"])
            except Exception:  # noqa: BLE001 - counted and shown: the test's point
                counts["tracebacks"] += 1
                failures.append(f"{rel} {kind}: {traceback.format_exc(limit=3)[-1500:]}")
                shutil.rmtree(work)
                continue
            if Path(rel).name not in told:
                counts["unnamed"] += 1
                failures.append(f"{rel} {kind} ({LAST[0][:200] if kind == 'bad_value' and LAST else ''}): "
                                f"not named; told:\n{told[:600]}")
            shutil.rmtree(work)
        print(f"{rel}: {time.perf_counter() - start:.1f} s")
    print("damage fuzzer: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    assert not failures, f"{len(failures)} failure(s):\n" + "\n---\n".join(failures[:8])


@pytest.mark.parametrize("text", [b"[1,2", b"[1,2]", b"\xff\xfe\x00", b"", b'{"attempts": "x", "history": 5, "started_at": "t"}',
                                  b'{"attempts": NaN, "history": [1, {"state": "failed"}]}'])
def test_a_resume_reads_a_damaged_status_json_without_a_traceback(tmp_path, text, caplog):
    from ablate.rundir.status import RunStatus

    (tmp_path / "status.json").write_bytes(text)
    status = RunStatus(tmp_path, heartbeat_s=0)
    with caplog.at_level("WARNING", logger="ablate.train"):
        status.start()
    assert status.data["state"] == "running" and status.data["attempts"] == 1
    record = json.loads((tmp_path / "status.json").read_text())
    assert record["attempts"] == 1
    if text == b"":  # an empty file is damaged too; only an absent one is a first attempt
        assert "JSONDecodeError" in record["history_restarted"]
    if text == b"[1,2]":
        assert "a JSON list, not an object" in record["history_restarted"]
    # a new history, said so in one line (and kept in the record): the damaged history is not carried over
    assert record["history_restarted"].startswith("status.json was damaged (")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "a new history starts here" in lines[0] and str(tmp_path) in lines[0]
    assert all(isinstance(h, dict) for h in record["history"]) and len(record["history"]) <= 1
    status.complete()
    again = RunStatus(tmp_path, heartbeat_s=0)
    again.start()  # the note moves into history with its attempt; the next attempt's record is whole
    record = json.loads((tmp_path / "status.json").read_text())
    assert "history_restarted" not in record and record["history"][-1]["history_restarted"].startswith("status.json")


def test_a_whole_status_json_keeps_its_history_and_says_nothing(tmp_path, caplog):
    from ablate.rundir.status import RunStatus

    for _ in range(3):
        status = RunStatus(tmp_path, heartbeat_s=0)
        with caplog.at_level("WARNING", logger="ablate.train"):
            status.start()
        status.complete()
    record = json.loads((tmp_path / "status.json").read_text())
    assert record["attempts"] == 3 and len(record["history"]) == 2 and not caplog.records
    assert not any("history_restarted" in h for h in [record, *record["history"]])
