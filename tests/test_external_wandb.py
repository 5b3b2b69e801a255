"""Issue 60: W&B runs as wandb itself writes them, to a verdict. Real offline runs (`wandb.init(mode="offline")`,
2 conditions x 3 seeds, logged over steps, finished; one failed, one killed before wandb.finish) are read
from their run-<id>.wandb logs (wandb 0.31 writes no config.yaml or wandb-summary.json offline) by wandb's
own reader, then `python -m ablate.stats` decides a declared claim. Never on the network: WANDB_MODE=offline,
error reporting off, every wandb directory under tmp."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap

import pandas as pd
import pytest
import yaml

from ablate.external.convert import main as convert_main
from ablate.external.wandb_runs import LOG_GLOB, inspect_run
from ablate.stats.__main__ import main as stats_main

pytest.importorskip("wandb", reason="the dev extra installs wandb (pip install -e '.[dev]')")

WRITE = textwrap.dedent("""
    import math, os, sys
    import wandb

    root, mode = sys.argv[1], sys.argv[2]
    def run(algo, seed, **config):
        return wandb.init(mode="offline", dir=root, project="ext", name=f"{algo}_s{seed}",
                          config={"algo": algo, "seed": seed, "optim": {"lr": 1e-3}, **config})
    if mode == "study":
        for seed in range(3):  # interleaved: every arm's seed s before any arm's seed s+1
            for algo, base in (("grpo", 0.40), ("dapo", 0.60)):
                r = run(algo, seed)
                for step in range(5):
                    r.log({"eval/accuracy": base + 0.01 * step + 0.005 * seed, "train/reward": 0.1 * step,
                           "train/kl": math.nan if (algo, seed, step) == ("dapo", 2, 4) else 0.01}, step=step)
                r.summary["best/accuracy"] = base + 0.05
                r.finish()
        r = run("grpo", 9)
        r.log({"eval/accuracy": 0.1}, step=0)
        r.finish(exit_code=1)
    else:  # killed before wandb.finish: no exit record
        r = run("dapo", 9)
        r.log({"eval/accuracy": 0.9}, step=0)
        os._exit(3)
