"""Imports sit at the top of a module, where a reader sees what it stands on. One inside a function says why on
its own line or the line above (a block of imports right under it shares that comment), as one of:

    # optional: <the extra or platform it needs>        (vllm, wandb, tensorboard, fcntl...)
    # heavy: <what it costs, and the fast path it keeps off>   (torch or Lightning off the config refusal of
                                                                ablate.train, scipy off `ablate.stats --help`)
    # cycle: <the module that imports this one>
    # order: <what must happen first>                 (an environment variable read at import, a backend)

(issue 61: no hidden wiring)."""

import ast
import re
import tokenize
from pathlib import Path

import ablate

SRC = Path(ablate.__file__).parent.parent
REASON = re.compile(r"#.*\b(optional|heavy|cycle|order): *\S")

# Modules whose function-level imports are still to be given a reason or moved up: the count left without one.
# Lower a count when you move or explain one of them; drop the entry at 0.
PENDING: dict[str, int] = {}


def comments(text: str) -> dict[int, str]:
    """Line number -> the comment on it."""
    lines = iter(text.splitlines(keepends=True))
    return {tok.start[0]: tok.string for tok in tokenize.generate_tokens(lambda: next(lines, ""))
            if tok.type == tokenize.COMMENT}


def function_imports(tree: ast.Module) -> list[ast.stmt]:
    found: dict[int, ast.stmt] = {}
    for func in ast.walk(tree):
        if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(func):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    found[id(node)] = node
    return sorted(found.values(), key=lambda node: node.lineno)


def unexplained(path: Path) -> list[int]:
    """Line numbers of the function-level imports of `path` that give no reason."""
    text = path.read_text(encoding="utf-8")
    notes, lines = comments(text), text.splitlines()
    imports = function_imports(ast.parse(text))
    import_end = {node.end_lineno: node for node in imports}

    def explained(node: ast.stmt) -> bool:
        if REASON.search(notes.get(node.lineno, "")):
            return True
        above = node.lineno - 1
        while above >= 1 and lines[above - 1].strip().startswith("#"):  # the comment lines right above
            if REASON.search(notes.get(above, "")):
                return True
            above -= 1
        # the import right above, in the same block (its groups parted by one blank line, as isort writes them)
        previous = import_end.get(node.lineno - 1) or (not lines[node.lineno - 2].strip()
                                                        and import_end.get(node.lineno - 2))
        return bool(previous) and explained(previous)

    return [node.lineno for node in imports if not explained(node)]


def test_function_level_imports_say_why():
    found = {str(p.relative_to(SRC)): unexplained(p) for p in sorted(SRC.rglob("*.py"))}
    problems = []
    for name, linenos in found.items():
        allowed = PENDING.get(name, 0)
        if len(linenos) > allowed:
            where = ", ".join(f"{name}:{n}" for n in linenos)
            problems.append(f"{where}: an import inside a function without `# optional:`, `# heavy:`, `# cycle:` "
                            f"or `# order:` and its reason ({len(linenos)}, at most {allowed} here): move it to "
                            "the top of the module, or say why it cannot be there")
        elif len(linenos) < allowed:
            problems.append(f"{name}: {len(linenos)} unexplained function-level imports, PENDING allows {allowed}: "
                            "lower its count in tests/test_function_imports.py (drop it at 0)")
    assert not problems, "\n".join(problems)


def test_the_rule_reads_reasons_as_written(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("def f():\n"
                    "    import a  # heavy: a\n"
                    "    # optional: the b extra\n"
                    "    import b\n"
                    "    from b import c\n"
                    "\n"
                    "    from ablate import d  # a group of the block above\n"
                    "\n"
                    "\n"
                    "    import e\n"
                    "    # cycle: f imports this module, and the reason\n"
                    "    # goes on over two lines\n"
                    "    import f  # noqa: F401\n"
                    "    x = 1\n"
                    "    import g  # why not\n"
                    "    import h\n")
    assert unexplained(path) == [10, 15, 16]
