"""docs/extending.md: a part registered under a new key is built, checked and accepted by the
config check through its registry alone."""

import dataclasses

import pytest
import torch
from hydra import compose, initialize_config_dir

from ablate.checks import ConfigError, check_config
from ablate.config import CONF_DIR, load_group_config, require
from ablate.config.schemas import config_schema
from ablate.stages.sft import SFTStageConfig, check_sft, fit_sft
from ablate.tasks.countdown import CountdownTask, Problem, Reward

COUNTDOWN = CountdownTask({}, Reward.from_config(load_group_config("reward", "tinyzero")))


def cfg_of(*overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def test_a_registered_sampler_is_built_by_its_name_and_owns_its_config():
    from ablate.curriculum import SAMPLERS, Sampler, build_sampler, check_curriculum

    class Unregistered(Sampler):  # a subclass is no curriculum until it is registered
        name = "unregistered_test"

    assert "unregistered_test" not in SAMPLERS
    with pytest.raises(ValueError, match=r"curriculum.kind='unregistered_test': expected one of \('none', "):
        check_curriculum({"kind": "unregistered_test"})
    try:
        @SAMPLERS.register
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


# docs/extending.md, "A stage": the example stage, registered from the test instead of a module of ablate.stages.
@config_schema("stage", "sft_top_test_schema")
@dataclasses.dataclass
class SFTTopConfig(SFTStageConfig):
    name: str = "sft_top_test"
    init: str = "sft"   # it starts from a trained model: the shipped SFT by default
    layers: int = 1     # decoder blocks trained, from the top; the lower ones are frozen


def fit_sft_top(cfg, model, *args, **kwargs):
    blocks = model.model.layers  # Qwen2's decoder blocks, bottom first
    for block in blocks[: len(blocks) - cfg.stage.layers]:
        block.requires_grad_(False)
    fit_sft(cfg, model, *args, **kwargs)


def check_sft_top(cfg):
    check_sft(cfg)
    require(cfg.stage.layers >= 1, f"stage.layers={cfg.stage.layers} must be >= 1")


@pytest.fixture
def sft_top(tmp_path):
    """The example stage registered, and its yaml in a config dir of the user's (hydra.searchpath)."""
    from ablate.stages import STAGES

    (tmp_path / "stage").mkdir()
    (tmp_path / "stage" / "sft_top_test.yaml").write_text(
        "defaults:\n  - /schema_stage_sft_top_test_schema@_here_\n  - _self_\nname: sft_top_test\nlayers: 2\n")
    STAGES.register("sft_top_test", check=check_sft_top, schema=SFTTopConfig)(fit_sft_top)
    yield [f"hydra.searchpath=[file://{tmp_path}]", "stage=sft_top_test"]
    STAGES.pop("sft_top_test")


def test_a_registered_stage_is_checked_and_trained_through_the_registry(sft_top):
    from types import SimpleNamespace

    from ablate.stages import fit_stage, stage_names

    assert "sft_top_test" in stage_names()
    cfg = cfg_of(*sft_top)
    check_config(cfg)  # accepted: its name, its init (an upstream stage), its own checks
    assert cfg.stage.layers == 2 and cfg.stage.batch_size == 64  # typed: the schema's defaults fill the rest
    with pytest.raises(ConfigError, match="stage.layers=0 must be >= 1"):
        check_config(cfg_of(*sft_top, "stage.layers=0"))
    with pytest.raises(ConfigError, match="stage.init='rloo'"):  # rloo has no `upstream`: nothing starts from it
        check_config(cfg_of(*sft_top, "stage.init=rloo"))
    with pytest.raises(ConfigError, match="stage.layrs"):  # a typo of one of its keys
        check_config(cfg_of(*sft_top, "+stage.layrs=2"))
    with pytest.raises(ConfigError, match="stage='sft_top_tset'.*sft_top_test"):  # a typo of its name
        check_config(cfg_of(*sft_top, "stage.name=sft_top_tset"))
    with pytest.raises(ConfigError, match="takes no curriculum.*rloo"):
        check_config(cfg_of(*sft_top, "curriculum=static"))

    calls = []
    from ablate.stages import STAGES

    STAGES["sft_top_test"] = dataclasses.replace(STAGES["sft_top_test"], fit=lambda *a: calls.append(a))
    splits = SimpleNamespace(train=[Problem((1, 2, 3), 6)], val=[])
    fit_stage(cfg, "model", "tokenizer", splits, "task", "run_dir", "status")
    assert calls == [(cfg, "model", "tokenizer", splits, "task", "run_dir", "status", [])]


def test_a_registered_policy_loss_is_checked_by_its_key(monkeypatch):
    """docs/extending.md, "A policy-gradient loss": REINFORCE without importance weights, registered from the test."""
    from ablate import objectives

    def reinforce(logprobs, delta, adv, mask, **_):
        one = torch.ones(())
        return -(adv * logprobs), one, one, torch.zeros(()), {}

    with pytest.raises(ConfigError, match="stage.is_level='reinforce_test'"):
        check_config(cfg_of("stage=rloo", "stage.is_level=reinforce_test"))
    monkeypatch.setitem(objectives.POLICY_LOSSES, "reinforce_test", reinforce)
    check_config(cfg_of("stage=rloo", "stage.is_level=reinforce_test"))
    with pytest.raises(ConfigError, match="stage.is_level='reinforse_test'.*reinforce_test"):  # a typo
        check_config(cfg_of("stage=rloo", "stage.is_level=reinforse_test"))
    assert not objectives.token_level("reinforce_test") and objectives.token_level("token")


@pytest.mark.slow
def test_the_documented_stage_trains_end_to_end(sft_top, tmp_path, monkeypatch):
    """The example stage runs through the entry point's `run`: from the cached SFT upstream, its lower
    block frozen, the top one trained."""
    from transformers import AutoModelForCausalLM

    from ablate.run import run
    from ablate.upstream import upstream_model

    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    cfg = cfg_of(*sft_top, "experiment=smoke", "model.arch.num_hidden_layers=2", "stage.layers=1",
                 "stage.pool_size=300", "stage.batch_size=8", "stage.max_steps=3", "stage.warmup_steps=1",
                 "stage.checkpoint_every=3", "trainer.num_threads=1")
    run(cfg, tmp_path / "run")
    start = AutoModelForCausalLM.from_pretrained(upstream_model(cfg, "sft", run)).model.layers
    trained = AutoModelForCausalLM.from_pretrained(str(tmp_path / "run" / "model")).model.layers
    assert all(torch.equal(a, b) for a, b in zip(start[0].parameters(), trained[0].parameters()))
    assert not all(torch.equal(a, b) for a, b in zip(start[1].parameters(), trained[1].parameters()))


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
    from ablate.run import run

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
    from ablate.stats.read.load import load_run
    from ablate.stats.values.blocks import prompt_metrics

    hydra = tmp_path / "run" / ".hydra"  # what a launch from the command line leaves (Hydra's files)
    hydra.mkdir()
    (hydra / "config.yaml").write_text((tmp_path / "run" / ".ablate" / "config.yaml").read_text())
    (hydra / "overrides.yaml").write_text("- task.name=increment_test\n")
    prompts = load_run(tmp_path / "run").evals["no_tool"].prompts  # stats reads the level through the registry
    assert prompts.level_block == "by_digits" and "by_digits/2/pass@1" in prompt_metrics(prompts).names
