"""Slurm's topology from Node labels (sunk/translate/nodeset/topology.py): blocks, trees, the two files."""

from __future__ import annotations

import random

import pytest
import yaml

from sunk.model.hostlist import expand
from sunk.translate.nodeset.topology import (
    BLOCK,
    CONF,
    DEFAULT_BLOCK_LABEL,
    TREE,
    YAML,
    Placement,
    Topology,
    TopologySettings,
    block_sizes,
    build,
    render,
    render_conf,
    render_yaml,
)

NV = DEFAULT_BLOCK_LABEL
FABRIC, POD, LEAF = "ib.example/fabric", "ib.example/superpod", "ib.example/leafgroup"
BLOCKS = TopologySettings(kind=BLOCK)
TREES = TopologySettings(kind=TREE, tree_labels=(FABRIC, POD, LEAF))


def at(node: str, **labels: str) -> Placement:
    return Placement(node, {k.replace("__", "/").replace("_", "."): v for k, v in labels.items()})


def nv(node: str, domain: str | None) -> Placement:
    return Placement(node, {NV: domain} if domain is not None else {})


def ib(node: str, fabric: str, pod: str, leaf: str) -> Placement:
    return Placement(node, {FABRIC: fabric, POD: pod, LEAF: leaf})


# ---- block -----------------------------------------------------------------------------------------------


def test_two_nvlink_domains_make_two_blocks():
    topo = build(BLOCKS, [nv("n1", "rack-a"), nv("n2", "rack-a"), nv("n3", "rack-b"), nv("n4", "rack-b")])
    assert topo.blocks == (("rack-a", ("n1", "n2")), ("rack-b", ("n3", "n4")))
    assert topo.problems == ()
    assert render_conf(topo).splitlines()[1:] == ["BlockSizes=2,4,8,16,32", "BlockName=rack-a Nodes=n[1-2]",
                                                  "BlockName=rack-b Nodes=n[3-4]"]


def test_block_yaml_is_slurms_shape_and_names_every_node_once():
    topo = build(BLOCKS, [nv("n1", "DH4-016-US-EAST-02A"), nv("n2", "DH4-016-US-EAST-02A"), nv("n3", "7")])
    doc = yaml.safe_load(render_yaml(topo))
    assert doc == [{"topology": "sunk", "cluster_default": True, "block": {"block_sizes": [2, 4, 8, 16, 32], "blocks": [
        {"block": "7", "nodes": "n3"}, {"block": "DH4-016-US-EAST-02A", "nodes": "n[1-2]"}]}}]


def test_block_sizes_are_written_so_no_daemon_derives_them_from_the_nodes_it_knows():
    """Slurm derives the base block size from the first block holding a node the reading daemon knows; a
    dynamic node's slurmd knows only itself and slurm.conf's nodes, and exited on Slurm 25.11 when no block
    held one ("Blocks do not contain any nodes and the BlockSizes are not set")."""
    topo = build(BLOCKS, [nv(f"n{i}", "rack-a") for i in range(1, 5)] + [nv("n5", "rack-b")])
    assert block_sizes(topo) == (4, 8, 16, 32, 64)  # the base block's count, then powers of two over it
    assert "BlockSizes=4,8,16,32,64" in render_conf(topo).splitlines()
    assert yaml.safe_load(render_yaml(topo))[0]["block"]["block_sizes"] == [4, 8, 16, 32, 64]
    assert block_sizes(build(BLOCKS, [])) == ()


def test_the_base_block_size_is_the_most_common_one_so_one_small_block_cannot_make_it_1():
    """Slurm's own default is the first block's count: a one-node block sorting first (a node that set its
    own label to "0") made it 1, and every job of two nodes or more then spread over single-node blocks."""
    racks = [nv(f"a{i}", "rack-a") for i in range(1, 5)] + [nv(f"b{i}", "rack-b") for i in range(1, 5)]
    assert block_sizes(build(BLOCKS, [nv("x1", "0"), *racks]))[0] == 4
    assert block_sizes(build(BLOCKS, [nv("x1", "0"), *racks[:4]]))[0] == 4  # a tie: the larger
    three = [*racks, *(nv(f"c{i}", "rack-c") for i in range(1, 4)), *(nv(f"d{i}", "rack-d") for i in range(1, 4)),
             *(nv(f"e{i}", "rack-e") for i in range(1, 4))]
    assert block_sizes(build(BLOCKS, three))[0] == 3  # three blocks of 3 (9 nodes) against two of 4 (8)
    # Weighed by nodes: five nodes of four 18-node racks, each in a block of its own, do not make it 1.
    nvl = [nv(f"r{r}n{i}", f"rack-{r}") for r in range(4) for i in range(18)]
    rogue = [nv(p.slurm_node, f"evil-{n}") if n < 5 else p for n, p in enumerate(nvl)]
    assert block_sizes(build(BLOCKS, rogue))[0] == 18
    # The unlabeled block counts only when it is the only one.
    assert block_sizes(build(BLOCKS, [*racks, *(nv(f"u{i}", None) for i in range(1, 9))]))[0] == 4
    assert block_sizes(build(BLOCKS, [nv("u1", None), nv("u2", None)]))[0] == 2


