"""One idiom for every kind of part: a `Registry` (name -> part), and its `.register` decorating the part.

    TASKS = Registry("task.name")
    @TASKS.register                                    # under the part's own `name`
    class CountdownTask(Task): name = "countdown"

    ENGINES = Registry("rollout", entry=lambda name, build, **meta: EngineEntry(build, **meta))
    @ENGINES.register("hf", check=_check_hf, schema=HFRolloutConfig)   # a name, and what is kept with the part
    def build_hf(cfg, model, tokenizer, tool): ...

Stages, samplers, rollout engines, the objectives' tables (advantages, policy losses, ...), tasks, tools,
loggers and claim types each have one. A registry is a dict (`name in R`, `R.get(name)`, iteration, a test's
`monkeypatch.setitem`); `R[name]` of a name it does not hold raises one line naming the key and the known
names. This module imports nothing of ablate: every part's module can import it.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

P = TypeVar("P")


class Registry(dict):
    """`key`: the config key whose value names a part (its error says `key='name': expected one of (...)`);
    `attr`: the attribute a part registered without a name is found under (`name`; tools: `kind`);
    `entry(name, part, **meta)`: what is kept for the part (the part itself when None); `error`: what an
    unknown name raises (ValueError; the stages' ConfigError); `hint`: a clause after the known names."""

    def __init__(self, key: str, *, attr: str = "name", entry: Callable[..., Any] | None = None,
                 error: type[Exception] = ValueError, hint: str = ""):
        super().__init__()
        self.key, self.attr, self.entry, self.error, self.hint = key, attr, entry, error, hint

    def register(self, name: Any = None, /, **meta: Any) -> Any:
        """Decorator: `@R.register` (under the part's `attr`) or `@R.register("name", **meta)`; returns the part."""
        if name is not None and not isinstance(name, str):
            return self._add(getattr(name, self.attr), name, meta)

        def add(part: P) -> P:
            return self._add(name if name is not None else getattr(part, self.attr), part, meta)
        return add

    def _add(self, name: str, part: P, meta: dict[str, Any]) -> P:
        self[name] = self.entry(name, part, **meta) if self.entry else part
        return part

    def unknown(self, name: Any) -> str:
        """The one line for a name no part is registered under."""
        return f"{self.key}={name!r}: expected one of {tuple(self)}{self.hint}"

    def __missing__(self, name: Any) -> Any:
        raise self.error(self.unknown(name))
