"""What a release ships beside the code: LICENSE, CHANGELOG.md, the chart package (`make package`).

`make -n` only prints the recipe: nothing is built, installed or packaged here.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import yaml
from setuptools.config.setupcfg import read_configuration

import sunk
from sunk_dev import chart
from sunk_dev.cluster import default_home

ROOT = Path(__file__).resolve().parents[2]


def test_the_license_is_the_full_apache_2_text_and_the_wheel_and_chart_name_it():
    text = (ROOT / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License\n                           Version 2.0, January 2004")
    assert "END OF TERMS AND CONDITIONS" in text and "APPENDIX: How to apply the Apache License" in text
    metadata = read_configuration(ROOT / "setup.cfg")["metadata"]
    assert metadata["license"] == "Apache-2.0"
    assert metadata["license_files"] == ["LICENSE"]
    meta = yaml.safe_load((chart.CHART / "Chart.yaml").read_text())
    assert meta["annotations"]["artifacthub.io/license"] == "Apache-2.0"


def test_the_changelog_keeps_a_changelog_with_this_versions_section():
    text = (ROOT / "CHANGELOG.md").read_text()
    assert text.startswith("# Changelog\n")
    assert "https://keepachangelog.com/en/1.1.0/" in text
    sections = re.findall(r"^## \[?([^\]\s]+)\]? - (.+)$", text, re.MULTILINE)
    assert sections and sections[0] == (sunk.__version__, "Unreleased")
    assert sunk.__version__ == yaml.safe_load((chart.CHART / "Chart.yaml").read_text())["version"]
    groups = re.findall(r"^### (.+)$", text, re.MULTILINE)
    assert groups and set(groups) <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}


def packaging_recipe(env: dict[str, str]) -> str:
    done = subprocess.run(["make", "-n", "package"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def destination(recipe: str, env: dict[str, str]) -> Path:
    """Where the printed `helm package` writes, as the shell expands it."""
    [line] = [line for line in recipe.splitlines() if '" package ' in line]
    given = line.split("--destination", 1)[1].strip()
    return Path(subprocess.run(["sh", "-c", f"echo {given}"], env=env, capture_output=True, text=True,
                               check=True).stdout.strip())


def test_make_package_lints_then_packages_the_chart_into_the_dev_clusters_home(tmp_path):
    env = {**os.environ, "SUNK_DEV_HOME": str(tmp_path / "home")}
    recipe = packaging_recipe(env)
    assert recipe.index(" lint --strict manifests/chart/sunk") < recipe.index(" package manifests/chart/sunk")
    assert "helm_binary()" in recipe  # the dev cluster's pinned helm, not one from PATH
    assert destination(recipe, env) == tmp_path / "home" / "dist"


def test_make_package_without_sunk_dev_home_writes_where_the_dev_cluster_lives(tmp_path, monkeypatch):
    monkeypatch.delenv("SUNK_DEV_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    env = dict(os.environ)
    written = destination(packaging_recipe(env), env)
    assert written == default_home() / "dist" == tmp_path / ".cache" / "sunk-dev" / "dist"
    assert ROOT not in written.parents
