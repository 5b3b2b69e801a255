"""Tool availability (paper 003): schedule values, Bernoulli draws, prompt modes, RLOO wiring."""

import math

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from ablate.config import CONF_DIR, load_group_config, typed
from ablate.config.schemas import ToolConfig
from ablate.models import encode_prompt, prompt_text
from ablate.rollout.schedules import (SCHEDULES, AnnealedToolConfig, SteppedToolConfig, ToolAvailability, p_tool,
                                     show_preamble)
from ablate.tasks.countdown import CountdownTask, Problem, Reward
from step_stubs import without_trainer


COUNTDOWN = CountdownTask({}, Reward.from_config(load_group_config("reward", "tinyzero")))  # the task the prompts render


def tool_of(values):
    """A tool config's values as their schema's instance, as the collector is handed them."""
    schema = SteppedToolConfig if "stages" in values else AnnealedToolConfig if "anneal_ratio" in values else ToolConfig
    return typed(schema, values)


def cfg(schedule, **extra):
    return tool_of({"schedule": schedule, "anneal_ratio": 0.667, **extra})


@pytest.mark.parametrize("step, expected", [
    # T = 100, T_anneal = 66.7: p = 1 - t / 66.7 (paper 003: fully withdrawn at step 67)
    (0, 1.0), (10, 1 - 10 / 66.7), (50, 1 - 50 / 66.7), (66, 1 - 66 / 66.7), (67, 0.0), (99, 0.0)])
def test_anneal_linear_by_hand(step, expected):
    assert p_tool(step, 100, cfg("anneal_linear")) == pytest.approx(expected)
    assert p_tool(10, 100, cfg("anneal_linear")) == pytest.approx(0.850075, abs=1e-6)


def test_anneal_step_and_log_by_hand():
    # stages = 1: on until T_anneal = 66.7, then off.
    assert [p_tool(t, 100, cfg("anneal_step")) for t in (0, 30, 66, 67, 99)] == [1, 1, 1, 0, 0]
    # stages = 4: levels change at 16.675, 33.35, 50.025.
    four = cfg("anneal_step", stages=4)
    assert [p_tool(t, 100, four) for t in (0, 16, 17, 33, 34, 50, 51, 66, 67)] == [1, 1, .75, .75, .5, .5, .25, .25, 0]
    # log: 1 - ln(1 + t) / ln(67.7)
    assert p_tool(0, 100, cfg("anneal_log")) == 1.0
    assert p_tool(10, 100, cfg("anneal_log")) == pytest.approx(1 - math.log(11) / math.log(67.7))
    assert p_tool(10, 100, cfg("anneal_log")) == pytest.approx(0.431116, abs=1e-6)
    assert p_tool(50, 100, cfg("anneal_log")) == pytest.approx(0.067202, abs=1e-6)
    assert p_tool(67, 100, cfg("anneal_log")) == 0.0
    # ratio 0.5 of T = 10: linear reaches 0 at step 5
    assert [p_tool(t, 10, cfg("anneal_linear", anneal_ratio=0.5)) for t in range(6)] == \
        pytest.approx([1, .8, .6, .4, .2, 0])


def test_constant_schedules_and_every_config_file():
    assert {p_tool(t, 50, tool_of({"schedule": "off"})) for t in range(50)} == {0.0}
    assert {p_tool(t, 50, tool_of({"schedule": "on"})) for t in range(50)} == {1.0}
    for schedule in SCHEDULES:  # each schedule has its config file, named after it
        conf = load_group_config("tool", schedule)
        assert conf["schedule"] == conf["name"] == schedule and conf["kind"] == "calculator"
        values = [p_tool(t, 30, tool_of(conf)) for t in range(30)]
        assert all(0 <= v <= 1 for v in values) and values == sorted(values, reverse=True)  # never returns
    with pytest.raises(ValueError, match="tool.schedule='sometimes'"):
        p_tool(3, 10, tool_of({"schedule": "sometimes"}))


def test_bernoulli_rate_and_resume_continue_the_same_draws():
    drawn = ToolAvailability(seed=7).draw(20_000, 0.3)
    rate = sum(drawn) / len(drawn)
    assert abs(rate - 0.3) < 5 * math.sqrt(0.3 * 0.7 / 20_000)  # five standard errors
    assert all(ToolAvailability(1).draw(100, 1.0)) and not any(ToolAvailability(1).draw(100, 0.0))

    straight = ToolAvailability(seed=3)
    first = straight.draw(50, 0.5)
    state = straight.state_dict()
    expected = [straight.draw(16, p) for p in (0.9, 0.5, 0.1)]
    resumed = ToolAvailability(seed=999)
    resumed.load_state_dict(state)
    assert [resumed.draw(16, p) for p in (0.9, 0.5, 0.1)] == expected
    assert ToolAvailability(seed=3).draw(50, 0.5) == first  # seeded


