"""``sunk-extender``: the Slurm-made decision offered to a stock kube-scheduler.

One process runs the shared reconciler (submits placeholder jobs, deletes Pods whose job
ended, cancels jobs whose Pod is gone) and serves, from the same memory, the extender verbs
and the hook API that placeholder jobs call. See docs/extender.md.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any, Optional

from extender.app import create_app
from scheduler import kubeops
from scheduler.assembly import Assembly
from scheduler.decide import Bind
from sunk.commands.scheduler import add_common_arguments, hooks_listener, run_daemon
from sunk.commands.web import Listener, WSGIApp, tls_from_flags
from sunk.model import names

log = logging.getLogger("sunk.extender")


def nudge(api: Any):
    """The extender's bind step: mark the Pod, so kube-scheduler retries it now.

    kube-scheduler parks a Pod that failed filtering until a relevant event. An update of
    the Pod itself is one, so annotating it with its Slurm node requeues it at once
    (within podMaxBackoffSeconds, set to 1 s by the chart). The same patch
    adds the lock toleration: the placeholder's strict lock has tainted the Node by now,
    and kube-scheduler's taint filter would drop the Node before asking the extender.
    """

    def on_bind(pod: dict, bind: Bind) -> None:
        kubeops.record_job(api, pod, {names.ANN_SLURM_NODE: bind.slurm_node, names.ANN_JOB_ID: str(bind.job_id)},
                           tolerate_lock=True)

    return on_bind


def announce(api: Any):
    """The extender's submission step: the job id (and the lock toleration) on the Pod at once.

    The same patch is the event that brings a parked Pod back to kube-scheduler, whose
    PodScheduled condition then names the job and Slurm's reason instead of "waiting for the
    placeholder Slurm job to be submitted" for up to 5 minutes. sunk-scheduler has no such
    reader and writes nothing at submission.
    """

    def on_submit(pod: dict, job_id: int) -> None:
        kubeops.record_job(api, pod, {names.ANN_JOB_ID: str(job_id)}, tolerate_lock=True)

    return on_submit


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="sunk-extender", description=__doc__)
    add_common_arguments(parser, default_name="sunk-extender")
    parser.add_argument("--bind-address", default=":8888", help="where kube-scheduler calls the extender verbs")
    parser.add_argument("--tls-cert-file", default="", help="serve the verbs over TLS (not the hook API)")
    parser.add_argument("--tls-key-file", default="")
    parser.add_argument("--client-ca-file", default="", help="require kube-scheduler's client certificate")

    def listeners(args: argparse.Namespace) -> list[Listener]:
        # Two ports, two apps, TLS each its own: kube-scheduler's verbs (mutual TLS in the
        # chart) and the hook API that placeholder jobs call as --hooks-url says.
        return [Listener(args.bind_address, "extender", tls_from_flags(
                    args.tls_cert_file, args.tls_key_file, args.client_ca_file, what="the extender verbs")),
                hooks_listener(args)]

    def apps(assembly: Assembly) -> dict[str, WSGIApp]:
        return {"extender": create_app(assembly.scheduler, assembly.controller.queue.add),
                "hooks": assembly.hooks_app()}

    return run_daemon(parser, argv, listeners=listeners, apps=apps, on_bind=nudge, on_submit=announce)


if __name__ == "__main__":
    sys.exit(main())
