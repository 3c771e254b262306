"""Leaf helpers every layer may use: backoff, the Lease fence, flag spellings, Kubernetes timestamps.

Standard library only, no I/O.
"""