def test_prompt_modes_and_the_compact_preamble(tiny_policy):
    _, tokenizer = tiny_policy
    assert [show_preamble(m, a) for m in ("always", "when_available", "never") for a in (True, False)] == \
        [True, True, True, False, False, False]
    with pytest.raises(ValueError, match="tool.prompt='loud'"):
        show_preamble("loud", True)
    problem = Problem((44, 19, 35), 98)
    assert prompt_text(COUNTDOWN, problem, "compact", tokenizer, calculator=True) == "<calc>44 19 35 -> 98\n"
    assert prompt_text(COUNTDOWN, problem, "compact", tokenizer) == "44 19 35 -> 98\n"
    ids = encode_prompt(prompt_text(COUNTDOWN, problem, "compact", tokenizer, calculator=True), tokenizer)
    assert ids[1] == tokenizer.convert_tokens_to_ids("<calc>")  # one token after <bos>


class RecordingEngine:
    """Records what RLOO asks for; every completion is the same wrong answer."""

    def __init__(self, tokenizer):
        self.tokenizer, self.calls = tokenizer, []

    def generate(self, prompt_ids, k, params, generator, tool_available=None):
        from ablate.rollout import Rollouts

        self.calls.append((prompt_ids, k, tool_available))
        n = len(prompt_ids) * k
        completion = self.tokenizer("<calc>1+1</calc><answer>2</answer>", add_special_tokens=False)["input_ids"]
        return Rollouts([list(p) for p in prompt_ids for _ in range(k)], [list(completion)] * n,
                        [[-1.0] * len(completion)] * n, [[False] * len(completion)] * n,
                        ["<calc>1+1</calc><answer>2</answer>"] * n, k=k, tool_calls=[1] * n)

    def sync(self, model):
        pass


def test_rloo_draws_availability_per_rollout_and_states_it_in_the_prompt(tiny_policy, monkeypatch):
    from ablate.curriculum import build_sampler
    from ablate.lit.collector import Collector
    from ablate.lit.rloo import RLOOModule

    model, tokenizer = tiny_policy
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        c = compose(config_name="config", overrides=["stage=rloo", "tool=anneal_linear", "stage.max_steps=10",
                                                     "stage.batch_prompts=3", "stage.k=4", "stage.micro_batch=12"])
    engine = RecordingEngine(tokenizer)
    task = CountdownTask({}, Reward.from_config(c.reward))
    problems = [Problem((1, 2), 3), Problem((4, 5, 6), 15)]
    stage = OmegaConf.to_object(c.stage)
    collector = Collector(problems, engine, task, build_sampler(None, problems, 0, 10, task=task), stage, 0, tokenizer,
                          "compact", tool=OmegaConf.to_object(c.tool))
    module = RLOOModule(model, tokenizer, collector, stage)
    logged = without_trainer(module)
    module.training_step(None, 0)  # global_step 0: p = 1
    prompts, k, available = engine.calls[-1]
    assert k == 1 and len(prompts) == 12 and available == [True] * 12
    assert logged["tool/p_available"] == 1.0 and logged["tool/available_frac"] == 1.0
    assert logged["tool/calls_per_rollout"] == 1.0 and logged["tool/calc_emission_rate"] == 1.0
    calc = tokenizer.convert_tokens_to_ids("<calc>")
    assert all(p[1] == calc for p in prompts)  # when_available: every prompt carries the preamble

    # Half way through the annealing: a mix, and the prompt follows each rollout's own draw.
    module.collector.availability = ToolAvailability(seed=5)
    expected = ToolAvailability(seed=5).draw(12, 1 - 3 / 6.67)
    monkeypatch.setattr(RLOOModule, "global_step", property(lambda self: 3))  # p(3) = 1 - 3 / 6.67
    module.training_step(None, 0)
    prompts, _, available = engine.calls[-1]
    assert available == expected and 0 < sum(available) < 12
    assert [p[1] == calc for p in prompts] == available
    assert logged["tool/p_available"] == pytest.approx(1 - 3 / 6.67)
    assert logged["tool/available_frac"] == pytest.approx(sum(available) / 12)
    # Group structure is kept: rollouts i and j belong to the same problem when i // 4 == j // 4.
    for i in range(0, 12, 4):
        texts = {tokenizer.decode(p[2:] if p[1] == calc else p[1:]) for p in prompts[i:i + 4]}
        assert len(texts) == 1


