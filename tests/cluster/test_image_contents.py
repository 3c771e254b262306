"""sunk's image, as the dev cluster built and imported it, carries the product and no dev tool.

The unit tests check the sources the image is built from (tests/unit/test_product_contents.py);
this reads what came out: every layer of the docker archive ``sunk-dev up`` imported into the real
Node's containerd, the very image the chart's Pods run (test_chart_pods.py).
"""

from __future__ import annotations

import json
import re
import tarfile

import pytest

import sunk
from sunk_dev import images

pytestmark = pytest.mark.cluster

SITE = f"{images.VENV.lstrip('/')}/lib/python{images.PYTHON}/site-packages/"
BIN = f"{images.VENV.lstrip('/')}/bin/"
# A dev tool or a test double, in the product's packages or as a package of its own.
NOT_PRODUCT = re.compile(r"^(sunk_dev|sunk_dev-[^/]*\.dist-info)(/|$)"
                         r"|^(sunk|scheduler|extender)/(.*/)?(dev|\w*fake\w*)(/|\.py)")


def image_files(archive_path) -> set[str]:
    """Every path in every layer of a docker archive (``docker save``'s format)."""
    found: set[str] = set()
    with tarfile.open(archive_path) as archive:
        (manifest,) = json.loads(archive.extractfile("manifest.json").read())
        for member in manifest["Layers"]:
            with tarfile.open(fileobj=archive.extractfile(member)) as layer:
                found |= {name.removeprefix("./") for name in layer.getnames()}
    return found


def test_sunks_image_carries_the_product_and_no_dev_tool(dev_cluster):
    name = f"{images.SUNK_REPOSITORY}:{sunk.__version__}"
    assert name in dev_cluster.built_images, f"sunk-dev up built no {name} (SUNK_DEV_IMAGES=0?)"
    files = image_files(dev_cluster.home / "images" / "sunk.tar")
    assert f"{SITE}sunk/commands/syncer.py" in files and f"{SITE}scheduler/decide.py" in files
    assert {f"{BIN}{script}" for script in ("sunk-syncer", "sunk-scheduler", "sunk-extender", "sunk-operator")} <= files
    assert f"{BIN}sunk-dev" not in files
    dev_files = sorted(f for f in files if f.startswith(SITE) and NOT_PRODUCT.search(f.removeprefix(SITE)))
    assert not dev_files, f"the image carries dev tools: {dev_files[:20]}"


@pytest.mark.parametrize(("path", "dev"), [
    ("sunk_dev/cluster.py", True), ("sunk_dev-0.1.0.dist-info/RECORD", True), ("sunk/dev/cli.py", True),
    ("sunk/slurm/fake.py", True), ("sunk/kube/fakeclient.py", True),
    ("sunk/slurm/rest.py", False), ("sunk/nodeset/devices.py", False), ("sunk-0.1.0.dist-info/RECORD", False),
    ("kubernetes/client/api/core_v1_api.py", False),
])
def test_what_counts_as_a_dev_file(path, dev):
    assert bool(NOT_PRODUCT.search(path)) is dev
