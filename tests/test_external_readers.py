"""Issue 60: readers of what trainers write, each to the tidy table `python -m ablate.stats RUNS` reads.
TensorBoard files here are written by torch.utils.tensorboard.SummaryWriter (TRL's and verl's writer);
TRL's own trainer_state.json and event files are in test_external_trl.py."""

from __future__ import annotations

import csv
import json

import pandas as pd
import pytest

from ablate.external.convert import compile_pattern, identify, main as convert_main

pytest.importorskip("tensorboard", reason="the tensorboard extra (pip install ablate-rl[tensorboard])")


def write_events(run_dir, values: dict[str, list[float]]):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(run_dir))
    for tag, series in values.items():
        for step, v in enumerate(series):
            writer.add_scalar(tag, v, step)
    writer.close()


def convert(capsys, *argv) -> tuple[int, list[str]]:
    rc = convert_main([str(a) for a in argv])
    return rc, capsys.readouterr().out.splitlines()


def test_pattern_spans_directories_and_file_stems():
    p = compile_pattern("lr{lr}/seed{seed}")
    assert identify(__import__("pathlib").Path("x/lr1e-3/seed4/runs/events.out"), p) == (3, {"lr": "1e-3", "seed": "4"})
    p = compile_pattern("{algo}_s{seed}")
    assert identify(__import__("pathlib").Path("dapo_s2.json"), p) == (1, {"algo": "dapo", "seed": "2"})
    with pytest.raises(ValueError, match="no \\{seed\\}"):
        compile_pattern("{algo}")


def test_tensorboard_runs_and_a_damaged_event_file(tmp_path, capsys):
    for algo, base in (("grpo", 0.1), ("dapo", 0.3)):
        for seed in range(2):
            write_events(tmp_path / "logs" / f"{algo}_s{seed}" / "tb", {"reward": [base, base + 0.1 * (seed + 1)],
                                                                         "val/acc": [base / 2, base]})
    broken = tmp_path / "logs" / "dapo_s1" / "tb" / "events.out.tfevents.0.broken"
    good = next((tmp_path / "logs" / "dapo_s0" / "tb").glob("events.out.tfevents.*")).read_bytes()
    broken.write_bytes(good[:30] + b"\xff" * 40)  # a header, then garbage where the records were
    (tmp_path / "logs" / "stray").mkdir()
    write_events(tmp_path / "logs" / "stray", {"reward": [1.0]})
    out = tmp_path / "runs.csv"
    rc, lines = convert(capsys, "tensorboard", tmp_path / "logs", "--pattern", "{algo}_s{seed}", "--out", out)
    assert rc == 0
    assert lines[0] == "found 4 run(s), 2 metric(s): reward, val/acc"
    assert any("logs/dapo_s1: algo=dapo, seed=1; 2 step(s)" in line for line in lines)
    problems = [line for line in lines if line.startswith("problem:")]
    assert any("logs/dapo_s1: event file events.out.tfevents.0.broken is damaged or cut off after 0 record(s)" in p
               for p in problems)
    assert any("stray" in p and "matches no directory" in p for p in problems)
    table = pd.read_csv(out)
    # a file cut inside its last record: the records before it are read, the loss is named
    from ablate.external.readers import read_tensorboard

    cut = tmp_path / "cut" / "events.out.tfevents.1.cut"
    cut.parent.mkdir()
    cut.write_bytes(good[:-5])
    found: list[str] = []
    frame = read_tensorboard([cut], found, "cut")
    assert frame["reward"].tolist() == pytest.approx([0.3, 0.4]) and frame["val/acc"].tolist()[:1] == pytest.approx([0.15])
    assert len(found) == 1 and "is damaged or cut off after" in found[0] and "readable scalar(s) used" in found[0]
    last = table[(table["algo"] == "dapo") & (table["seed"] == 1) & (table["step"] == 1)].iloc[0]
    assert last["reward"] == pytest.approx(0.5) and last["val/acc"] == pytest.approx(0.3)
    assert table["started_at"].notna().all()


def verl_console_line(data: dict, step: int) -> str:
    """verl's LocalLogger line: concat_dict_to_str in verl/utils/logger/aggregate_logger.py (volcengine/verl,
    2026): `step:N` then `key:pprint.pformat(value)` for each numbers.Number, joined by ` - `."""
    import numbers
    import pprint

    return " - ".join([f"step:{step}"] + [f"{k}:{pprint.pformat(v)}" for k, v in data.items()
                                          if isinstance(v, numbers.Number)])


