"""The guard for refactors that must not change numbers: the runs of tests/goldens/record.py give the
recorded numbers. Bit for bit on a CPU with a recording's instruction set (torch picks kernels by
it: recorded/ is AVX512's, recorded/avx2/ AVX2's, each made by the same code); on any other within 1e-6
relative of recorded/, and the test says which comparison it made."""

import json
import math
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent / "goldens"))
import record  # noqa: E402


def same(a, b, exact: bool, where: str) -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys(), f"{where}: keys differ: {sorted(a.keys() ^ b.keys())}"
        for key in a:
            same(a[key], b[key], exact, f"{where}/{key}")
    elif isinstance(a, list):
        assert len(a) == len(b), f"{where}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, exact, f"{where}[{i}]")
    elif isinstance(a, float) and isinstance(b, (int, float)):
        if math.isnan(a) or math.isnan(b):
            assert math.isnan(a) and math.isnan(b), f"{where}: {a} != {b}"
        elif exact:
            assert a == b, f"{where}: {a!r} != {b!r} (bit-identity)"
        else:
            assert a == pytest.approx(b, rel=1e-6, abs=1e-9), f"{where}: {a!r} != {b!r}"
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


@pytest.mark.slow
def test_the_fixed_runs_reproduce_the_recorded_numbers(tmp_path, monkeypatch):
    data = record.data_dir(torch.backends.cpu.get_cpu_capability())
    if not (data / "recorded.json").is_file():
        data = record.DATA  # an instruction set with no recording of its own: the first one's, within 1e-6
    recorded = json.loads((data / "recorded.json").read_text())
    exact = recorded["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    print(f"goldens of {recorded['commit'][:10]} on {recorded['cpu_capability']}: "
          f"{'bit-identical' if exact else 'within 1e-6 (another CPU)'} check")
    results = record.produce(tmp_path)
    for name, numbers in results.items():
        golden = json.loads((data / f"{name}.json").read_text())
        same(json.loads(json.dumps(numbers, sort_keys=True, allow_nan=True)), golden, exact, name)
