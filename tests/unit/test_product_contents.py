"""The product's wheel and image carry the product only: no dev cluster tool, no test double.

The dev tools and the fakes are the sunk-dev distribution (dev/setup.cfg, package ``sunk_dev``).
The wheel's packages and scripts are read with setuptools' own reading of setup.cfg (what
``pip wheel .`` packs, without building it); the image's sources are ``sunk_dev.images.project_files``
(``make images`` is the one definition of the image: there is no Dockerfile).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from setuptools.config.setupcfg import read_configuration

from sunk_dev import images

ROOT = Path(__file__).resolve().parents[2]
PRODUCT_PACKAGES = ("sunk", "scheduler", "extender")
# What a module of the product must not be: a dev tool, a test double.
NOT_PRODUCT = re.compile(r"(^|[._/])(sunk_dev|dev|fakes?|fake\w*|\w*fake|testing|tests?)($|[._/])")


def wheel_of(setup_cfg: Path) -> tuple[list[str], list[str]]:
    """The packages and console scripts a wheel of this setup.cfg would carry."""
    options = read_configuration(setup_cfg)["options"]
    return sorted(options["packages"]), sorted(options.get("entry_points", {}).get("console_scripts", []))


def modules_of(packages: list[str], root: Path) -> list[str]:
    """Every module file of those packages, as a path under the root (what the wheel's RECORD lists)."""
    return sorted(path.relative_to(root).as_posix() for package in packages
                  for path in root.joinpath(*package.split(".")).glob("*.py"))


def not_product(names: list[str]) -> list[str]:
    return [name for name in names if NOT_PRODUCT.search(name.removesuffix(".py"))]


def test_the_wheel_has_the_product_packages_and_nothing_else():
    packages, _ = wheel_of(ROOT / "setup.cfg")
    assert {p.split(".")[0] for p in packages} == set(PRODUCT_PACKAGES)
    assert not not_product(packages)
    assert not not_product(modules_of(packages, ROOT))


def test_the_wheel_installs_the_daemons_and_no_dev_script():
    _, scripts = wheel_of(ROOT / "setup.cfg")
    assert [s.split(" = ")[0] for s in scripts] == ["sunk-extender", "sunk-operator", "sunk-scheduler", "sunk-syncer"]
    assert all(s.split(" = ")[1].split(".")[0] in PRODUCT_PACKAGES for s in scripts)


def test_the_dev_distribution_has_the_dev_tools_and_the_fake():
    packages, scripts = wheel_of(ROOT / "dev" / "setup.cfg")
    assert packages == ["sunk_dev"]
    assert scripts == ["sunk-dev = sunk_dev.cli:main"]
    assert "sunk_dev/fakeslurm.py" in modules_of(packages, ROOT / "dev")


@pytest.mark.parametrize("name", [
    "sunk_dev", "sunk_dev/cluster.py", "sunk.dev", "sunk/dev/cli.py", "sunk/slurm/fake.py", "sunk.slurm.fakes",
    "sunk/kube/fakeclient.py", "sunk/testing/x.py", "scheduler/tests/helpers.py", "sunk/slurm/slurmfake.py",
])
def test_what_is_not_product_is_recognised(name):
    assert not_product([name]) == [name]


@pytest.mark.parametrize("name", [
    "sunk/slurm/rest.py", "sunk/nodeset/devices.py", "sunk/translate/podjob.py", "scheduler/decide.py", "sunk.kube",
])
def test_product_modules_are_not_mistaken(name):
    assert not_product([name]) == []


def test_a_setup_cfg_that_would_ship_the_fake_is_caught(tmp_path):
    """The check above could only fail on a broken setup.cfg: a checkout with the fake put back shows it can."""
    (tmp_path / "setup.cfg").write_text((ROOT / "setup.cfg").read_text())
    (tmp_path / "README.md").write_text("")  # the long description
    for package in ("sunk", "sunk/slurm", "sunk/dev"):
        (tmp_path / package).mkdir(parents=True, exist_ok=True)
        (tmp_path / package / "__init__.py").write_text("__version__ = '0'\n")
    (tmp_path / "sunk" / "slurm" / "fake.py").write_text("")
    packages, _ = wheel_of(tmp_path / "setup.cfg")
    assert not_product(packages) == ["sunk.dev"]
    assert not_product(modules_of(packages, tmp_path)) == ["sunk/dev/__init__.py", "sunk/slurm/fake.py"]


def test_there_is_one_definition_of_the_image():
    """A Dockerfile beside ``make images`` would be a second definition no test builds (issue 34)."""
    assert not (ROOT / "Dockerfile").exists()
    assert not not_product(list(images.SOURCES))


def test_the_dev_clusters_image_is_built_from_the_product_only():
    files = [name for name, _ in images.project_files(ROOT)]
    assert "sunk/slurm/rest.py" in files and "sunk/scripts/prolog.sh" in files
    assert {name.split("/")[0] for name in files} == set(images.SOURCES)
    assert not not_product(files)
