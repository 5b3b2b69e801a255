"""Only what pyproject.toml cannot say: where the wheel's config tree comes from.

`src/ablate/conf` is a symbolic link to the top-level `conf/`. A checkout that does not follow links
(`git -c core.symlinks=false clone`, Git for Windows' default) has a one-line text file there instead,
and the package data `conf/**/*.yaml` would then find nothing: a wheel without its configs, whose
`python -m ablate.train` fails at composition. So when the link is not a directory the build copies
the yaml files of `conf/` into the package itself.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildPyWithConf(build_py):
    def run(self):
        super().run()
        link, tree = ROOT / "src" / "ablate" / "conf", ROOT / "conf"
        if link.is_dir() or self.editable_mode:  # followed link: package data has it; editable: read in place
            return
        if not tree.is_dir():
            raise SystemExit(f"no config tree: neither {link} nor {tree} is a directory")
        target = Path(self.build_lib) / "ablate" / "conf"
        for source in sorted(tree.rglob("*.yaml")):
            destination = target / source.relative_to(tree)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, destination)


setup(cmdclass={"build_py": BuildPyWithConf})
