"""The NodeSet, as pure functions: its spec, the Slurm node names, the slurmd Pods, the plan of one
reconcile, its status, and its NodeSlices (docs/nodeset.md).

- ``spec``: the NodeSet's spec read into one frozen value, with every problem in words;
- ``naming``: the Slurm node name of a Kubernetes Node, and names that collide;
- ``pod``: the slurmd Pod the NodeSet wants on one Node, and its template hash;
- ``slices``: the NodeSlice entries, and how they are split over objects;
- ``plan``: what one reconcile does, and the status it writes.
"""
