"""Worst-case time of the verifier and the calculator on hostile model output (figures printed,
not asserted; tests/test_verifier_fuzz.py asserts a generous bound on the same generator).

    PYTHONPATH=src python bench/bench_hostile.py                # 20k generated + the crafted 5 MB cases
    PYTHONPATH=src python bench/bench_hostile.py --n 2000       # quicker

Inputs: `ablate.tasks.countdown.hostile.hostile_inputs` (long numbers, unicode digits, deep nesting,
huge products, tag floods, megabytes of text, random mixes; one in 500 up to 5 MB) plus `CRAFTED`,
the 5 MB shapes that are worst for each step of the scoring (tag floods of every arrangement, one
long literal, a product of 4,000-digit factors, 5 MB of one character). Per function, the worst
case: its time, its kind and its size. docs/tasks.md's promise (Speed) is every input up to 5 MB under 15 ms.
"""

from __future__ import annotations

import argparse
import gc
import platform
import time

from ablate.config import load_group_config
from ablate.rollout.tools import Calculator
from ablate.tasks.countdown import Reward, compute_score, judge
from ablate.tasks.countdown.hostile import MB, hostile_inputs

NUMBERS, TARGET = [44, 19, 35], 98
SIZE = 5 * MB


def crafted() -> dict[str, str]:
    def fill(unit: str) -> str:
        return unit * (SIZE // len(unit))

    answer = "<answer>44 + 19 + 35</answer>"
    return {
        "5 MB of x": fill("x"),
        "5 MB of newlines": fill("\n"),
        "5 MB of '>x' + two closes": fill(">x")[:-30] + "</answer>\n</answer>",
        "closed tags, one line": fill("<answer>1</answer>"),
        "closed tags, one per line": fill("<answer>1</answer>\n"),
        "alternating open/close lines": fill("<answer>\n</answer>\n"),
        "unclosed tags": fill("<answer>"),
        "close tags": fill("</answer>"),
        "close tags + newline + close": fill("</answer>")[:-20] + "\n</answer>",
        "close tag lines": fill("</answer>\n"),
        "close/open pairs": fill("</answer><answer>"),
        "close + char": fill("</answer>a")[:-20] + "\n</answer>",
        "answer then 5 MB": answer + fill("x"),
        "5 MB inside one answer": "<answer>" + fill(" ") + "</answer>",
        "5 MB of '1 ' in an answer": "<answer>" + fill("1 ") + "</answer>",
        "5 MB of '1+' in an answer": "<answer>" + fill("1+") + "1</answer>",
        "one 5M-digit number": "<answer>" + fill("7") + "</answer>",
        "5,000-digit number": "<answer>" + "7" * 5000 + "</answer>",
        "300 x 4,000-digit product": "<answer>" + "*".join(["7" * 4000] * 300) + "</answer>",
        "1,000 x 1-digit quotient": "<answer>" + "/".join(["7", "3"] * 500) + "</answer>",
        "100 x 10-digit product": "<answer>" + "*".join(["9" * 10] * 100) + "</answer>",
        "10k nested parentheses": "<answer>" + "(" * 10_000 + "44+19+35" + ")" * 10_000 + "</answer>",
        "200 nested, 999 factors": "<answer>" + "(" * 200 + "*".join(["9"] * 999) + ")" * 200 + "</answer>",
    }


def functions():
    tinyzero = Reward.from_config(load_group_config("reward", "tinyzero"))
    partial = Reward.from_config(load_group_config("reward", "partial"))
    return {
        "judge": lambda text, numbers, target: judge(text, numbers, target),
        "judge(last_line_only)": lambda text, numbers, target: judge(text, numbers, target, last_line_only=True),
        "compute_score": lambda text, numbers, target: compute_score(text, {"numbers": numbers, "target": target}),
        "reward tinyzero": lambda text, numbers, target: tinyzero(text, numbers, target),
        "reward partial": lambda text, numbers, target: partial(text, numbers, target),
        "Calculator.answer": lambda text, numbers, target: Calculator.answer(text),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20_000, help="generated inputs (default 20k)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {platform.python_implementation()} {platform.python_version()}")
    cases = [(f"crafted: {name}", text, NUMBERS, TARGET) for name, text in crafted().items()]
    cases += [(kind, text, numbers, target) for kind, text, numbers, target in hostile_inputs(args.n, args.seed)]
    # One pass over everything (garbage collector off), keeping each function's 32 slowest inputs; those
    # and every crafted shape are timed 5 more times and the best of those counts, so that a pause of
    # the machine (other jobs share its cores) is not reported as the verifier's worst case.
    gc.disable()
    fns = functions()
    slowest: dict[str, list[tuple[float, int]]] = {name: [] for name in fns}
    for index, (kind, text, numbers, target) in enumerate(cases):
        scored = "Assistant: " + text
        for name, fn in fns.items():
            arg = scored if name == "compute_score" else text
            start = time.perf_counter()
            fn(arg, numbers, target)
            elapsed = time.perf_counter() - start
            slowest[name] = sorted([*slowest[name], (elapsed, index)], reverse=True)[:32]
    print(f"{len(cases):,} hostile inputs ({len(crafted())} crafted 5 MB shapes + {args.n:,} generated, seed {args.seed})")
    for name, fn in fns.items():
        best = []
        for index in sorted({i for _, i in slowest[name]} | set(range(len(crafted())))):
            kind, text, numbers, target = cases[index]
            arg = "Assistant: " + text if name == "compute_score" else text
            times = []
            for _ in range(5):
                start = time.perf_counter()
                fn(arg, numbers, target)
                times.append(time.perf_counter() - start)
            best.append((min(times), kind, len(arg)))
        seconds, kind, size = max(best)
        print(f"worst case: {name:<22} {seconds * 1e3:8.2f} ms  ({kind}, {size:,} chars)")
    gc.enable()


if __name__ == "__main__":
    main()
