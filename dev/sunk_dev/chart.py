"""sunk's Helm chart (manifests/chart/sunk), rendered with ``helm template``.

The chart is the one source of truth for the deployment: tests and tools read its rendered
objects, never a copy. helm is the dev cluster's pinned build (sunk_dev.kubebuild), built
into the dev cluster's cache the first time it is needed (``go install``) and reused after.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from sunk_dev import kubebuild

CHART = Path(__file__).resolve().parents[2] / "manifests" / "chart" / "sunk"
RELEASE = "sunk"
NAMESPACE = "slurm"
# What `helm install` needs at least: a Slurm endpoint and a credential. (Not a real JWT:
# rendering never checks it.)
MINIMAL: dict[str, Any] = {"slurm": {"api": {"url": "http://slurm-restapi:6820"},
                                     "auth": {"token": "eyJhbGciOiJIUzI1NiJ9.rendered-only.signature"}}}

Doc = dict[str, Any]


class RenderError(Exception):
    """helm refused the values (schema, or a check in templates/validate.yaml): its message."""


def helm_binary(cache: Path | None = None) -> Path:
    """helm of the pinned version: the dev cluster's (in its cache, SUNK_DEV_HOME), or built now there."""
    from sunk_dev.cluster import default_home

    return kubebuild.build_helm(cache or default_home(), log=sys.stderr)


def merged(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """Values layered as ``helm -f a -f b`` layers them: maps merge key by key, the rest is replaced."""
    out: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
                out[key] = merged(out[key], value)
            else:
                out[key] = value
    return out


def _helm(helm: Path | None, args: Sequence[str], values: Mapping[str, Any]) -> subprocess.CompletedProcess[str]:
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="sunk-values-") as f:
        json.dump(values, f)  # JSON is YAML: helm reads it as a values file
        f.flush()
        return subprocess.run([str(helm or helm_binary()), *args, "-f", f.name], capture_output=True, text=True,
                              check=False, timeout=120)


def render_text(values: Mapping[str, Any] | None = None, *, base: Mapping[str, Any] = MINIMAL, release: str = RELEASE,
                namespace: str = NAMESPACE, helm: Path | None = None, extra_args: Sequence[str] = ()) -> str:
    """``helm template`` of the chart with ``values`` over ``base`` (MINIMAL: an endpoint and a token)."""
    done = _helm(helm, ["template", release, str(CHART), "--namespace", namespace, *extra_args],
                 merged(base, values or {}))
    if done.returncode != 0:
        raise RenderError(done.stderr.strip())
    return done.stdout


def render(values: Mapping[str, Any] | None = None, *, base: Mapping[str, Any] = MINIMAL, release: str = RELEASE,
           namespace: str = NAMESPACE, helm: Path | None = None, extra_args: Sequence[str] = ()) -> list[Doc]:
    """The chart's objects as ``helm template`` renders them (a RenderError if helm refuses the values)."""
    text = render_text(values, base=base, release=release, namespace=namespace, helm=helm, extra_args=extra_args)
    return [doc for doc in yaml.safe_load_all(text) if doc]


def lint(values: Mapping[str, Any] | None = None, *, base: Mapping[str, Any] = MINIMAL,
         helm: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``helm lint --strict`` of the chart with ``values`` over ``base``."""
    return _helm(helm, ["lint", "--strict", str(CHART)], merged(base, values or {}))


def find(docs: Sequence[Doc], kind: str, name: str, namespace: str | None = None) -> Doc:
    """The one object of ``kind`` named ``name`` (in ``namespace``, if given)."""
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name
             and (namespace is None or d["metadata"].get("namespace") == namespace)]
    if len(found) != 1:
        raise LookupError(f"{kind} {namespace + '/' if namespace else ''}{name}: {len(found)} rendered")
    return found[0]


def container_args(docs: Sequence[Doc], deployment: str) -> list[str]:
    """The first container's args of a rendered Deployment."""
    spec = find(docs, "Deployment", deployment)["spec"]["template"]["spec"]
    return list(spec["containers"][0].get("args") or [])


def flags(args: Sequence[str]) -> dict[str, str]:
    """``--name=value`` args as {name: value} (a repeated flag: the last, as argparse keeps it)."""
    return {a.removeprefix("--").partition("=")[0]: a.partition("=")[2] for a in args if a.startswith("--")}
