"""The arithmetic behind the bench figures (bench/_common.py, bench/bench_limits.py), on hand-computed inputs.

The bench scripts print measurements and assert nothing; what can be wrong without a machine is how
they turn raw timings into step times, shares and FLOP/s, so that is what these check.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from _common import markdown_table, quartiles, read_metrics, shares, step_seconds  # noqa: E402
from bench_limits import limits  # noqa: E402


def test_step_seconds_are_differences_of_elapsed_time():
    rows = [{"time/elapsed_s": 2.5}, {"time/elapsed_s": 4.0}, {"time/elapsed_s": 7.0}]
    assert step_seconds(rows) == [2.5, 1.5, 3.0]


def test_read_metrics_merges_rows_of_one_step(tmp_path: Path):
    # Lightning's CSV logger may write one step's metrics on several rows; empty cells are absent values.
    path = tmp_path / "metrics.csv"
    path.write_text("step,a,b\n0,1.0,\n0,,2.0\n1,3.0,4.0\n")
    assert read_metrics(path) == [{"step": 0.0, "a": 1.0, "b": 2.0}, {"step": 1.0, "a": 3.0, "b": 4.0}]


def test_shares_take_the_median_of_each_phase():
    phases = [{"a": 1.0, "b": 3.0}, {"a": 3.0, "b": 1.0}, {"a": 2.0, "b": 6.0}]
    out = shares(phases, ["a", "b"])
    assert out["a"] == pytest.approx((2.0, 2.0 / 5.0))
    assert out["b"] == pytest.approx((3.0, 3.0 / 5.0))


def test_quartiles_inclusive():
    assert quartiles([1.0, 2.0, 3.0, 4.0, 5.0]) == (2.0, 4.0)


def test_markdown_table_shape():
    text = markdown_table(["x", "y"], [[1, "a"], [2, "b"]])
    assert text.splitlines() == ["| x | y |", "|---|---|", "| 1 | a |", "| 2 | b |"]


def test_limits_hand_computed():
    # 1,000 parameters; learn time 0.5 + 0.5 + 1 + 0 + 0 = 2 s for 100 real tokens (6 * 1e3 * 100 / 2 =
    # 3e5 FLOP/s) and 200 padded ones (8 * 1e3 * 200 / 2 = 8e5); 50 tokens kept in 0.5 s of generation
    # (100 tok/s) out of 80 decoding slots; the reference forward did 200 tokens in 0.5 s (400 tok/s).
    phase = {"reference_forward": 0.5, "policy_forward": 0.5, "backward": 1.0, "optimizer": 0.0, "learn_other": 0.0,
             "trained_tokens": 100.0, "padded_tokens": 200.0, "tokens": 50.0, "generate": 0.5, "decode_slots": 80.0}
    out = limits([phase], params=1_000, peak=1e6)
    assert out["learner_flops"] == pytest.approx(3e5)
    assert out["learner_frac"] == pytest.approx(0.3)
    assert out["computed_flops"] == pytest.approx(8e5)
    assert out["gen_tokens_per_s"] == pytest.approx(100.0)
    assert out["gen_flop_bound"] == pytest.approx(500.0)  # 1e6 / (2 * 1e3)
    assert out["gen_frac_flop"] == pytest.approx(0.2)
    assert out["forward_tokens_per_s"] == pytest.approx(400.0)
    assert out["gen_frac_forward"] == pytest.approx(0.25)
    assert out["slot_use"] == pytest.approx(50 / 80)


def readme_install_line(section: str) -> list[str]:
    """The words of the first `pip install` command under `section` of bench/README.md (continuations joined)."""
    text = (Path(__file__).resolve().parents[1] / "bench" / "README.md").read_text()
    text = text[text.index(section):]
    start = text.index("pip install")
    command = text[start:].split("\n")
    words, i = [], 0
    while True:
        line = command[i].rstrip()
        words += line.rstrip("\\").split()
        if not line.endswith("\\"):
            return words[2:]  # after "pip install"
        i += 1


def test_the_trl_environment_line_installs_every_dependency_of_ablate():
    from _common import project_requirements, requirement_name

    named = {requirement_name(w) for w in readme_install_line("## The comparison with TRL")}
    needed = {requirement_name(r) for r in project_requirements()} | {"trl"}
    assert "hydra-joblib-launcher" in needed and not needed - named, sorted(needed - named)


def test_bench_vs_trl_names_what_is_missing_before_it_starts(capsys):
    from bench_vs_trl import check_environment

    check_environment(installed=lambda name: True)  # all there: goes on
    with pytest.raises(SystemExit) as stop:
        check_environment(installed=lambda name: name != "hydra-joblib-launcher")
    assert "lacks hydra-joblib-launcher" in str(stop.value.code)
    assert "pip install 'hydra-joblib-launcher>=1.2'" in str(stop.value.code)
    with pytest.raises(SystemExit) as stop:  # the project's own environment: no TRL, skipped quietly
        check_environment(installed=lambda name: name != "trl")
    assert stop.value.code == 0 and "skipped" in capsys.readouterr().out


def test_bench_vs_trl_on_a_gpu_starts_both_from_one_model_with_a_config_that_passes_the_checks(tmp_path):
    """--device cuda --model qwen2.5-0.5b-shape (a toy --arch here): the saved random model is ablate's starting
    point too, ablate runs bf16-mixed with a bf16 reference, and that config passes every start-up check."""
    import argparse

    from _common import RLOO_BASE, compose
    from bench_vs_trl import CUDA_OVERRIDES, DRY_RUN, ablate_overrides, build_start, load_start

    from ablate.checks import check_config

    args = argparse.Namespace(**{**DRY_RUN, "device": "cuda", "threads": 1, "lr": 1e-4, "ablate": []})
    args.start = build_start(args, tmp_path / "start")
    model, tokenizer, _ = load_start(args.start)
    assert model.config.num_hidden_layers == 1 and model.config.vocab_size == 4096
    overrides = ablate_overrides(args, seed=0)
    assert set(CUDA_OVERRIDES) <= set(overrides)
    assert {"stage.init=model", f"model.name_or_path={args.start}"} <= set(overrides)
    check_config(compose([*RLOO_BASE, *overrides]))


def test_project_requirements_read_pyproject():
    from _common import project_requirements

    assert "torch==2.13.0" in project_requirements() and "vllm==0.32.0" in project_requirements("vllm")
    with pytest.raises(ValueError, match="no extra 'nope'"):
        project_requirements("nope")


def test_the_offline_install_takes_a_folder_of_wheels_onto_pythonpath_without_an_index(tmp_path):
    """bench/_wheels.sh (gpu_acceptance.sh / gpu_stages.sh --wheels DIR): DIR's wheels installed with pip --no-index
    --no-deps --target, first on PYTHONPATH; a folder without wheels is refused with the command that makes them."""
    import subprocess
    import zipfile

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / "offline_probe-0.1-py3-none-any.whl", "w") as whl:
        whl.writestr("offline_probe/__init__.py", "WHERE = __file__\n")
        whl.writestr("offline_probe-0.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: offline-probe\nVersion: 0.1\n")
        whl.writestr("offline_probe-0.1.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                                          "Tag: py3-none-any\n")
        whl.writestr("offline_probe-0.1.dist-info/RECORD", "")
    script = Path(__file__).resolve().parents[1] / "bench" / "_wheels.sh"
    run = lambda folder: subprocess.run(  # noqa: E731
        ["bash", "-c", f'source "{script}" && install_wheels "{folder}" && "$PYTHON" -c "import offline_probe as p; print(p.WHERE)"'],
        capture_output=True, text=True, env={**__import__("os").environ, "PYTHON": sys.executable,
                                             "PIP_INDEX_URL": "http://127.0.0.1:9/none"})
    done = run(wheels)
    assert done.returncode == 0, done.stderr
    assert "offline_probe-0.1" in done.stdout and "/site/offline_probe/__init__.py" in done.stdout
    empty = run(tmp_path)
    assert empty.returncode == 2 and "bench/prepare_wheels.sh" in empty.stderr


GPU_STUDY = Path(__file__).resolve().parents[1] / "bench" / "gpu_study.sh"
# a stand-in for python: `-m ablate.train` plans 3 jobs, completes one, starts a launcher worker and hangs;
# anything else is the real interpreter
FAKE_TRAIN = """#!/bin/bash
if [ "$1" = -m ] && [ "$2" = ablate.train ]; then
  for a in "$@"; do case $a in hydra.sweep.dir=*) dir=${a#hydra.sweep.dir=};; esac; done
  echo "[HYDRA] Joblib.Parallel(n_jobs=-1) is launching 3 jobs"
  mkdir -p "$dir/0" "$dir/0/checkpoints" && echo '{"state": "completed", "duration_s": 5}' > "$dir/0/status.json"
  sleep 300 & echo $! > "$dir/worker.pid"
  sleep 300
else
  exec PYTHON "$@"
fi
"""


def _gpu_study(tmp_path, *args, **env):
    import os
    import subprocess

    fake = tmp_path / "python"
    fake.write_text(FAKE_TRAIN.replace("PYTHON", sys.executable))
    fake.chmod(0o755)
    return subprocess.run(["bash", str(GPU_STUDY), "--out", str(tmp_path / "out"), *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHON": str(fake),
                                                       "GPU_STUDY_TMP": str(tmp_path / "groups"), **env})


def test_gpu_study_kills_only_its_own_group_at_the_deadline_and_returns_what_ran(tmp_path):
    """bench/gpu_study.sh on a CPU with a stand-in trainer: the deadline kills the group's launcher and its
    workers (not another process called ablate.train: it once ran `pkill -f ablate.train`), the group counts
    the 3 jobs the launcher planned (not the 1 directory made), and its tarball still comes back."""
    import subprocess
    import tarfile

    bystander = subprocess.Popen(["bash", "-c", "exec -a 'python -m ablate.train bystander' sleep 60"])
    try:
        done = _gpu_study(tmp_path, "--deadline", "4", "--accelerator", "cpu", "--smoke", "threshold_study", "0;1",
                          GPU_STUDY_MIN_S="1")
        assert bystander.poll() is None, "gpu_study.sh killed a process outside its group"
    finally:
        bystander.kill()
    assert done.returncode == 1, done.stdout + done.stderr
    assert "== seeds 0: exit 137" in done.stdout and "1 of 3 runs completed" in done.stdout
    assert "seeds 0 incomplete; stopping" in done.stdout and "== seeds 1" not in done.stdout
    worker = int((tmp_path / "groups" / "threshold_study_look1_0" / "worker.pid").read_text())
    assert not Path(f"/proc/{worker}").exists() or "Z" in Path(f"/proc/{worker}/stat").read_text().split()[2]
    with tarfile.open(tmp_path / "out" / "threshold_study_look1_0.tgz") as tar:
        names = tar.getnames()
    assert "threshold_study_look1_0/0/status.json" in names and not any("checkpoints" in n for n in names)


def test_gpu_study_starts_no_group_it_cannot_finish(tmp_path):
    done = _gpu_study(tmp_path, "--deadline", "30", "threshold_study", "0;1")
    assert done.returncode == 0, done.stderr
    assert "== seeds 0: not started" in done.stdout and not (tmp_path / "groups").exists()


def _gpu_step(*args: str) -> str:
    import os
    import subprocess

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    done = subprocess.run([sys.executable, str(root / "bench" / "gpu_step.py"), *args, "--smoke"], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


GPU_STAGES = Path(__file__).resolve().parents[1] / "bench" / "gpu_stages.sh"


def _stages(tmp_path, *args: str) -> str:
    """bench/gpu_stages.sh --smoke (the lever stages' code on the CPU at tiny shapes) with this interpreter."""
    import os
    import subprocess

    env = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(GPU_STAGES.parents[1] / "src")}
    done = subprocess.run(["bash", str(GPU_STAGES), "--smoke", "--out", str(tmp_path / "out"), *args], env=env,
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_the_papers_lever_stages_fit_in_six_minutes():
    """--papers-levers: env and the lever stages, whose kill limits sum to at most 360 s (issue 57's slot)."""
    import re

    text = GPU_STAGES.read_text()
    limits = {name: int(s) for name, s in re.findall(r"^(?:stage|opt_in|on_gpu) (\w+) (\d+) ", text, re.M)}
    levers = re.search(r"^LEVERS=(\S+)$", text, re.M).group(1).split(",")
    assert set(levers) == {"env", "sampling", "decode_eager", "learn", "decode_compiled", "rloo_papers_fast", "trl"}
    assert sum(limits[name] for name in levers) <= 360, {name: limits[name] for name in levers}


def test_the_staged_gpu_script_runs_its_lever_stages_on_a_cpu_and_prints_each_figure(tmp_path):
    """bench/gpu_stages.sh --smoke --stages sampling,decode_eager,learn: each stage exits 0 under its limit and
    prints its figures (a stage killed at its limit still reports what it finished): sampling's two settings, the
    eager decode variants with their profiler windows, the three learner variants (the compiled one traced by the
    eager backend); the default (GPU) stages are skipped. And the vocabulary bench."""
    out = _stages(tmp_path, "--stages", "sampling,decode_eager,learn")
    for name in ("sampling", "decode_eager", "learn"):
        assert f"== stage {name}: exit 0" in out
    assert "== stage rloo_papers: not a --smoke stage" in out and "== stage decode_compiled" not in out
    assert "sample RL (T=1): 4 rows x 5000 columns" in out and "sample evaluation (T=0.6" in out
    for name in ("eager", "eager_bf16"):
        assert f"decode {name}: 4 rows" in out and "median step" in out
    assert out.count("profile of 2 steps: wall") == 2  # the smoke cuts the window to 2
    for name in ("chunked", "fused", "fused_compiled"):
        assert f"learn {name}: 128 tokens" in out
    assert "vocab fused on cpu" in _gpu_step("vocab", "fused", "--rows", "8")


@pytest.mark.slow
def test_the_staged_gpu_scripts_papers_levers_run_on_a_cpu(tmp_path):
    """--smoke --papers-levers, every stage: the compiled decode variants free their cache and decode again, the
    two papers-setting steps run with rollout.dtype=bfloat16 rollout.compile=true (compiled graphs counted), and
    the TRL comparison's CPU dry run ends (or says TRL is not installed)."""
    import json

    out = _stages(tmp_path, "--papers-levers")
    for name in ("env", "sampling", "decode_eager", "learn", "decode_compiled", "rloo_papers_fast", "trl"):
        assert f"== stage {name}: exit 0" in out
    assert out.count("release: the static cache freed; a new chunk") == 3
    steps = [json.loads(line) for line in (tmp_path / "out" / "steps_fast.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2] and all(s["compiled_graphs"] >= 1 for s in steps)
    assert "ratio TRL / ablate" in out or "bench_vs_trl: skipped" in out


@pytest.mark.slow
def test_the_gpu_step_bench_runs_its_compiled_variants_on_a_cpu():
    """The compiled variants (inductor's C++ on the CPU: minutes): stock and folded attention, and the learner
    with its decoder compiled."""
    decode = _gpu_step("decode", "--variants", "compiled_stock_bf16,compiled_bf16", "--backend", "inductor")
    assert "decode compiled_stock_bf16" in decode and "decode compiled_bf16" in decode
    assert "learn fused_compiled" in _gpu_step("learn", "--variants", "fused_compiled", "--backend", "inductor")
