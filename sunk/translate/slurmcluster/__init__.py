"""A SlurmCluster (the control plane of one Slurm cluster as Kubernetes objects), pure: its spec and
the checks of every value (``spec``, ``lines``), its configuration files (``slurmconf``), the objects
it wants (``desired``), and one reconcile's plan and status (``plan``). docs/install.md, "Slurm on
Kubernetes (preview)", says what exists."""
