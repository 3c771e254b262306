"""``sunk-syncer ensure-secrets``: create the chart's Secrets that are missing; never overwrite one that exists.

Run by the chart as a pre-install/pre-upgrade hook Job (its own ServiceAccount), so that the
Secrets are made once, outside the render, and survive every render, upgrade and GitOps sync
(``sunk.translate.chartsecrets``: why, and what is decided).

Writes, all of them:

- POST of a missing Secret. A 409 (another run made it first) is not an error: everything is
  read again and decided again, and theirs is kept, so two concurrent runs converge on one value.
  A pair's server Secret is created before its client Secret, so the run that loses the first
  POST makes neither.
- With ``--repair`` only: PUT of an unusable Secret's data, carrying the resourceVersion read.
- A merge patch of ``metadata.annotations`` (``helm.sh/resource-policy: keep``) on an existing
  Secret that Helm made (a release whose chart rendered it): ``helm upgrade`` deletes what the
  old release had and the new one does not render, unless the live object says keep. Never data.

An existing Secret that is unusable (a key missing, a pair that does not verify) is reported,
named with its key, and the run fails; it is read again a few times first, since a concurrent
run may be half-way through a pair.

``--delete`` (the chart's post-delete hook, ``hooks.keepOnUninstall: false``) deletes them instead.
"""

from __future__ import annotations

import base64
import datetime
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
from kubernetes.client import ApiClient

from sunk.kube import client as kc
from sunk.kube.resources import SECRETS
from sunk.translate import chartsecrets as cs

log = logging.getLogger("sunk.syncer.ensuresecrets")


@attrs.frozen
class EnsureConfig:
    namespace: str
    specs: tuple[cs.Spec, ...]
    labels: Mapping[str, str] = attrs.field(factory=dict)
    repair: bool = False
    attempts: int = 5  # reads of what exists (a concurrent run may be half-way)
    pause: float = 1.0  # seconds between them

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for spec in self.specs for name in cs.secret_names(spec))


def secret_body(config: EnsureConfig, name: str, data: Mapping[str, bytes]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": config.namespace, "labels": dict(config.labels)},
            "data": {key: base64.b64encode(value).decode() for key, value in data.items()}}


@attrs.define
class Ensure:
    api: ApiClient
    config: EnsureConfig
    now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC)
    sleep: Callable[[float], None] = attrs.field(factory=lambda: time.sleep)  # looked up at each run's start
    token: cs.Token = cs.new_token
    weakness: Callable[[bytes], str | None] | None = None

    def run(self) -> list[str]:
        """What is still wrong (empty: every Secret exists and is usable)."""
        problems: Sequence[cs.Problem] = ()
        for attempt in range(self.config.attempts):
            if attempt:
                self.sleep(self.config.pause)
            existing = self.read()
            decision = cs.plan(self.config.specs, existing, self.now(), repair=self.config.repair,
                               token=self.token, weakness=self.weakness)
            problems = decision.problems
            if problems:
                log.warning("ensure-secrets: %s (read %d of %d)", "; ".join(map(str, problems)), attempt + 1,
                            self.config.attempts)
                continue
            if not self.write(decision.writes, existing):
                continue
            for name in decision.keep:
                kc.patch(self.api, SECRETS, name, {"metadata": {"annotations": {cs.KEEP_ANNOTATION: cs.KEEP}}},
                         self.config.namespace)
                log.info("ensure-secrets: Secret %s: annotated %s=%s, so that helm upgrade keeps it now that the "
                         "chart no longer renders it", name, cs.KEEP_ANNOTATION, cs.KEEP)
            log.info("ensure-secrets: done: %s", ", ".join(self.config.names))
            return []
        return [str(p) for p in problems] or ["the Secrets kept changing under this run (concurrent writers?)"]

    def read(self) -> dict[str, dict[str, Any]]:
        found = {}
        for name in self.config.names:
            try:
                found[name] = kc.get(self.api, SECRETS, name, self.config.namespace)
            except kc.ApiError as exc:
                if not exc.not_found:
                    raise
        return found

    def write(self, writes: Sequence[cs.Write], existing: Mapping[str, Mapping[str, Any]]) -> bool:
        """Each write in order; False at the first one another writer got ahead of (read and decide again)."""
        for write in writes:
            body = secret_body(self.config, write.secret, write.data)
            try:
                if write.create:
                    kc.create(self.api, SECRETS, body, self.config.namespace)
                    log.info("ensure-secrets: Secret %s: created (%s)", write.secret, ", ".join(sorted(write.data)))
                else:
                    meta = existing[write.secret]["metadata"]
                    body["metadata"] = {**meta, "labels": {**(meta.get("labels") or {}), **self.config.labels}}
                    kc.replace(self.api, SECRETS, body)
                    log.warning("ensure-secrets: Secret %s: repaired: its data was made again (--repair)",
                                write.secret)
            except kc.ApiError as exc:
                if not exc.conflict:
                    raise
                log.info("ensure-secrets: Secret %s: written by another run first (%s): reading again",
                         write.secret, exc.message)
                return False
        return True


def delete(api: ApiClient, namespace: str, names: Sequence[str]) -> None:
    """Delete the named Secrets; one already gone is fine."""
    for name in names:
        try:
            kc.delete(api, SECRETS, name, namespace)
            log.info("ensure-secrets --delete: Secret %s: deleted", name)
        except kc.ApiError as exc:
            if not exc.not_found:
                raise
            log.info("ensure-secrets --delete: Secret %s: not there", name)
