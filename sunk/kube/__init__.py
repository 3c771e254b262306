"""Kubernetes access: wire-form dicts over the official client's transport.

Objects are plain dicts exactly as the apiserver returns them (camelCase JSON):
cheaper than the generated model classes at thousands of objects and trivially
comparable. The official client is used only for configuration, auth and HTTP.
"""

from sunk.kube.client import ApiError, ApiRefused, ApiUnavailable, ConnectionFailed, KubeError, load_api_client
from sunk.kube.informer import Informer, MultiNamespaceInformer, pod_node_name
from sunk.kube.resources import LEASES, NODES, PODS, Resource, object_key, split_key

__all__ = [
    "LEASES",
    "NODES",
    "PODS",
    "ApiError",
    "ApiRefused",
    "ApiUnavailable",
    "ConnectionFailed",
    "Informer",
    "KubeError",
    "MultiNamespaceInformer",
    "Resource",
    "load_api_client",
    "object_key",
    "pod_node_name",
    "split_key",
]
