"""sunk-operator: NodeSets and their slurmd Pods, NodeSlices and status (docs/nodeset.md)."""