def verl_file_line(data: dict, step: int) -> str:
    """verl's FileLogger line (verl/utils/tracking.py): orjson.dumps({"step": step, "data": data},
    OPT_SERIALIZE_NUMPY), which writes numpy scalars as numbers and NaN as null."""
    return json.dumps({"step": step, "data": {k: None if isinstance(v, float) and v != v else float(v)
                                              for k, v in data.items()}})


def test_verl_console_and_file_logger(tmp_path, capsys):
    from decimal import Decimal

    import numpy as np

    for algo in ("grpo", "dapo"):
        for seed in range(2):
            run = tmp_path / "logs" / f"{algo}_s{seed}"
            run.mkdir(parents=True)
            lines = ["(TaskRunner pid=1) Training Progress: 0%", "(TaskRunner pid=1) Initial validation metrics: "
                     "{'val-core/gsm8k/reward/mean@1': 0.25}"]
            for step in (1, 2):
                data = {"critic/score/mean": np.float64(0.1 * step + seed), "actor/entropy": 1.5, "actor/ppo_kl": 0,
                        "training/epoch": np.int64(0), "actor/pg_clipfrac_lower": float("nan"), "done": True,
                        "actor/lr": 1e-06, "timing_s/gen": np.float32(2.5), "misc/ratio": Decimal("0.5")}
                lines.append(f"(TaskRunner pid=1) {verl_console_line(data, step)}")
            (run / "train.log").write_text("\n".join(lines) + "\n")
    # the file logger at $VERL_FILE_LOGGER_PATH=<run>/metrics.log (known by its lines), and a rollout dump beside it
    (tmp_path / "logs" / "dapo_s1" / "metrics.log").write_text(
        verl_file_line({"critic/score/mean": np.float64(9.0), "actor/kl": float("nan")}, 3) + "\n{not json\n")
    (tmp_path / "logs" / "dapo_s1" / "rollouts").mkdir()
    (tmp_path / "logs" / "dapo_s1" / "rollouts" / "3.jsonl").write_text(
        json.dumps({"input": "q", "output": "a", "gts": "4", "score": 1.0, "step": 3}) + "\n")
    out = tmp_path / "runs.csv"
    rc, lines = convert(capsys, "verl", tmp_path / "logs", "--pattern", "{algo}_s{seed}", "--out", out)
    assert rc == 0 and lines[0] == ("found 4 run(s), 6 metric(s): critic/score/mean, actor/entropy, actor/ppo_kl, "
                                    "training/epoch, actor/lr, timing_s/gen")
    problems = [line for line in lines if line.startswith("problem:")]
    assert any("metrics.log line(s) 2 unreadable (not JSON); not used" in p for p in problems)
    assert any("3.jsonl line 1 is not verl's file logger's" in p and "not read" in p for p in problems)
    assert any("dapo_s1: actor/pg_clipfrac_lower logged 2 non-finite value(s)" in p for p in problems)
    assert any("dapo_s1: actor/kl logged 1 non-finite value(s)" in p for p in problems)
    assert any("train.log line 3: \"misc/ratio:Decimal('0.5')\" is not key:number; not used" in p for p in problems)
    table = pd.read_csv(out)
    run = table[(table["algo"] == "dapo") & (table["seed"] == 1)].sort_values("step")
    assert run["step"].tolist() == [1, 2, 3] and run["critic/score/mean"].tolist() == pytest.approx([1.1, 1.2, 9.0])
    assert run["timing_s/gen"].tolist()[:2] == pytest.approx([2.5, 2.5]) and run["actor/lr"].iloc[0] == 1e-06
    assert not {"done", "val-core/gsm8k/reward/mean@1"} & set(table.columns)  # a bool; a line that is no metric line
    # the file logger's default place, <VERL_FILE_LOGGER_ROOT>/<project>/<experiment>.jsonl: the run is the file
    (tmp_path / "files" / "proj").mkdir(parents=True)
    for name, score in (("grpo_s0", 0.2), ("dapo_s0", 0.4)):
        (tmp_path / "files" / "proj" / f"{name}.jsonl").write_text(
            "".join(verl_file_line({"critic/score/mean": score + step}, step) + "\n" for step in (1, 2)))
    rc, lines = convert(capsys, "verl", tmp_path / "files", "--pattern", "{algo}_s{seed}", "--out", out)
    assert rc == 0 and lines[0] == "found 2 run(s), 1 metric(s): critic/score/mean"
    assert pd.read_csv(out).groupby("algo")["critic/score/mean"].last().to_dict() == pytest.approx(
        {"dapo": 2.4, "grpo": 2.2})


