"""A SlurmCluster in wire form, for the SlurmCluster tests (unit tests only)."""

from __future__ import annotations

from typing import Any

from sunk.model import names

IMAGES = {c: f"registry.example/sunk-{c}:0.1.0-slurm25.11"
          for c in ("slurmctld", "slurmdbd", "slurmrestd", "login", "slurmd")}
IMAGES["mariadb"] = "registry.example/sunk-mariadb:0.1.0-slurm25.11"


def cluster(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"slurm": {"release": "25.11"}, "images": dict(IMAGES),
                            "partitions": [{"name": "gpu", "nodeSets": ["gpu"], "default": True}],
                            "gresTypes": ["gpu"]}
    body.update(spec)
    return {"apiVersion": names.SLURMCLUSTER_API_VERSION, "kind": "SlurmCluster",
            "metadata": {"name": "sc", "namespace": "slurm", "uid": "uid-sc", "generation": 2}, "spec": body}
