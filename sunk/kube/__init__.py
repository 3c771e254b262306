"""Kubernetes access: wire-form dicts over the official client's transport.

Objects are plain dicts exactly as the apiserver returns them (camelCase JSON):
cheaper than the generated model classes at thousands of objects and trivially
comparable. The official client is used only for configuration, auth and HTTP.
"""
