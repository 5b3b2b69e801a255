"""ablate's RLOO step against TRL's `RLOOTrainer` on the same problem (figures printed, not asserted).

    # TRL lives in its own environment, never in the project's:
    python3 -m venv /work/trl-venv
    /work/trl-venv/bin/pip install torch==2.13.0 trl==1.16.0 transformers==5.23.0 lightning datasets \
        hydra-core hydra-joblib-launcher omegaconf numpy scipy statsmodels pandas pyarrow matplotlib rich tqdm filelock
    /work/trl-venv/bin/python bench/bench_vs_trl.py                      # 2 rounds x 16 steps each
    /work/trl-venv/bin/python bench/bench_vs_trl.py --steps 40 --rounds 3 --profile

Both trainers get the shipped tiny SFT model (`builtin:tiny-sft`), the Countdown training prompts in the
compact template, in the SAME order (the prompts ablate's uniform sampler draws for the seed, handed to
TRL as an unshuffled dataset), B prompts x k samples per step (one generation batch = one optimizer
step, micro-batches of 64 sequences), max new tokens, learning rate (constant, no warm-up), AdamW,
gradient clipping at 1.0, temperature 1 / top-p 1 / no top-k, a KL coefficient of 1e-3 to the frozen
starting model (so both run a reference forward), float32 on the CPU, no gradient checkpointing, and
TinyZero's reward through ablate's `Reward`. What each library does its own way: the KL (ablate: k3 in
the loss; TRL RLOO: k1 summed per sequence, subtracted from the reward), the importance weight (ablate:
sequence-level, truncated at 2; TRL: PPO clip 0.2; both are 1 on-policy), the loss aggregation (ablate:
token mean; TRL: per-sequence sum, mean over sequences) and ablate's entropy bonus of 1e-3.

Each (library, seed) run is a separate process; rounds alternate the order (A B, B A, A B, ...; round r
uses seed r for both), so a busy spell or a drifting load on a shared machine hits both sides alike. Per run: seconds per step (wall time between
consecutive optimizer steps, including the framework's loop and logging) after `--warmup` steps, the
phase breakdown, generated tokens per second of generation time, the mean training reward over the
last quarter of steps, and a held-out reward (`--eval-prompts` test prompts x `--eval-samples`
samples, training sampling settings, one evaluator for both models). `--profile` adds a cProfile of a
few steps of each, the top functions by own time. `--ablate KEY=VALUE ...` adds overrides to ablate's
runs only (recorded in the settings), e.g. `--ablate stage.reference_dtype=bfloat16`.

On a GPU, at the papers' model shape (Qwen2.5-0.5B's architecture, random weights, the tiny tokenizer;
every rollout runs to the token cap), one environment for both (an offline machine: bench/prepare_wheels.sh
DIR --trl, then PYTHONPATH through bench/gpu_acceptance.sh's install, or pip install --target):

    python bench/bench_vs_trl.py --device cuda --model qwen2.5-0.5b-shape --batch-prompts 32 --k 8 \
        --max-new-tokens 256 --micro-batch 8 --steps 4 --warmup 1 --rounds 1
    python bench/bench_vs_trl.py --dry-run     # the same code path on the CPU, a 1-layer shape, seconds

`--device cuda`: both in bf16 mixed precision (fp32 weights, bf16 autocast; ablate's reference in bf16, TRL's
its own copy of the model), HF generation on both (rollout=hf; TRL without vLLM), peak GPU memory per
trainer. `--model qwen2.5-0.5b-shape` builds the random model once (seed 0) and both start from it; no
held-out reward by default there (`--eval-prompts 0`: it measures cost, a random model learns nothing).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (ABLATE_PHASES, ablate_phase_callback, compose, fmt, heldout_reward, machine,  # noqa: E402
                     markdown_table, median, missing_distributions, project_requirements, quartiles,
                     requirement_name, run_ablate, shares)

TRL_PHASES = ("generate", "score", "old_logp_forward", "reference_forward", "policy_forward", "backward",
              "optimizer", "learn_other", "other")
TRL_PIN = "trl==1.16.0"
PROFILER: cProfile.Profile | None = None  # set in a --cprofile child; enabled only while training runs


# --dry-run: the GPU comparison's code path on the CPU in seconds (the 0.5B shape cut to one small layer)
DRY_RUN = {"model": "qwen2.5-0.5b-shape", "steps": 2, "warmup": 1, "rounds": 1, "batch_prompts": 2, "k": 2,
           "max_new_tokens": 8, "micro_batch": 4, "eval_prompts": 0, "device": "cpu",
           "arch": ["hidden_size=64", "intermediate_size=128", "num_hidden_layers=1", "num_attention_heads=2",
                    "num_key_value_heads=1", "vocab_size=4096"]}
# ablate on a GPU as the GPU tier runs it (bench/gpu_acceptance.py): bf16-mixed, the reference in bf16
CUDA_OVERRIDES = ["trainer.accelerator=gpu", "trainer.precision=bf16-mixed", "stage.reference_dtype=bfloat16"]


def settings(args) -> dict:
    return {"B": args.batch_prompts, "k": args.k, "max_new_tokens": args.max_new_tokens, "lr": args.lr,
            "micro_batch": args.micro_batch, "kl_coef": 1e-3, "temperature": 1.0, "top_p": 1.0,
            "ablate_overrides": list(args.ablate), "device": args.device, "model": args.model,
            "arch": list(args.arch)}


def ablate_overrides(args, seed: int) -> list[str]:
    start = [] if args.start is None else ["stage.init=model", f"model.name_or_path={args.start}"]
    device = CUDA_OVERRIDES if args.device == "cuda" else []
    return [f"seed={seed}", f"stage.max_steps={args.steps}", f"stage.batch_prompts={args.batch_prompts}",
            f"stage.k={args.k}", f"stage.sampling.max_new_tokens={args.max_new_tokens}", f"stage.lr={args.lr}",
            f"stage.micro_batch={args.micro_batch}", f"trainer.num_threads={args.threads}", *start, *device,
            *args.ablate]


def problems_and_reward(cfg):
    from omegaconf import OmegaConf

    from ablate.tasks.countdown import Reward, build_splits

    splits = build_splits(cfg.task, pool_size=int(cfg.stage.pool_size))
    return splits, Reward.from_config(OmegaConf.to_container(cfg.reward, resolve=True))


def build_start(args, directory: Path) -> str:
    """`--model qwen2.5-0.5b-shape`: the random model (seed 0, `--arch` applied) and the tiny tokenizer saved
    to `directory`, which both trainers start from."""
    import torch

    from ablate.models import load_model, load_tokenizer

    cfg = compose([f"model={args.model}", *(f"model.arch.{a}" for a in args.arch)])
    tokenizer = load_tokenizer(cfg.model)
    torch.manual_seed(0)
    load_model(cfg.model, tokenizer).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return str(directory)


def load_start(start: str | None = None):
    import torch
    from transformers import AutoModelForCausalLM

    from ablate.models import load_tokenizer, resolve_path

    name = start or "builtin:tiny-sft"
    tokenizer = load_tokenizer({"kind": "tiny", "name_or_path": name})
    return AutoModelForCausalLM.from_pretrained(resolve_path(name), dtype=torch.float32), tokenizer, name


def evaluate(model, tokenizer, splits, reward, args, seed: int) -> dict:
    if args.eval_prompts == 0:  # --eval-prompts 0: cost only
        return {"reward": float("nan"), "correct": float("nan")}
    return heldout_reward(model, tokenizer, splits.test[:args.eval_prompts], reward, args.eval_samples,
                          args.max_new_tokens, seed=10_000 + seed)


def peak_memory_gib(device: str) -> float:
    import torch

    return torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else float("nan")


# --- the ablate leg -------------------------------------------------------------------------------------

def leg_ablate(args, seed: int, out: dict) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from ablate.models import load_tokenizer

    timers = ablate_phase_callback(PROFILER)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        rows = run_ablate(ablate_overrides(args, seed), run_dir, callbacks=[timers])
        peak = peak_memory_gib(args.device)
        model = AutoModelForCausalLM.from_pretrained(str(run_dir / "model"), dtype=torch.float32)
        tokenizer = load_tokenizer({"kind": "tiny", "name_or_path": str(run_dir / "model")})
        phases = timers.phases(rows)
        splits, reward = problems_and_reward(compose(["stage=rloo"]))
        out.update(phases=phases, rewards=[r["train/reward_mean"] for r in rows], peak_gib=peak,
                   heldout=evaluate(model.to(args.device), tokenizer, splits, reward, args, seed))


# --- the TRL leg ----------------------------------------------------------------------------------------

def trl_trainer_class():
    """RLOOTrainer with wall-clock timers around its phases (same computation, timing only)."""
    import torch
    from trl import RLOOTrainer

    class TimedRLOOTrainer(RLOOTrainer):
        phase_log: list[dict[str, float]]

        def _clock(self, phase: str, seconds: float) -> None:
            self.current[phase] = self.current.get(phase, 0.0) + seconds

        def _generate_single_turn(self, *a, **kw):
            start = time.perf_counter()
            completion_ids = super()._generate_single_turn(*a, **kw)
            self._clock("generate", time.perf_counter() - start)
            self._clock("tokens", float(sum(len(c) for c in completion_ids)))
            return completion_ids

        def _calculate_rewards(self, *a, **kw):
            start = time.perf_counter()
            rewards = super()._calculate_rewards(*a, **kw)
            self._clock("score", time.perf_counter() - start)
            return rewards

        def _get_per_token_logps_and_entropies(self, model, *a, **kw):
            start = time.perf_counter()
            result = super()._get_per_token_logps_and_entropies(model, *a, **kw)
            if torch.is_grad_enabled():
                phase = "policy_forward"
            else:
                phase = "reference_forward" if model is self.ref_model else "old_logp_forward"
            self._clock(phase, time.perf_counter() - start)
            return result

    return TimedRLOOTrainer


def leg_trl(args, seed: int, out: dict) -> None:
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import RLOOConfig

    from ablate.curriculum import build_sampler

    torch.set_num_threads(args.threads)
    cfg = compose(["stage=rloo"] + ablate_overrides(args, seed))
    splits, reward = problems_and_reward(cfg)
    model, tokenizer, path = load_start(args.start)
    # The prompts ablate's uniform sampler draws for this seed, step after step.
    from ablate.tasks.countdown import CountdownTask

    sampler = build_sampler(None, splits.train, seed, args.steps, task=CountdownTask({}, reward))
    order = [i for step in range(args.steps) for i in sampler.sample(args.batch_prompts, step)]
    bos = tokenizer.bos_token  # ablate's prompts start with BOS; TRL tokenizes text with add_special_tokens
    data = Dataset.from_list([{"prompt": bos + f"{' '.join(map(str, splits.train[i].numbers))} -> "
                                             f"{splits.train[i].target}\n",
                               "numbers": list(splits.train[i].numbers), "target": splits.train[i].target}
                              for i in order])

    def countdown_reward(prompts, completions, numbers, target, **kwargs):
        return [reward(c, n, t)[0] for c, n, t in zip(completions, numbers, target)]

    micro = args.micro_batch
    n_sequences = args.batch_prompts * args.k
    if n_sequences % micro:
        raise SystemExit(f"B*k={n_sequences} must be a multiple of --micro-batch={micro}")
    with tempfile.TemporaryDirectory() as tmp:
        config = RLOOConfig(
            output_dir=tmp, seed=seed, max_steps=args.steps, learning_rate=args.lr, lr_scheduler_type="constant",
            warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0, adam_beta1=0.9, adam_beta2=0.999,
            per_device_train_batch_size=micro, gradient_accumulation_steps=n_sequences // micro,
            num_generations=args.k, max_completion_length=args.max_new_tokens, temperature=1.0, top_p=1.0, top_k=0,
            beta=1e-3, num_iterations=1, epsilon=0.2, shuffle_dataset=False, bf16=args.device == "cuda", fp16=False,
            gradient_checkpointing=False, use_cpu=args.device == "cpu", logging_steps=1, save_strategy="no", report_to="none",
            disable_tqdm=True, dataloader_num_workers=0, remove_unused_columns=False)
        trainer = trl_trainer_class()(model=model, reward_funcs=countdown_reward, args=config, train_dataset=data,
                                      processing_class=tokenizer)
        trainer.current, trainer.phase_log = {}, []
        wall = {"last": None}
        rewards: list[float] = []

        class Clock(TrainerCallback):
            def on_train_begin(self, targs, state, control, optimizer=None, **kw):
                inner = getattr(optimizer, "optimizer", optimizer)
                inner.register_step_pre_hook(lambda *a: trainer.__dict__.__setitem__("opt_t", time.perf_counter()))
                inner.register_step_post_hook(
                    lambda *a: trainer._clock("optimizer", time.perf_counter() - trainer.opt_t))
                wall["last"], wall["cpu"] = time.perf_counter(), time.process_time()
                if PROFILER is not None:
                    PROFILER.enable()

            def on_train_end(self, targs, state, control, **kw):
                if PROFILER is not None:
                    PROFILER.disable()

            def on_step_end(self, targs, state, control, **kw):
                if args.device == "cuda":  # the step's queued GPU work belongs to it
                    torch.cuda.synchronize()
                now = time.perf_counter()
                step = dict(trainer.current)
                cpu = time.process_time()
                step["step"], step["cpu"] = now - wall["last"], cpu - wall["cpu"]
                trainer.phase_log.append(step)
                trainer.current = {}
                wall["last"], wall["cpu"] = now, cpu

            def on_log(self, targs, state, control, logs=None, **kw):
                if logs and "reward" in logs:
                    rewards.append(float(logs["reward"]))

        backward = trainer.accelerator.backward

        def timed_backward(loss, **kw):
            start = time.perf_counter()
            backward(loss, **kw)
            trainer._clock("backward", time.perf_counter() - start)

        trainer.accelerator.backward = timed_backward
        trainer.add_callback(Clock())
        trainer.train()
        phases = []
        for step in trainer.phase_log:
            # The loss call time minus its forward is the loss arithmetic (compute_loss is inside the
            # Trainer's training_step; what is not a named phase ends up in `other`).
            named = sum(step.get(k, 0.0) for k in TRL_PHASES if k not in ("other", "learn_other"))
            step["learn_other"] = 0.0
            step["other"] = max(0.0, step["step"] - named)
            phases.append(step)
        out.update(phases=phases, rewards=rewards, peak_gib=peak_memory_gib(args.device),
                   heldout=evaluate(trainer.model.eval(), tokenizer, splits, reward, args, seed))


# --- driver ----------------------------------------------------------------------------------------------

def run_leg(args, library: str, seed: int, profile: bool = False) -> dict:
    """One (library, seed) run in a fresh process; returns its JSON result."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out_path = f.name
    command = [sys.executable, __file__, "--leg", library, "--seed", str(seed), "--out", out_path,
               "--steps", str(args.profile_steps if profile else args.steps), "--threads", str(args.threads),
               "--batch-prompts", str(args.batch_prompts), "--k", str(args.k), "--lr", str(args.lr),
               "--max-new-tokens", str(args.max_new_tokens), "--micro-batch", str(args.micro_batch),
               "--eval-prompts", str(args.eval_prompts if not profile else min(8, args.eval_prompts)),
               "--eval-samples", str(args.eval_samples), "--device", args.device, "--model", args.model]
    if args.start is not None:
        command += ["--start", args.start]
    if args.ablate:
        command += ["--ablate", *args.ablate]
    if profile:
        command.append("--cprofile")
    env = dict(os.environ, PYTHONWARNINGS="ignore", TOKENIZERS_PARALLELISM="false")
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1] / "src"), env.get("PYTHONPATH", "")])
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-6000:])
        raise SystemExit(f"{library} run (seed {seed}) failed with exit code {done.returncode}")
    result = json.loads(Path(out_path).read_text())
    Path(out_path).unlink()
    result["process_s"] = time.perf_counter() - start
    return result