def test_wandb_runs_table_export(tmp_path, capsys):
    """The W&B runs table's CSV export as the web app writes it (ablate.external.wandb_runs): every cell quoted,
    Name, State, Notes ('-' when empty), User, Tags, Created, Runtime, Sweep, then the config columns (here
    algo, seed, lr, a bool), then the summary metrics (here with wandb's own _step)."""
    export = tmp_path / "wandb_export.csv"
    names = ["dapo_s0", "dapo_s1", "grpo_s0", "grpo_s1", "grpo_s2"]
    pd.DataFrame({
        "Name": names, "State": ["finished"] * 4 + ["crashed"], "Notes": ["-"] * 5, "User": [""] * 5,
        "Tags": [""] * 5, "Created": [f"2025-12-13T23:2{i}:41.000Z" for i in range(5)], "Runtime": [45, 47, 45, 46, 3],
        "Sweep": [""] * 5, "algo": [n[:4] for n in names], "seed": [0, 1, 0, 1, 2], "lr": [1e-3] * 5,
        "use_kl": ["false"] * 5, "_step": [99] * 5, "eval/accuracy": [0.6, 0.62, 0.5, 0.51, 0.1],
    }).to_csv(export, index=False, quoting=csv.QUOTE_ALL)
    out = tmp_path / "runs.csv"
    rc, lines = convert(capsys, "wandb-csv", export, "--conditions", "algo", "--out", out)
    assert rc == 0 and lines[0].startswith("found 4 run(s)")
    assert any("grpo_s2): state 'crashed', not finished; left out" in line for line in lines)
    assert any(line.startswith("  dapo_s1: algo=dapo, seed=1") for line in lines)
    table = pd.read_csv(out)
    assert sorted(table["run"]) == ["dapo_s0", "dapo_s1", "grpo_s0", "grpo_s1"]
    assert {"algo", "seed", "started_at", "eval/accuracy"} <= set(table.columns)
    assert not {"_step", "State", "Notes", "Name"} & set(table.columns)
    rc, _ = convert(capsys, "wandb-csv", export, "--pattern", "{algo}_s{seed}", "--out", out)  # or from the names
    assert rc == 0 and sorted(pd.read_csv(out)["run"]) == ["dapo_s0", "dapo_s1", "grpo_s0", "grpo_s1"]


def test_wandb_line_plot_export(tmp_path, capsys):
    """A line plot's CSV export: its x axis first (here `epoch`), then `<run> - <metric>` with __MIN/__MAX
    companions, and wandb's own `<run> - _step` series."""
    export = tmp_path / "panel.csv"
    pd.DataFrame({"epoch": [0, 1], "dapo_s0 - _step": [0, 10], "dapo_s0 - train/reward": [0.1, 0.4],
                  "dapo_s0 - train/reward__MIN": [0, 0], "dapo_s0 - train/reward__MAX": [1, 1],
                  "grpo_s0 - train/reward": [0.1, 0.2]}).to_csv(export, index=False, quoting=csv.QUOTE_ALL)
    out = tmp_path / "runs.csv"
    rc, _ = convert(capsys, "wandb-csv", export, "--pattern", "{algo}_s{seed}", "--out", out)
    table = pd.read_csv(out).sort_values(["algo", "step"])
    assert rc == 0 and table["train/reward"].tolist() == pytest.approx([0.1, 0.4, 0.1, 0.2])
    assert table["step"].tolist() == [0, 1, 0, 1]
    assert not {"train/reward__MIN", "_step", "epoch"} & set(table.columns)


def test_json_summaries_and_a_map(tmp_path, capsys):
    (tmp_path / "res").mkdir()
    for name, acc in (("a.json", 0.5), ("b.json", 0.6)):
        (tmp_path / "res" / name).write_text(json.dumps({"eval": {"acc": acc}, "label": "x"}))
    (tmp_path / "res" / "c.json").write_text("{broken")
    mapping = tmp_path / "map.csv"
    mapping.write_text("path,algo,seed\nres/a.json,grpo,0\nres/b.json,dapo,0\nres/c.json,dapo,1\nres/d.json,grpo,1\n")
    out = tmp_path / "runs.csv"
    rc, lines = convert(capsys, "summary", tmp_path / "res", "--map", mapping, "--out", out)
    assert rc == 0
    problems = [line for line in lines if line.startswith("problem:")]
    assert any("c.json unreadable" in p for p in problems) and any("res/d.json holds no" in p for p in problems)
    table = pd.read_csv(out)
    assert table.set_index("algo")["eval/acc"].to_dict() == {"grpo": 0.5, "dapo": 0.6}
