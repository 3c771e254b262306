"""sunk: Slurm and Kubernetes on one pool of machines."""

__version__ = "0.1.0"
