"""The Syncer's hook API: Slurm's prolog and epilog reach Kubernetes through it.

``api`` is the flask Blueprint, ``protocol`` the request values and the service it calls,
``auth`` the bearer token file. The node-locking plugin (``sunk.locking``) is the service.
"""