def test_an_operator_sets_the_base_block_size():
    racks = [nv(f"a{i}", "rack-a") for i in range(1, 19)] + [nv("b1", "rack-b")]
    topo = build(TopologySettings(kind=BLOCK, block_size=18), racks)
    assert topo.base_block_size == 18
    assert "BlockSizes=18,36,72,144,288" in render_conf(topo).splitlines()
    assert yaml.safe_load(render_yaml(topo))[0]["block"]["block_sizes"] == [18, 36, 72, 144, 288]


def test_an_allowed_list_keeps_a_node_from_naming_itself_into_a_block_it_may_not():
    """A kubelet may set its own Node's labels: with allowed values, any other value places its node in
    `unlabeled`, said in problems; a label under node-restriction.kubernetes.io/ needs no entry."""
    settings = TopologySettings(kind=BLOCK, allowed_values=("rack-a", "rack-b"))
    topo = build(settings, [nv("n1", "rack-a"), nv("n2", "rack-b"), nv("n3", "rack-evil")])
    assert topo.blocks == (("rack-a", ("n1",)), ("rack-b", ("n2",)), ("unlabeled", ("n3",)))
    assert len(topo.problems) == 1 and "n3" in topo.problems[0] and "allowed" in topo.problems[0]
    trusted = "node-restriction.kubernetes.io/nvlink-domain"
    topo = build(TopologySettings(kind=BLOCK, block_label=trusted, allowed_values=("rack-a",)),
                 [Placement("n1", {trusted: "rack-z"})])
    assert topo.blocks == (("rack-z", ("n1",)),) and topo.problems == ()
    # ... and the same for every level of a tree.
    tree = build(TopologySettings(kind=TREE, tree_labels=(FABRIC, LEAF), allowed_values=("f1", "l1")),
                 [Placement("n1", {FABRIC: "f1", LEAF: "l1"}), Placement("n2", {FABRIC: "f1", LEAF: "l9"})])
    assert dict(tree.leaves) == {"f1_l1": ("n1",), "unlabeled": ("n2",)}
    assert len(tree.problems) == 1 and "n2" in tree.problems[0]


def test_an_empty_yaml_topology_is_flat_never_a_block_topology_without_blocks():
    assert yaml.safe_load(render_yaml(build(BLOCKS, [])))[0] == {
        "topology": "sunk", "cluster_default": True, "flat": True}


@pytest.mark.parametrize("value", ["rack-1234567890", "a" + "9" * 20])
def test_a_name_ending_in_ten_digits_or_more_is_refused_for_slurms_hostlist_parser(value):
    topo = build(BLOCKS, [nv("n1", value), nv("n2", "rack-a")])
    assert topo.blocks == (("rack-a", ("n2",)), ("unlabeled", ("n1",))) and topo.problems


def test_a_node_without_the_label_is_still_placed_where_slurm_schedules_it():
    topo = build(BLOCKS, [nv("n1", "rack-a"), nv("n2", None), nv("n3", "")])
    assert topo.blocks == (("rack-a", ("n1",)), ("unlabeled", ("n2", "n3")))
    assert topo.problems == ()  # no label is no mistake


@pytest.mark.parametrize("value", ["a b", "a,b", "n[1-2]", "-a", "x" * 64, "unlabeled", "root", "a\nBlockName=x"])
def test_a_label_value_that_is_no_safe_name_goes_to_unlabeled_and_is_said(value):
    topo = build(BLOCKS, [nv("n1", value), nv("n2", "rack-a")])
    assert topo.blocks == (("rack-a", ("n2",)), ("unlabeled", ("n1",)))
    assert len(topo.problems) == 1 and "n1" in topo.problems[0]
    assert "\nBlockName=x" not in render_conf(topo)


def test_the_block_label_is_configurable():
    settings = TopologySettings(kind=BLOCK, block_label="example.com/rack")
    topo = build(settings, [Placement("n1", {"example.com/rack": "r1", NV: "other"})])
    assert topo.blocks == (("r1", ("n1",)),)


# ---- tree ------------------------------------------------------------------------------------------------


