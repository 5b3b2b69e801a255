"""The distribution (`ablate-rl`; import name `ablate`): a wheel built from the checkout carries the config
tree, also from a checkout where the `src/ablate/conf` link was not followed (`git -c core.symlinks=false
clone`, Git for Windows' default: a text file holding the link's target), and `python -m ablate.train
experiment=smoke` runs from the installed wheel in another directory."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUILD_FILES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md")


def checkout_copy(dest: Path, follow_link: bool) -> Path:
    """What a clone holds for the build: the build files, conf/ and src/; without `follow_link` the
    src/ablate/conf link is what core.symlinks=false writes, a file whose text is the link's target."""
    dest.mkdir()
    for name in BUILD_FILES:
        shutil.copy2(ROOT / name, dest / name)
    junk = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")
    shutil.copytree(ROOT / "conf", dest / "conf", ignore=junk)
    shutil.copytree(ROOT / "src", dest / "src", symlinks=True, ignore=junk)
    link = dest / "src" / "ablate" / "conf"
    assert link.is_symlink(), "src/ablate/conf is expected to be a link to ../../conf"
    if not follow_link:
        target = os.readlink(link)
        link.unlink()
        link.write_text(target)
    return dest


def build_wheel(source: Path, out: Path) -> Path:
    """pip's wheel build; without build isolation where this interpreter has the setuptools the
    project asks for (no download), else pip fetches it as for any install."""
    try:
        isolation = int(metadata.version("setuptools").split(".")[0]) < 69
    except metadata.PackageNotFoundError:
        isolation = True
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)]
    done = subprocess.run(command + ([] if isolation else ["--no-build-isolation"]), capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    (wheel,) = out.glob("ablate_rl-*.whl")
    return wheel


def config_files(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as z:
        return {n.removeprefix("ablate/conf/") for n in z.namelist() if n.startswith("ablate/conf/")}


def venv_with_wheel(tmp_path: Path, wheel: Path) -> Path:
    """A venv holding only the wheel, which sees this interpreter's packages (the dependencies) through a
    path entry: no download. That entry's own .pth files are not read, so an editable install of ablate
    there cannot shadow the wheel."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                           "--no-index", str(wheel)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return python


@pytest.mark.slow
def test_wheel_carries_the_config_tree_and_trains_from_another_directory(tmp_path):
    expected = {str(p.relative_to(ROOT / "conf")) for p in (ROOT / "conf").rglob("*.yaml")}
    wheels = {}
    for follow in (True, False):
        source = checkout_copy(tmp_path / f"checkout-{follow}", follow_link=follow)
        wheels[follow] = build_wheel(source, tmp_path / f"dist-{follow}")
        assert config_files(wheels[follow]) == expected, f"follow_link={follow}"
    with zipfile.ZipFile(wheels[False]) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
        assert "Name: ablate-rl" in meta and "hydra_plugins/ablate_sweeper/grid_sweeper.py" in z.namelist()
    version = next(line.split(": ", 1)[1] for line in meta.splitlines() if line.startswith("Version: "))

    python = venv_with_wheel(tmp_path, wheels[False])  # the harder case: the link was a text file
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the wheel's ablate, not the checkout's
    env["ABLATE_CACHE"] = str(tmp_path / "cache")
    where = subprocess.run([python, "-c", "import ablate, ablate.config as c; print(ablate.__file__, c.CONF_DIR)"],
                           capture_output=True, text=True, cwd=elsewhere, env=env, check=True).stdout
    assert str(tmp_path / "venv") in where and str(ROOT) not in where, where
    done = subprocess.run([python, "-m", "ablate.train", "experiment=smoke", "trainer.num_threads=1",
                           "hydra.run.dir=run"], capture_output=True, text=True, cwd=elsewhere, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    status = json.loads((elsewhere / "run" / "status.json").read_text())
    assert status["state"] == "completed"
    assert status["versions"]["ablate"] == version  # looked up under the distribution's name
    assert (elsewhere / "run" / "eval" / "no_tool" / "summary.json").is_file()

