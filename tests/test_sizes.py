"""The house's sizes (issue 61): no function over 60 lines in the package or the repository's tools/, and the
entry point `ablate.train` at most 200 lines. A longer function is split where it has a seam."""

import ast
from pathlib import Path

import ablate

ROOT = Path(ablate.__file__).parent
TOOLS = Path(__file__).resolve().parents[1] / "tools"
MAX_FUNCTION = 60


def long_functions(tree: ast.AST, limit: int = MAX_FUNCTION) -> list[tuple[str, int]]:
    """(name, lines) of every function or method longer than `limit`, its decorators counted."""
    return [(node.name, n) for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and (n := node.end_lineno - min([node.lineno, *(d.lineno for d in node.decorator_list)]) + 1) > limit]


def test_no_function_is_over_60_lines():
    found = [f"{path.relative_to(path.parents[1])}: {name} ({n} lines)" for folder in (ROOT, TOOLS)
             for path in sorted(folder.rglob("*.py")) for name, n in long_functions(ast.parse(path.read_text()))]
    assert not found, "split these where they have a seam:\n" + "\n".join(found)


def test_the_scan_counts_a_function_from_its_decorator_to_its_last_line():
    body = "\n".join(f"    x{i} = {i}" for i in range(59))
    assert long_functions(ast.parse(f"def f():\n{body}\n")) == []  # 60 lines
    assert long_functions(ast.parse(f"@wraps\ndef f():\n{body}\n")) == [("f", 61)]


def test_the_entry_point_is_at_most_200_lines():
    assert len((ROOT / "train.py").read_text().splitlines()) <= 200