def test_collection_metrics_are_named_by_the_task_and_the_tool_not_the_learner(tiny_policy, monkeypatch):
    """The collector logs the tool class's own metrics (`rollout_metrics`) and the task's verdicts and levels
    under the task's `level_block`: another tool or task, other names, and none of the calculator's."""
    from ablate.curriculum import build_sampler
    from ablate.lit.collector import Collector
    from ablate.rollout import tools
    from ablate.tasks.countdown.tools import Calculator

    class Counted(Calculator):
        kind = "counted_test"

        @staticmethod
        def rollout_metrics(texts):
            return {"tool/answer_rate": sum("<answer>" in t for t in texts) / len(texts)}

    class BySize(CountdownTask):
        level_block = "by_size"

    monkeypatch.setitem(tools.TOOLS, "counted_test", Counted)
    _, tokenizer = tiny_policy
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        c = compose(config_name="config", overrides=["stage=rloo", "tool=on", "tool.kind=counted_test",
                                                     "stage.batch_prompts=2", "stage.k=2"])
    task = BySize({}, Reward.from_config(c.reward))
    problems = [Problem((1, 2), 3), Problem((4, 5, 6), 15)]
    collector = Collector(problems, RecordingEngine(tokenizer), task, build_sampler(None, problems, 0, 10, task=task),
                          OmegaConf.to_object(c.stage), 0, tokenizer, "compact", tool=OmegaConf.to_object(c.tool))
    metrics = collector.collect(0).metrics
    assert metrics["tool/answer_rate"] == 1.0 and "tool/calc_emission_rate" not in metrics
    assert {"train/by_size/2/reward_mean", "train/by_size/3/verdict/correct"} <= set(metrics)
    assert not any("by_operands" in name for name in metrics)
    assert metrics["train/verdict/correct"] == 0.0  # RecordingEngine answers 2, never the target


def test_tool_configs_are_validated(tmp_path):
    from ablate.checks import ConfigError, check_config

    def check(*overrides):
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            check_config(compose(config_name="config", overrides=list(overrides)))

    check("stage=rloo", "tool=anneal_log")
    check("stage.trace=oracle", "tool=oracle")
    for overrides, message in [(("tool=anneal_linear", "tool.anneal_ratio=0"), "tool.anneal_ratio=0"),
                               (("tool=on", "tool.prompt=loud"), "tool.prompt='loud'"),
                               (("tool=on", "tool.schedule=sometimes"), "tool.schedule='sometimes'"),
                               (("tool=anneal_step", "tool.stages=0"), "tool.stages=0"),
                               (("stage.trace=oracle",), "tool=oracle"),
                               (("tool=oracle",), "stage.trace=plain"),
                               (("tool=oracle", "stage.trace=oracle", "tool.max_messages=1"), "tool.max_messages=1")]:
        with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
            check(*overrides)


def test_cached_sft_is_keyed_by_what_it_reads_of_the_tool():
    """The tool sweep's conditions share one upstream SFT; a calculator SFT's prompts depend on
    tool.prompt, so its key does too (ablate.upstream)."""
    from ablate.upstream import is_shipped, upstream_key

    def key(*overrides):
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return upstream_key(compose(config_name="config", overrides=["stage=rloo", *overrides]), "sft")

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        assert is_shipped(compose(config_name="config", overrides=["stage=rloo", "tool=anneal_linear"]), "sft")
    plain = {key(f"tool={t}") for t in ("off", "on", "anneal_linear", "anneal_log")}
    assert len(plain) == 1
    calc = [key("upstream.sft.trace=calc", f"tool={t}") for t in ("off", "on", "anneal_linear")]
    assert len(set(calc)) == 1 and calc[0] not in plain  # when_available: calculator traces carry the preamble
    assert key("upstream.sft.trace=calc", "tool=on", "tool.prompt=never") not in {*plain, calc[0]}
    assert key("tool=on", "tool.prompt=always") not in plain  # plain traces, but every prompt has the preamble
