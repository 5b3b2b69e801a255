"""Every module of `ablate` imports, and no two modules import each other, directly or through others:
the import graph (module-level imports and the ones inside functions alike) is acyclic."""

import ast
import importlib
import pkgutil
from pathlib import Path

import ablate

ROOT = Path(ablate.__file__).parent


def modules() -> dict[str, Path]:
    found = {"ablate": ROOT / "__init__.py"}
    for info in pkgutil.walk_packages([str(ROOT)], prefix="ablate."):
        path = ROOT.joinpath(*info.name.split(".")[1:])
        found[info.name] = path / "__init__.py" if info.ispkg else path.with_suffix(".py")
    return found


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            # `from ablate.pkg import sub` imports the submodule `sub` when there is one
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        out |= {t for t in targets if t in known and t != name}
    return out


def test_every_module_imports():
    for name in modules():
        if name == "ablate.__main__" or name.endswith(".__main__"):
            continue  # entry points run on import
        importlib.import_module(name)


def test_the_import_graph_is_acyclic():
    found = modules()
    graph = {name: imports_of(name, path, set(found)) for name, path in found.items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for target in sorted(graph[name]):
            if state.get(target) == 1:
                cycle = path[path.index(target):] + [target] if target in path else [name, target]
                raise AssertionError(f"import circle: {' -> '.join(cycle)}")
            if target not in state:
                visit(target, [*path, target])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])


def test_the_config_package_imports_nothing_above_it():
    """Configuration (schemas, ConfigError, the config-only checks) is the bottom layer: every part imports
    it, it imports no part (only the leaf ablate.device, for the sweep-jobs resolver)."""
    found = modules()
    allowed = {name for name in found if name == "ablate.config" or name.startswith("ablate.config.")}
    allowed |= {"ablate.device"}
    for name in sorted(allowed):
        above = imports_of(name, found[name], set(found)) - allowed
        assert not above, f"{name} imports {sorted(above)}"


def test_the_stage_registry_imports_no_part():
    """The registry is read by the checks and the upstream cache before any compute: no part behind it."""
    found = modules()
    assert imports_of("ablate.stages.registry", found["ablate.stages.registry"], set(found)) <= {"ablate.config",
                                                                                                "ablate.registry"}


def test_the_registry_imports_nothing_of_ablate():
    """Every kind of part registers in an ablate.registry.Registry: the module sits under them all."""
    found = modules()
    assert imports_of("ablate.registry", found["ablate.registry"], set(found)) == set()


def test_the_rundir_package_imports_no_part():
    """The run-directory contract sits under training and stats alike: it imports no part of ablate (only
    the leaf ablate.stopping, whose signals a run's status records)."""
    found = modules()
    inside = {name for name in found if name == "ablate.rundir" or name.startswith("ablate.rundir.")}
    for name in sorted(inside):
        above = imports_of(name, found[name], set(found)) - inside
        assert above <= {"ablate.stopping"}, f"{name} imports {sorted(above)}"


def test_the_learners_know_no_task_or_tool():
    """ablate.lit imports no task's package (the task seam, `ablate.tasks`, only) and names none of the
    shipped tools' or levels' metrics: a task or tool contributes its own (issue 43)."""
    found = modules()
    learners = {name: path for name, path in found.items() if name.startswith("ablate.lit")}
    for name, path in learners.items():
        tasks = {t for t in imports_of(name, path, set(found)) if t.startswith("ablate.tasks.")}
        assert tasks <= {"ablate.tasks.base"}, f"{name} imports {sorted(tasks)}"
        text = path.read_text().lower()
        assert "calc" not in text and "operand" not in text, name


STATS_ROOMS = ("maths", "read", "values", "claims", "stages", "render")  # from the ground up


def test_the_stats_rooms_stand_on_their_floors():
    """ablate.stats is its pipeline in rooms (docs/stats.md): read -> values -> claims -> stages -> render, the
    pure maths beside read on the ground. A room imports only its own and the rooms below it, so no import runs
    back up a floor and no circle can form between rooms; maths imports nothing of ablate outside itself."""
    found = modules()
    floor = {room: i for i, room in enumerate(STATS_ROOMS)}

    def room_of(name: str) -> str | None:
        parts = name.split(".")
        return parts[2] if len(parts) > 2 and parts[:2] == ["ablate", "stats"] and parts[2] in floor else None

    rooms = {name: room_of(name) for name in found if room_of(name)}
    assert set(rooms.values()) == set(STATS_ROOMS)
    assert {n for n in found if n.startswith("ablate.stats.")} - set(rooms) == {"ablate.stats.__main__"}
    for name, room in sorted(rooms.items()):
        imported = imports_of(name, found[name], set(found))
        above = {t for t in imported if t == "ablate.stats" or (room_of(t) or room) != room
                 and floor.get(room_of(t), -1) >= floor[room]}
        assert not above, f"{name} ({room}/) imports {sorted(above)}: a room imports only the rooms below it"
        if room == "maths":
            outside = {t for t in imported if room_of(t) != "maths"}
            assert not outside, f"{name} imports {sorted(outside)}: the maths imports nothing of ablate"