def summarize(results: list[dict], warmup: int, names) -> dict:
    phases = [p for r in results for p in r["phases"][warmup:]]
    steps = [p["step"] for p in phases]
    gen_tokens = sum(p.get("tokens", 0.0) for p in phases)
    gen_seconds = sum(p.get("generate", 0.0) for p in phases)
    tail = []  # mean training reward over the last quarter of each run's steps
    for r in results:
        last = r["rewards"][-max(1, len(r["rewards"]) // 4):]
        tail.append(sum(last) / len(last))
    return {"step_median": median(steps), "step_quartiles": quartiles(steps), "n_steps": len(steps),
            "cpu_median": median(p.get("cpu", float("nan")) for p in phases),
            "round_cpu_medians": [median(p.get("cpu", float("nan")) for p in r["phases"][warmup:]) for r in results],
            "tokens_per_s": gen_tokens / gen_seconds if gen_seconds else float("nan"),
            "shares": shares(phases, names), "train_reward_tail": sum(tail) / len(tail),
            "reward_curve": [sum(vals) / len(vals) for vals in zip(*[r["rewards"] for r in results])],
            "heldout_reward": sum(r["heldout"]["reward"] for r in results) / len(results),
            "heldout_correct": sum(r["heldout"]["correct"] for r in results) / len(results),
            "round_medians": [median(p["step"] for p in r["phases"][warmup:]) for r in results],
            "peak_gib": max((r.get("peak_gib", float("nan")) for r in results), default=float("nan"))}


def round_ratios(summary: dict) -> list[float]:
    """TRL's median step over ablate's, round by round: the same seed, run back to back."""
    return [t / a for a, t in zip(summary["ablate"]["round_medians"], summary["trl"]["round_medians"])]


def report(summary: dict) -> str:
    ours, theirs, start = summary["ablate"], summary["trl"], summary["start"]
    pooled = theirs["step_median"] / ours["step_median"]
    paired = round_ratios(summary)
    gpu = f"; GPU {summary['gpu']}" if summary.get("gpu") else ""
    lines = [f"machine: {summary['machine']}{gpu} (shared with other jobs during the run)",
             f"settings: {json.dumps(summary['settings'])}, {summary['steps']} steps per run, first "
             f"{summary['warmup']} excluded, {summary['rounds']} rounds in the order A B, B A, ... (seed = round), torch threads "
             f"{summary['threads']}, trl {summary['trl_version']}", ""]
    rows = []
    for name, s in (("ablate", ours), ("TRL RLOOTrainer", theirs)):
        q1, q3 = s["step_quartiles"]
        rows.append([name, f"{fmt(s['step_median'])} ({fmt(q1)}-{fmt(q3)})",
                     " / ".join(fmt(m) for m in s["round_medians"]), fmt(s.get("cpu_median", float("nan"))),
                     fmt(s["tokens_per_s"], 0),
                     fmt(s["train_reward_tail"], 3), f"{fmt(s['heldout_reward'], 3)} / {fmt(s['heldout_correct'], 3)}"])
    label = "starting SFT model" if summary["settings"].get("model", "tiny-sft") == "tiny-sft" else "starting model (random)"
    rows.append([label, "", "", "", "", "", f"{fmt(start['reward'], 3)} / {fmt(start['correct'], 3)}"])
    lines.append(markdown_table(["trainer", "s/step median (IQR)", "per-round medians", "CPU s/step", "rollout tokens/s",
                                 "train reward, last quarter", "held-out reward / correct"], rows))
    if summary.get("gpu"):
        lines += ["", f"peak GPU memory (torch's allocator, whole run): ablate {fmt(ours.get('peak_gib'), 1)} GiB, "
                      f"TRL {fmt(theirs.get('peak_gib'), 1)} GiB"]
    lines += ["", f"**step-time ratio TRL / ablate: {median(paired):.2f}x** (median of the per-round ratios "
                  f"{', '.join(f'{r:.2f}' for r in paired)}; pooled medians {pooled:.2f}x; issue 17's goal >= 2.0x); "
                  f"rollout tokens/s ablate / TRL: {ours['tokens_per_s'] / theirs['tokens_per_s']:.2f}x"]
    if "cpu_median" in ours:
        lines.append(f"CPU seconds per step (this process's work; with 1 torch thread the measure least moved by "
                     f"other jobs): ratio TRL / ablate {theirs['cpu_median'] / ours['cpu_median']:.2f}x")
    lines.append("")
    for name, s in (("ablate", ours), ("TRL", theirs)):
        parts = ", ".join(f"{k} {fmt(v[0])} s ({v[1]:.0%})" for k, v in s["shares"].items() if v[0] > 0)
        lines.append(f"- {name} phases (median s per step, share): {parts}")
    curve = lambda c: " ".join(f"{v:.2f}" for v in c)  # noqa: E731
    lines += [f"- ablate train reward by step (mean over rounds): {curve(ours['reward_curve'])}",
              f"- TRL train reward by step (mean over rounds): {curve(theirs['reward_curve'])}"]
    return "\n".join(lines)


PROFILE_BUCKETS = (  # (label, test on a pstats key (file, line, function)); the first match wins
    ("autograd backward (C++)", lambda f: "run_backward" in f[2]),
    ("torch ops (C++ kernels)", lambda f: f[0] == "~" and "torch" in f[2]),
    ("transformers (Python)", lambda f: "/transformers/" in f[0]),
    ("trl (Python)", lambda f: "/trl/" in f[0]),
    ("accelerate (Python)", lambda f: "/accelerate/" in f[0]),
    ("lightning (Python)", lambda f: "/lightning/" in f[0] or "/lightning_fabric/" in f[0]),
    ("torch (Python)", lambda f: "/torch/" in f[0]),
    ("ablate (Python)", lambda f: "/ablate/" in f[0]),
    ("other", lambda f: True),
)


def cprofile_top(profile: cProfile.Profile, n: int = 15) -> str:
    """Own time summed by where the code lives, then the top functions by own time."""
    stats = pstats.Stats(profile)
    buckets = dict.fromkeys((label for label, _ in PROFILE_BUCKETS), 0.0)
    for key, (_, _, tottime, _, _) in stats.stats.items():
        buckets[next(label for label, test in PROFILE_BUCKETS if test(key))] += tottime
    total = sum(buckets.values()) or 1.0
    lines = [f"{label:<26} {seconds:8.2f} s {seconds / total:6.1%}" for label, seconds in buckets.items()]
    stream = io.StringIO()
    pstats.Stats(profile, stream=stream).sort_stats("tottime").print_stats(n)
    text = stream.getvalue()
    return "\n".join(lines) + "\n\n" + (text[text.find("   ncalls"):] if "   ncalls" in text else text)


def check_environment(installed=None) -> None:
    """Before anything starts: TRL, and what the ablate leg imports (ablate from src/ with its dependencies,
    pyproject.toml's, the Hydra joblib launcher of the default config among them). Without TRL this is
    the project's environment: skipped, as run_all expects; with TRL but not the rest: exit naming it."""
    missing = missing_distributions([TRL_PIN, *project_requirements()], installed)
    if not missing:
        return
    install = f"{sys.executable} -m pip install " + " ".join(shlex.quote(m) for m in missing)
    if TRL_PIN in missing:
        print(f"bench_vs_trl: skipped, {sys.executable} lacks {', '.join(map(requirement_name, missing))}. TRL "
              "lives in an environment of its own (bench/README.md, 'The comparison with TRL'); run this "
              "script with that interpreter.")
        raise SystemExit(0)
    raise SystemExit(f"bench_vs_trl: {sys.executable} has TRL but lacks {', '.join(map(requirement_name, missing))} "
                     f"(ablate's dependencies, pyproject.toml), so its ablate leg would fail. Install them:\n    {install}")


def resolve(p: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """--dry-run's settings, the held-out prompts' default, and the one combination refused."""
    if args.dry_run:
        for key, value in DRY_RUN.items():
            setattr(args, key, value)
    if args.eval_prompts is None:  # a random 0.5B model learns nothing: its held-out reward would only cost time
        args.eval_prompts = 128 if args.model == "tiny-sft" else 0
    if args.arch and args.model == "tiny-sft":
        p.error("--arch shapes --model qwen2.5-0.5b-shape; the tiny SFT model is a trained checkpoint")
    return args


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=16, help="optimizer steps per run")
    p.add_argument("--warmup", type=int, default=2, help="first steps of each run left out of the timings")
    p.add_argument("--rounds", type=int, default=2, help="rounds of one run each, A B then B A ... (seed = round index)")
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads in every run")
    p.add_argument("--batch-prompts", type=int, default=16)
    p.add_argument("--k", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--micro-batch", type=int, default=64)
    p.add_argument("--eval-prompts", type=int, help="held-out prompts (default: 128, none for the 0.5B shape)")
    p.add_argument("--eval-samples", type=int, default=8)
    p.add_argument("--ablate", nargs="*", default=[], metavar="OVERRIDE",
                   help="extra overrides for ablate's runs only, e.g. stage.reference_dtype=bfloat16")
    p.add_argument("--profile", action="store_true", help="also cProfile a short run of each")
    p.add_argument("--profile-steps", type=int, default=4)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where both trainers run (cuda: bf16 mixed)")
    p.add_argument("--model", choices=("tiny-sft", "qwen2.5-0.5b-shape"), default="tiny-sft",
                   help="the starting model: the shipped tiny SFT, or the 0.5B shape with random weights")
    p.add_argument("--arch", nargs="*", default=[], metavar="KEY=VALUE",
                   help="with --model qwen2.5-0.5b-shape: model.arch overrides (e.g. num_hidden_layers=2)")
    p.add_argument("--dry-run", action="store_true",
                   help="the 0.5B-shape comparison's code path on the CPU at a toy size: " + json.dumps(DRY_RUN))
    p.add_argument("--json", type=Path, help="write the summary here as JSON too")
    p.add_argument("--markdown", type=Path, help="write the report here as markdown too")
    p.add_argument("--render", type=Path, help="print the report of an earlier --json summary and exit")
    p.add_argument("--leg", choices=("ablate", "trl"), help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--cprofile", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--start", help=argparse.SUPPRESS)  # the directory the driver saved the starting model to
    args = resolve(p, p.parse_args())
    if args.render:
        print(report(json.loads(args.render.read_text())))
        return
    if args.leg:  # a child process: one run
        import torch

        torch.set_num_threads(args.threads)
        out: dict = {}
        leg = leg_ablate if args.leg == "ablate" else leg_trl
        global PROFILER
        PROFILER = cProfile.Profile() if args.cprofile else None
        leg(args, args.seed, out)
        if PROFILER is not None:
            out["cprofile"] = cprofile_top(PROFILER)
        args.out.write_text(json.dumps(out))
        return

    check_environment()
    import torch
    import trl

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("bench_vs_trl: --device cuda, but torch sees no CUDA GPU here (--dry-run runs the same "
                         "code path on the CPU)")
    with tempfile.TemporaryDirectory(prefix="bench-vs-trl-") as tmp:
        if args.model != "tiny-sft":
            args.start = build_start(args, Path(tmp) / "start")
        compare(args)


def compare(args) -> None:
    import torch
    import trl

    torch.set_num_threads(args.threads)
    print(f"TRL {trl.__version__}; {args.rounds} rounds x 2 trainers x {args.steps} steps, "
          f"threads {args.threads}, {args.model} on {args.device}", flush=True)
    splits, reward = problems_and_reward(compose(["stage=rloo"]))
    if args.eval_prompts:
        model, tokenizer, _ = load_start(args.start)
        start = evaluate(model.to(args.device), tokenizer, splits, reward, args, 0)
    else:
        start = evaluate(None, None, splits, reward, args, 0)
    ours, theirs = [], []
    for seed in range(args.rounds):
        # A B, then B A, ...: a load that drifts during a round favours neither side on average.
        order = (("ablate", ours), ("trl", theirs)) if seed % 2 == 0 else (("trl", theirs), ("ablate", ours))
        for library, bucket in order:
            result = run_leg(args, library, seed)
            bucket.append(result)
            print(f"  round {seed} {library:6s}: median {median(p['step'] for p in result['phases'][args.warmup:]):.2f} "
                  f"s/step, held-out reward {result['heldout']['reward']:.3f} ({result['process_s']:.0f} s process)",
                  flush=True)
    summary = {"ablate": summarize(ours, args.warmup, ABLATE_PHASES), "trl": summarize(theirs, args.warmup, TRL_PHASES),
               "start": start, "settings": settings(args), "machine": machine(), "trl_version": trl.__version__,
               "threads": args.threads, "steps": args.steps, "rounds": args.rounds, "warmup": args.warmup,
               "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else None}
    summary["ratio"] = median(round_ratios(summary))
    text = report(summary)
    if args.profile:
        sections = []
        for library in ("ablate", "trl"):
            result = run_leg(args, library, 0, profile=True)
            sections.append(f"### cProfile, {library}, {args.profile_steps} steps (top by own time)\n\n```\n"
                            f"{result['cprofile']}```")
        text += "\n\n" + "\n\n".join(sections)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2, default=float))
    if args.markdown:
        args.markdown.write_text(text + "\n")


if __name__ == "__main__":
    main()