def test_ib_labels_make_a_connected_tree():
    topo = build(TREES, [ib("n1", "f1", "p1", "1"), ib("n2", "f1", "p1", "1"), ib("n3", "f1", "p1", "2"),
                         ib("n4", "f1", "p2", "1"), ib("n5", "f2", "p1", "1")])
    assert topo.leaves == (("f1_p1_1", ("n1", "n2")), ("f1_p1_2", ("n3",)), ("f1_p2_1", ("n4",)),
                           ("f2_p1_1", ("n5",)))
    assert topo.inner == (("f1", ("f1_p1", "f1_p2")), ("f1_p1", ("f1_p1_1", "f1_p1_2")), ("f1_p2", ("f1_p2_1",)),
                          ("f2", ("f2_p1",)), ("f2_p1", ("f2_p1_1",)), ("root", ("f1", "f2")))
    conf = render_conf(topo)
    assert "SwitchName=f1_p1_1 Nodes=n[1-2]" in conf and "SwitchName=root Switches=f[1-2]" in conf


def test_every_node_reaches_the_root_once():
    rng = random.Random(7)
    placements = [ib(f"n{i}", rng.choice("ab"), rng.choice("xyz"), str(rng.randint(1, 3))) for i in range(60)]
    placements += [Placement("lost1", {FABRIC: "a"}), Placement("lost2", {})]
    topo = build(TREES, placements)
    parent = {kid: name for name, kids in topo.inner for kid in kids}
    leaf_of = {node: name for name, nodes in topo.leaves for node in nodes}
    assert sorted(leaf_of) == sorted(p.slurm_node for p in placements)
    for node, leaf in leaf_of.items():
        hops, switch = 0, leaf
        while switch in parent:
            switch, hops = parent[switch], hops + 1
        assert switch == "root", node
    assert leaf_of["lost1"] == leaf_of["lost2"] == "unlabeled"


def test_one_top_level_switch_needs_no_root():
    topo = build(TopologySettings(kind=TREE, tree_labels=("topology.kubernetes.io/zone",)),
                 [Placement("n1", {"topology.kubernetes.io/zone": "z1"})])
    assert (topo.leaves, topo.inner) == ((("z1", ("n1",)),), ())


def test_paths_that_would_share_a_switch_name_get_names_of_their_own():
    settings = TopologySettings(kind=TREE, tree_labels=("a", "b"))
    topo = build(settings, [Placement("n1", {"a": "x_y", "b": "z"}), Placement("n2", {"a": "x", "b": "y_z"})])
    names = [name for name, _ in topo.leaves]
    assert len(set(names)) == 2 and all(name.startswith("x_y_z-") for name in names)


def test_tree_yaml_is_slurms_shape():
    topo = build(TopologySettings(kind=TREE, tree_labels=("zone",)), [Placement("n1", {"zone": "z1"}),
                                                                     Placement("n2", {"zone": "z2"})])
    doc = yaml.safe_load(render_yaml(topo))
    assert doc == [{"topology": "sunk", "cluster_default": True, "tree": {"switches": [
        {"switch": "z1", "nodes": "n1"}, {"switch": "z2", "nodes": "n2"}, {"switch": "root", "children": "z[1-2]"}]}}]


# ---- both ------------------------------------------------------------------------------------------------


def test_the_text_is_the_same_whatever_the_order_of_the_nodes():
    placements = [nv(f"g-3-{i}", f"rack-{i % 3}") for i in range(1, 40)]
    text = render(BLOCKS, build(BLOCKS, placements))
    for seed in range(5):
        shuffled = list(placements)
        random.Random(seed).shuffle(shuffled)
        assert render(BLOCKS, build(BLOCKS, shuffled)) == text
    blocks = yaml.safe_load(text)[0]["block"]["blocks"]
    assert sorted(n for b in blocks for n in expand(b["nodes"])) == sorted(p.slurm_node for p in placements)


def test_no_nodes_is_empty_and_renders_flat_never_a_blockless_block_topology():
    for settings in (BLOCKS, TREES):
        topo = build(settings, [])
        assert topo.empty
        assert yaml.safe_load(render_yaml(topo)) == [{"topology": "sunk", "cluster_default": True, "flat": True}]
        assert render_conf(topo).count("\n") == 1  # the comment only


def test_off_or_a_tree_without_labels_is_empty():
    assert build(TopologySettings(), [nv("n1", "a")]).empty
    assert build(TopologySettings(kind=TREE), [nv("n1", "a")]).empty


def test_names_that_are_not_slurm_node_names_are_skipped():
    topo = build(BLOCKS, [nv("N1 x", "a"), nv("n2", "a"), nv("", "a")])
    assert topo.blocks == (("a", ("n2",)),)


def test_render_picks_the_file_format():
    topo = Topology(BLOCK, blocks=(("a", ("n1",)),))
    assert render(TopologySettings(kind=BLOCK, file_format=CONF), topo) == render_conf(topo)
    assert render(TopologySettings(kind=BLOCK, file_format=YAML), topo) == render_yaml(topo)
