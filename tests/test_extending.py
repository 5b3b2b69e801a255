"""README "Extending ablate": a part registered under a new key is built, checked and accepted by the
config check through its registry alone."""

import pytest
import torch
from hydra import compose, initialize_config_dir

from ablate.checks import ConfigError, check_config
from ablate.config import CONF_DIR
from ablate.config import load_group_config
from ablate.tasks.countdown import CountdownTask, Problem, Reward

COUNTDOWN = CountdownTask({}, Reward.from_config(load_group_config("reward", "tinyzero")))


def cfg_of(*overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def test_a_sampler_subclass_registers_itself_and_owns_its_config():
    from ablate.curriculum import SAMPLERS, Sampler, build_sampler, check_curriculum

    try:
        class Hardest(Sampler):
            name = "hardest_test"

            def __init__(self, levels, seed, boost):
                super().__init__(levels, seed)
                self.boost = boost

            @classmethod
            def check(cls, c):
                if float(c["boost"]) < 0:
                    raise ValueError("curriculum.boost must be >= 0")

            @classmethod
            def from_config(cls, c, levels, seed, max_steps, embed):
                return cls(levels, seed, float(c["boost"]))

        problems = [Problem((1, 2, 3), 6), Problem((1, 2, 3, 4), 10)]
        sampler = build_sampler({"kind": "hardest_test", "boost": 2.0}, problems, seed=0, max_steps=4, task=COUNTDOWN)
        assert isinstance(sampler, Hardest) and sampler.boost == 2.0
        assert sampler.reference_prompts(0) == []  # the base class's no-op: no reference rollouts
        with pytest.raises(ValueError, match="boost"):
            check_curriculum({"kind": "hardest_test", "boost": -1})
    finally:
        SAMPLERS.pop("hardest_test", None)


def test_an_advantage_estimator_is_selected_and_checked_by_its_registry_key(monkeypatch):
    from ablate import objectives

    with pytest.raises(ConfigError, match="stage.advantage='centred'"):
        check_config(cfg_of("stage=rloo", "stage.advantage=centred"))
    monkeypatch.setitem(objectives.ADVANTAGES, "centred", lambda r: r - r.mean(dim=-1, keepdim=True))
    check_config(cfg_of("stage=rloo", "stage.advantage=centred"))
    assert objectives.ADVANTAGES["centred"](torch.tensor([[1.0, 0.0]])).tolist() == [[0.5, -0.5]]


def test_a_registered_tool_is_built_and_checked_by_its_kind(monkeypatch):
    from ablate.models import load_tokenizer
    from ablate.rollout import tools
    from ablate.tasks.countdown.tools import Calculator

    class Echo(Calculator):
        kind = "echo_test"

        @staticmethod
        def check(t):
            if int(t["max_calls"]) > 4:
                raise ConfigError("tool.max_calls must be <= 4 for echo")

    monkeypatch.setitem(tools.TOOLS, "echo_test", Echo)
    cfg = cfg_of("stage=rloo", "tool=on", "tool.kind=echo_test")
    with pytest.raises(ConfigError, match="<= 4 for echo"):
        check_config(cfg)
    cfg.tool.max_calls = 2
    check_config(cfg)
    tool = tools.build_tool(cfg.tool, load_tokenizer(cfg.model), cfg.model.template)
    assert isinstance(tool, Echo) and tool.max_calls == 2


def test_a_tool_owns_its_prompt_decoration(monkeypatch):
    from ablate.models import load_tokenizer
    from ablate.rollout import tools
    from ablate.tasks.countdown.tools import Calculator

    class Marked(Calculator):
        kind = "marked_test"

        @staticmethod
        def prompt_text(task, problem, template, tokenizer, mode, available):
            return ("! " if available else "") + f"{problem.target}\n"

    monkeypatch.setitem(tools.TOOLS, "marked_test", Marked)
    cfg = cfg_of("stage=rloo", "tool=on", "tool.kind=marked_test")
    check_config(cfg)
    prompt = tools.ToolPrompt(cfg.tool, cfg.model.template, load_tokenizer(cfg.model), COUNTDOWN)
    problem = Problem((1, 2, 3), 6)
    assert prompt.text(problem, available=True) == "! 6\n" and prompt.text(problem, available=False) == "6\n"


def test_the_shipped_tools_decorate_their_prompts():
    from ablate.models import load_tokenizer
    from ablate.rollout.tools import ToolPrompt

    tokenizer = load_tokenizer(cfg_of().model)
    problem = Problem((44, 19, 35), 98)
    calculator = ToolPrompt({"kind": "calculator", "prompt": "when_available"}, "compact", tokenizer, COUNTDOWN)
    assert calculator.text(problem, True) == "<calc>44 19 35 -> 98\n" and calculator.text(problem, False) == "44 19 35 -> 98\n"
    oracle = ToolPrompt({"kind": "oracle", "prompt": "never"}, "compact", tokenizer, COUNTDOWN)
    assert oracle.text(problem, True) == oracle.text(problem, False) == "44 19 35 -> 98\n"


def test_a_preference_loss_is_a_stage_by_its_registry_key(monkeypatch):
    from ablate import objectives
    from ablate.lit.dpo import PreferenceModule
    from ablate.stages import preference_stages

    hinge = lambda c, r, rc, rr, stage: torch.relu(1 - stage.beta * objectives.preference_margin(c, r, rc, rr))  # noqa: E731
    with pytest.raises(ConfigError, match="stage='slic_test'"):
        check_config(cfg_of("stage=dpo", "stage.name=slic_test"))
    monkeypatch.setitem(objectives.PREFERENCE_LOSSES, "slic_test", hinge)
    assert "slic_test" in preference_stages()
    cfg = cfg_of("stage=dpo", "stage.name=slic_test")
    check_config(cfg)
    module = PreferenceModule(torch.nn.Linear(1, 1), [], torch.zeros(0, 2), lambda n: [], cfg.stage, pad_id=0)
    assert module.loss is hinge and module.stage.beta == cfg.stage.beta


class Increment:
    """A toy task: `41+1=` -> `<answer>42</answer>`, registered under `task.name=increment_test`."""

    name = "increment_test"
    verdicts = ("no_answer", "wrong", "correct")
    level_column, level_block = "n_digits", "by_digits"  # its own report level, not an operand count
    difficulty_fields = {"n_digits": "levels"}
    trace_styles = ("plain",)

    def __init__(self, size):
        from types import SimpleNamespace

        self.problems = [SimpleNamespace(id=str(n), n=n) for n in range(1, size + 1)]

    @classmethod
    def check(cls, cfg):
        if cfg.task.test_size > 50:
            raise ConfigError(f"task.test_size={cfg.task.test_size}: increment_test has 50 test problems at most")

    @classmethod
    def from_config(cls, task_cfg, reward_cfg):
        return cls(int(task_cfg["pool_size"]))

    @classmethod
    def tools(cls):
        return {}

    def splits(self, pool_size=None, val_size=0, label_test=True):
        from ablate.tasks import Splits

        return Splits(train=self.problems[20:], test=self.problems[:12], val=self.problems[12:12 + val_size])

    def render(self, problem, template, calculator=False, oracle=False):
        return f"{problem.n}+1=\n"

    def score(self, problem, completion):
        from ablate.tasks.countdown import last_answer

        answer = last_answer(completion)
        return (0.0, "no_answer") if answer is None else (1.0, "correct") if answer == str(problem.n + 1) else (0.0, "wrong")

    def level(self, problem):
        return len(str(problem.n))

    def difficulty(self, problems, field):
        return [self.level(p) for p in problems]

    def record(self, problem):
        return {"id": problem.id, "value": problem.n, "n_digits": self.level(problem)}

    def sft_segments(self, problem, rng, style, compact, oracle=None):
        return [(f"<answer>{problem.n + 1}</answer>", False)]


def test_a_registered_task_trains_and_is_evaluated_through_the_seam(tmp_path, monkeypatch):
    """A task is its class in the registry: the config check, SFT, evaluation and the run directory read it there."""
    from ablate.tasks import TASKS
    from ablate.train import run

    monkeypatch.setitem(TASKS, Increment.name, Increment)
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ConfigError, match="50 test problems at most"):
        check_config(cfg_of("task.name=increment_test", "experiment=smoke", "task.test_size=60"))
    cfg = cfg_of("task.name=increment_test", "experiment=smoke", "trainer.num_threads=1", "eval.every=3")
    run(cfg, tmp_path / "run")
    import json

    summary = json.loads((tmp_path / "run" / "eval" / "no_tool" / "summary.json").read_text())
    assert summary["n_prompts"] == 12 and set(summary["verdicts"]) == {"no_answer", "wrong", "correct"}
    assert set(summary["by_digits"]) == {"1", "2"} and "by_operands" not in summary  # the task's report level
    rows = [json.loads(line) for line in (tmp_path / "run" / "eval" / "no_tool" / "samples.jsonl").open()]
    assert [r["value"] for r in rows] == list(range(1, 13)) and rows[0]["n_digits"] == 1
    import pandas as pd

    metrics = pd.read_csv(tmp_path / "run" / "metrics.csv")
    assert "val/by_digits/2/pass@1" in metrics.columns  # validation on the task's val split, by its level
    from ablate.stats.blocks import prompt_metrics
    from ablate.stats.load import load_run

    hydra = tmp_path / "run" / ".hydra"  # what a launch from the command line leaves (Hydra's files)
    hydra.mkdir()
    (hydra / "config.yaml").write_text((tmp_path / "run" / ".ablate" / "config.yaml").read_text())
    (hydra / "overrides.yaml").write_text("- task.name=increment_test\n")
    prompts = load_run(tmp_path / "run").evals["no_tool"].prompts  # stats reads the level through the registry
    assert prompts.level_block == "by_digits" and "by_digits/2/pass@1" in prompt_metrics(prompts).names
