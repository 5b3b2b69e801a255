"""The guard for refactors that must not change numbers: the runs of tests/goldens/record.py give the
recorded numbers. Bit for bit on a machine whose fingerprint (CPU model and flags, torch's capability,
torch/MKL/oneDNN, Python and the numeric packages) is a recording's; on any other within record.RTOL /
record.ATOL (measured across CPUs, bench/bench_goldens_spread.py) of its instruction set's recording, or
the first; the test says which comparison it made (its output, a warning, and the junit property
`goldens_comparison`)."""

import json
import sys
import warnings
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "goldens"))
import record  # noqa: E402


def test_the_fixed_runs_reproduce_the_recorded_numbers(tmp_path, record_property):
    here = record.fingerprint()
    data, exact = record.choose(here)
    recorded = json.loads((data / "recorded.json").read_text())
    how = (f"bit-identical check against {data.name}/ (this machine matches its fingerprint)" if exact else
           f"within rtol {record.RTOL:g}, atol {record.ATOL:g} of {data.name}/, not bit for bit: "
           + "; ".join(record.fingerprint_differences(recorded.get("fingerprint"), here)))
    record_property("goldens_comparison", "bit-identical" if exact else "tolerance")
    print(f"goldens of {recorded['commit'][:10]}: {how}")
    if not exact:
        warnings.warn(f"goldens compared {how}", UserWarning)
    results = record.produce(tmp_path)
    found = []
    for name, numbers in results.items():
        golden = json.loads((data / f"{name}.json").read_text())
        got = json.loads(json.dumps(numbers, sort_keys=True, allow_nan=True))
        found += record.differences(got, golden, exact, name)
        if not exact:  # how far this machine is from the recording, for whoever re-measures the tolerance
            print(f"{name}: {len(record.differences(got, golden, True, name))} numbers differ in the last bits")
    assert not found, f"{len(found)} numbers differ ({how}):\n" + "\n".join(found[:20])
