"""One registration idiom (issue 61): every kind of part has one `ablate.registry.Registry`, and a part gets
in by its `.register` decorator; an unknown name is one line listing the known ones."""

import ast
from pathlib import Path

import pytest

import ablate
import ablate.parts  # noqa: F401 - every part registered
from ablate.config import ConfigError
from ablate.registry import Registry

ROOT = Path(ablate.__file__).parent


def test_a_part_registers_under_its_own_name_or_a_given_one_and_is_returned_unchanged():
    shapes = Registry("shape")

    @shapes.register
    class Square:
        name = "square"

    @shapes.register("circle", sides=0)
    def circle():
        return "round"

    assert shapes == {"square": Square, "circle": circle} and circle() == "round" and Square.name == "square"
    kept = Registry("tool.kind", attr="kind", entry=lambda name, part, **meta: (name, part, meta))

    @kept.register
    class Echo:
        kind = "echo"

    kept.register("ruler", cm=30)(len)
    assert kept["echo"] == ("echo", Echo, {}) and kept["ruler"] == ("ruler", len, {"cm": 30})


def test_an_unknown_name_is_one_line_naming_the_key_and_the_known_names():
    shapes = Registry("shape", error=ConfigError, hint=" (register one with @SHAPES.register)")
    shapes.register("square")(object)
    shapes.register("circle")(object)
    with pytest.raises(ConfigError) as err:
        shapes["sqaure"]
    assert str(err.value) == "shape='sqaure': expected one of ('square', 'circle') (register one with @SHAPES.register)"
    assert shapes.get("sqaure") is None and "sqaure" not in shapes  # asking is not an error
    with pytest.raises(ValueError, match=r"^curriculum.kind='hardset': expected one of \('none', 'static', "):
        from ablate.curriculum import SAMPLERS

        SAMPLERS["hardset"]


def registries() -> dict[str, Registry]:
    import ablate.checks  # noqa: F401 - the config checks that span parts
    from ablate import objectives
    from ablate.check_registry import CHECKS
    from ablate.curriculum import SAMPLERS
    from ablate.loggers import LOGGERS
    from ablate.rollout.engines import ENGINES
    from ablate.rollout.tools import TOOLS, tool_classes
    from ablate.stages import STAGES
    from ablate.stats.claims.claim_types import CLAIM_TYPES
    from ablate.tasks import TASKS
    from ablate.tasks.reasoning_gym.steps import STEPPERS

    assert tool_classes() is TOOLS
    return {"stages": STAGES, "samplers": SAMPLERS, "engines": ENGINES, "tasks": TASKS, "tools": TOOLS,
            "loggers": LOGGERS, "claim types": CLAIM_TYPES, "advantages": objectives.ADVANTAGES,
            "advantage scales": objectives.ADVANTAGE_SCALES, "aggregations": objectives.AGGREGATIONS,
            "policy losses": objectives.POLICY_LOSSES, "KL estimators": objectives.KL_ESTIMATORS,
            "preference losses": objectives.PREFERENCE_LOSSES, "reasoning-gym steps": STEPPERS, "config checks": CHECKS}


def test_every_kind_of_part_is_in_a_registry_holding_the_shipped_parts():
    found = registries()
    assert all(isinstance(r, Registry) for r in found.values())
    shipped = {"stages": {"sft", "rloo", "preference"}, "engines": {"hf", "vllm"}, "tasks": {"countdown", "reasoning_gym"},
               "samplers": {"none", "static", "threshold", "frontier", "frontier_replay", "dots"},
               "tools": {"calculator", "oracle"}, "loggers": {"wandb", "tensorboard", "mlflow"},
               "policy losses": {"sequence", "token", "geometric", "gspo", "cispo"}, "preference losses": {"dpo", "ipo"},
               "claim types": {"superiority", "non_inferiority", "equivalence"},
               "config checks": {"config", "model_and_task", "stage", "upstream", "curriculum", "replay",
                                 "dynamic_sampling", "eval", "tool", "task_file", "loggers", "compile", "study"}}
    for kind, names in shipped.items():
        assert names <= set(found[kind]), kind


def other_idioms(tree: ast.Module, rel: str) -> list[str]:
    """A subclass hook, a hand-written register function, a table of parts filled by hand (`TABLE[name] = part`
    at module level) or a dict literal of functions under an upper-case name."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "__init_subclass__":
            found.append(f"{rel}:{node.lineno}: a subclass hook")
        if (isinstance(node, ast.FunctionDef) and node.name.startswith("register")
                and rel not in ("registry.py", "stats/claims/registration.py")):  # that one registers a study
            found.append(f"{rel}:{node.lineno}: def {node.name}")
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Subscript) for t in node.targets):
            found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        functions = [v for v in getattr(value, "values", []) if isinstance(v, ast.Lambda)
                     or isinstance(v, ast.Name) and v.id[:1].islower()]
        if isinstance(target, ast.Name) and target.id.isupper() and isinstance(value, ast.Dict) and functions \
                and len(functions) == len(value.values):
            found.append(f"{rel}:{node.lineno}: {target.id} = {{...}} of functions")
    return found


def test_no_part_registers_another_way():
    offenders = [line for path in sorted(ROOT.rglob("*.py"))
                 for line in other_idioms(ast.parse(path.read_text()), str(path.relative_to(ROOT)))]
    assert not offenders, "register parts with a Registry (ablate.registry):\n" + "\n".join(offenders)


def test_the_scan_finds_the_other_idioms():
    text = ("class A:\n    def __init_subclass__(cls): pass\n"
            "def register_thing(x): pass\n"
            "TABLE = {'a': lambda x: x, 'b': fn}\n"
            "NAMES = {'a': 'b', 'c': RLOO}\n"
            "TABLE['c'] = fn\n")
    assert sorted(line.split(": ", 1)[1] for line in other_idioms(ast.parse(text), "m.py")) == sorted([
        "a subclass hook", "def register_thing", "TABLE = {...} of functions", "TABLE['c'] = fn"])


def test_check_config_asks_the_check_registry_and_runs_its_checks_in_the_documented_order(monkeypatch):
    """check_config is no roll-call: it runs what parts registered (ablate.check_registry.CHECKS), ordered by
    the numbers its docstring's table documents; a new part's check runs where its number puts it."""
    import re

    import ablate.check_registry as check_registry
    import ablate.checks  # noqa: F401 - registers the checks that span parts
    from ablate.check_registry import CHECKS, CheckEntry

    documented = [(int(order), name) for order, name in re.findall(r"^ +(\d+) (\w+) ", check_registry.__doc__, re.M)]
    assert sorted((entry.order, name) for name, entry in CHECKS.items()) == documented
    ran = []
    for name, entry in list(CHECKS.items()):
        monkeypatch.setitem(CHECKS, name, CheckEntry(lambda cfg, name=name: ran.append(name), entry.order))
    monkeypatch.setitem(CHECKS, "mine", CheckEntry(lambda cfg: ran.append("mine"), 95))  # a new part's
    ablate.checks.check_config(None)
    assert ran == [name for _, name in documented[:-1]] + ["mine", "study"]