""")


@pytest.fixture(scope="module")
def wandb_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("wandb_runs")
    env = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_ERROR_REPORTING": "false",
           "WANDB_DIR": str(root), "WANDB_CONFIG_DIR": str(root / "config"), "WANDB_CACHE_DIR": str(root / "cache"),
           "WANDB_DATA_DIR": str(root / "data")}
    env = {**os.environ, **env}
    done = subprocess.run([sys.executable, "-c", WRITE, str(root), "study"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    subprocess.run([sys.executable, "-c", WRITE, str(root), "killed"], env=env, capture_output=True, timeout=300)
    return root / "wandb"


def test_a_run_log_read_by_wandb_itself(wandb_dir):
    logs = sorted(wandb_dir.rglob(LOG_GLOB))
    assert len(logs) == 8
    runs = {}
    for path in logs:
        problems: list[str] = []
        run = inspect_run(path, problems, path.parent.name)
        runs[run.name] = (run, problems, path.parent.name)
    dapo, problems, where = runs["dapo_s2"]
    assert dapo.exit_code == 0 and dapo.config["optim.lr"] == 0.001 and dapo.config["seed"] == 2
    assert "_wandb" not in dapo.config and dapo.started_at
    frame = dapo.frame.set_index("step")
    assert list(frame.index) == [0, 1, 2, 3, 4]
    assert frame.loc[4, "eval/accuracy"] == pytest.approx(0.65)
    assert frame.loc[4, "best/accuracy"] == pytest.approx(0.65)  # set on the summary only: on the last step
    assert not any(c.startswith("_") for c in frame.columns)  # wandb's own _step, _runtime, _timestamp
    assert pd.isna(frame.loc[4, "train/kl"]) and frame.loc[3, "train/kl"] == pytest.approx(0.01)
    assert problems == [f"{where}: train/kl logged 1 non-finite value(s) (NaN or infinite); not used"]
    assert runs["grpo_s9"][0].exit_code == 1
    codes = sorted((r.exit_code for r, _, _ in runs.values()), key=str)  # the killed run: no exit record
    assert len(runs) == 8 and codes == [0] * 6 + [1, None]


def _mid_record(data: bytes) -> int:
    """An offset inside the payload of the record that holds the file's midpoint. A .wandb file is a 7-byte
    header then records of 7-byte header (crc u32, length u16, type u8) + payload (LevelDB's log format, one
    32 KiB block here): a cut that lands on a record boundary is a valid shorter log, and wandb rightly says
    nothing about it (CI once drew such a cut: the first log rglob found, halved)."""
    pos = 7
    while pos + 7 <= len(data):
        length = struct.unpack_from("<H", data, pos + 4)[0]
        if pos + 7 + length > len(data) // 2:
            return pos + 7 + length // 2
        pos += 7 + length
    raise AssertionError(f"no record holds the midpoint of a {len(data)}-byte log")


def test_a_damaged_run_log_is_named(wandb_dir, tmp_path):
    # the largest log: a finished run, never the killed one (its log may be the 7-byte header alone)
    log = max(wandb_dir.rglob(LOG_GLOB), key=lambda p: (p.stat().st_size, p.name))
    data = log.read_bytes()
    cut = tmp_path / "wandb" / log.parent.name / log.name
    cut.parent.mkdir(parents=True)
    cut.write_bytes(data[: _mid_record(data)])  # cut off mid-record: its exit record is lost
    problems: list[str] = []
    run = inspect_run(cut, problems, "cut")
    assert run.exit_code is None
    assert any(p.startswith(f"cut: {log.name}: wandb says: reached the end of an incomplete .wandb file")
               for p in problems)


def test_offline_runs_to_a_verdict(wandb_dir, tmp_path, capsys):
    out = tmp_path / "runs.csv"
    rc = convert_main(["wandb", str(wandb_dir), "--conditions", "algo", "--out", str(out)])
    lines = capsys.readouterr().out.splitlines()
    assert rc == 0
    assert lines[0] == "found 6 run(s), 4 metric(s): eval/accuracy, train/kl, train/reward, best/accuracy"
    assert sum("algo=dapo, seed=" in line and "5 step(s)" in line for line in lines) == 3
    problems = [line for line in lines if line.startswith("problem:")]
    assert any("the run exited with code 1; left out" in p for p in problems)
    assert any("the run has no exit record" in p or "logged no numbers" in p for p in problems)  # the killed run
    assert any("train/kl logged 1 non-finite value(s)" in p for p in problems)
    table = pd.read_csv(out)
    assert set(table["algo"]) == {"dapo", "grpo"} and sorted(set(table["seed"])) == [0, 1, 2]
    assert table["started_at"].notna().all()

    study = {"name": "wandb_study", "question": "Does DAPO beat GRPO?", "metrics": ["eval/accuracy"],
             "baselines": [{"family": {}, "baseline": {"algo": "grpo"}}],
             "claims": [{"id": "dapo_beats_grpo", "claim": "DAPO beats GRPO", "metric": "eval/accuracy",
                         "condition": "algo=dapo", "baseline": "algo=grpo", "direction": "higher", "effect": 0.05}],
             "plan": {"looks": [3]}, "test": "welch"}
    spec = tmp_path / "study.yaml"
    spec.write_text(yaml.safe_dump({"study": study}, sort_keys=False))
    rc = stats_main([str(out), "--study", str(spec), "--out", str(tmp_path / "report"), "--no-plots", "--quiet"])
    assert rc == 0
    claim = pd.read_csv(tmp_path / "report" / "claims.csv").iloc[0]
    assert claim["verdict"] == "replicated" and claim["n"] == 3 and claim["n_baseline"] == 3
    assert claim["estimate"] == pytest.approx(0.20) and claim["regime"] == "runs"


def test_run_directories_named_by_a_map(wandb_dir, tmp_path, capsys):
    """--map names the runs instead of their config: each listed directory's log through the same reader."""
    by_name = {inspect_run(p, [], "").name: p.parent for p in wandb_dir.rglob(LOG_GLOB)}
    mapping = tmp_path / "map.csv"
    mapping.write_text(f"path,algo,seed\n{by_name['dapo_s1']},dapo,1\n{by_name['grpo_s9']},grpo,9\n")
    out = tmp_path / "runs.csv"
    rc = convert_main(["wandb", str(wandb_dir), "--map", str(mapping), "--out", str(out)])
    lines = capsys.readouterr().out.splitlines()
    assert rc == 0 and lines[0].startswith("found 1 run(s)")
    assert any(f"{by_name['grpo_s9']}: the run exited with code 1; left out" in line for line in lines)
    table = pd.read_csv(out)
    assert table["step"].tolist() == [0, 1, 2, 3, 4] and table["eval/accuracy"].iloc[-1] == pytest.approx(0.645)
