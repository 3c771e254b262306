"""`helm test`: GET /healthz of each enabled sunk component through its Service; exit 1 naming who failed.

Arguments: one ``<component>=<service>:<port>`` per component. The Service's address is the one
the kubelet hands every Pod (``<SERVICE>_SERVICE_HOST``: no cluster DNS needed), else its name.
Only the standard library: the image has no curl.
"""

import os
import sys
import urllib.request

TIMEOUT_SECONDS = 5


def service_host(service: str) -> str:
    return os.environ.get(service.upper().replace("-", "_") + "_SERVICE_HOST") or service


def check(component: str, service: str, port: str) -> str | None:
    """None when the component answered 200, else why not."""
    host = service_host(service)
    url = f"http://[{host}]:{port}/healthz" if ":" in host else f"http://{host}:{port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_SECONDS) as reply:
            print(f"ok     {component}: GET {url} (Service {service}): {reply.status}", flush=True)
            return None
    except Exception as exc:  # (refused, timed out, unresolvable, or an HTTP error status: all a failure)
        print(f"FAILED {component}: GET {url} (Service {service}): {exc}", flush=True)
        return f"{component} ({exc})"


def main(argv: list[str]) -> int:
    failed = []
    for arg in argv:
        component, _, address = arg.partition("=")
        service, _, port = address.rpartition(":")
        why = check(component, service, port)
        if why is not None:
            failed.append(why)
    if failed:
        print("helm test failed: " + "; ".join(failed), flush=True)
        return 1
    print(f"helm test passed: {len(argv)} component(s) answered", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
