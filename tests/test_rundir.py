"""The run directory has one owner: `ablate.rundir.RunDir` spells its names, and no other module joins them."""

import ast
from pathlib import Path

import ablate
from ablate.eval import write_eval
from ablate.rundir import RunDir
from ablate.rundir.record import record_config
from ablate.rundir.status import RunStatus, read_status

ROOT = Path(ablate.__file__).parent
NAMES = {RunDir.HYDRA, RunDir.RECORD, RunDir.STATUS, RunDir.METRICS, RunDir.METRICS_STASH, RunDir.CHECKPOINTS,
         RunDir.LAST_CHECKPOINT, RunDir.MODEL, RunDir.EVAL, RunDir.SUMMARY, RunDir.SAMPLES, RunDir.PAIRS, RunDir.LOCK}


def joins(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) of every `path / "<run-dir name>"`, `.joinpath("<name>", ...)` and `.glob("eval/...")`."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.right, ast.Constant):
            args = [node.right]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("joinpath", "glob"):
            args = node.args
        else:
            continue
        for arg in args:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.split("/")[0] in NAMES:
                found.append((node.lineno, arg.value))
    return found


def test_no_module_outside_rundir_joins_a_run_directory_name():
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        if "rundir" in path.relative_to(ROOT).parts:
            continue
        offenders += [f"{path.relative_to(ROOT)}:{line}: {name!r}" for line, name in joins(ast.parse(path.read_text()))]
    assert not offenders, "ask RunDir for these paths:\n" + "\n".join(offenders)


def test_the_scan_finds_a_join():
    assert joins(ast.parse('p / "status.json"; q.joinpath("eval", "x"); r.glob("eval/*/summary.json"); s / "other"')) == [
        (1, "status.json"), (1, "eval"), (1, "eval/*/summary.json")]


def test_what_training_writes_is_where_run_dir_says(tmp_path):
    from omegaconf import OmegaConf

    run = RunDir(tmp_path / "run")
    assert not run.is_run() and run.regimes() == []
    status = RunStatus(run.root, heartbeat_s=0)
    status.start(stage="sft")
    status.complete()
    record_config(OmegaConf.create({"seed": 3}), run.root)
    write_eval(run.root, "tool", {"n_prompts": 0}, [])
    write_eval(run.root, "no_tool", {"n_prompts": 0}, [])
    (run.eval_root / "notes.txt").write_text("not a regime")
    assert read_status(run)["state"] == "completed" and run.status_file.is_file()
    assert run.record_file(RunDir.CONFIG).read_text().strip() == "seed: 3"
    assert run.regimes() == ["no_tool", "tool"] and all(run.evaluated(r) for r in run.regimes())
    assert run.samples_file("tool").is_file() and not run.evaluated("other")
    assert not run.is_run()  # the run's own copy of a config, without overrides, marks no run
    run.hydra_dir.mkdir()
    run.hydra_file(RunDir.CONFIG).write_text("seed: 3\n")
    assert run.is_run()  # Hydra's config and a status.json do
    run.status_file.unlink()
    assert not run.is_run()
    run.record_file(RunDir.OVERRIDES).write_text("- seed=3\n")
    assert run.is_run()  # as does the run's own copy of its overrides


def test_a_resumed_run_is_complete_only_with_its_status_model_and_every_regime(tmp_path):
    from omegaconf import OmegaConf

    from ablate.run import _prepared_and_complete

    run = RunDir(tmp_path)
    cfg = OmegaConf.create({"resume": "auto", "seed": 0})
    run.model_dir.mkdir()
    (run.model_dir / "config.json").write_text("{}")
    (run.model_dir / "model.safetensors").write_bytes(b"")
    run.status_file.write_text('{"state": "completed"}')
    write_eval(run, "no_tool", {}, [])
    (run.checkpoint_dir / "last.ckpt.tmp-999999999").parent.mkdir()
    (run.checkpoint_dir / "last.ckpt.tmp-999999999").write_bytes(b"half")  # a killed writer's leftover
    assert _prepared_and_complete(cfg, run, ["no_tool"])
    assert not (run.checkpoint_dir / "last.ckpt.tmp-999999999").exists()
    assert run.record_file(RunDir.CONFIG).is_file()
    assert not _prepared_and_complete(cfg, run, ["no_tool", "tool"])  # a regime not evaluated yet
    assert not _prepared_and_complete(OmegaConf.merge(cfg, {"resume": "never"}), run, ["no_tool"])
    run.status_file.write_text('{"state": "failed"}')
    assert not _prepared_and_complete(cfg, run, ["no_tool"])
