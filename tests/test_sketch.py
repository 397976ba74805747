"""Sketches: ccsynth and TACCL formats, binding to topologies, symmetry groups, errors before solving."""

import json
import os
from dataclasses import replace

import pytest

from ccsynth.errors import SketchError
from ccsynth.formats.files import load_sketch
from ccsynth.formats.taccl_sketch import save_taccl_sketch, sketch_from_taccl_dict, sketch_to_taccl_dict
from ccsynth.synth import sketch as ccsynth_sketch
from ccsynth.synth.sketch import (
    InterNode,
    Sketch,
    SwitchRule,
    SymmetryGroup,
    default_chunk_factor,
    default_sketch,
    find_symmetries,
    offset_permutation,
    save_sketch,
    sketch_from_dict,
)
from ccsynth.topologies import catalog
from toys import toy_two_nodes

DATA = os.path.join(os.path.dirname(__file__), "data")


# ----------------------------------------------------------------------------- formats
def test_taccl_relay_sketch_loads():
    sk = load_sketch(os.path.join(DATA, "taccl_sketch_ndv2_n2_relay.json"))
    assert sk.chunk_factor == 2 and sk.nnodes == 2
    assert sk.symmetry == ((8, 16),)
    assert sk.internode.connections == ((0, (1,)),)
    lt = sk.bind(catalog.ndv2(2))
    # only GPU 0 of a node sends to GPU 1 of the other node
    cross = sorted((c.src, c.dst) for c in lt.connections if lt.is_cross(c.src, c.dst))
    assert cross == [(0, 9), (8, 1)]
    assert lt.group.order == 2 and lt.group.representatives == tuple(range(8))


def test_taccl_switch_sketch_loads_with_policy_and_input_size():
    sk = load_sketch(os.path.join(DATA, "taccl_sketch_dgx2_uc_min.json"))
    assert sk.switches == (SwitchRule(tuple(range(16)), "uc-min"),)
    assert sk.input_size == 1 << 20 and sk.intranode == "switch"
    lt = sk.bind(catalog.dgx2())
    assert lt.switch_policy == {"nvswitch": "uc-min"}
    assert lt.group.order == 8  # offset 2 on 16 ranks: 8 rotations, orbits {even}, {odd}
    assert lt.group.representatives == (0, 1)


def test_taccl_direct_map_sketch_with_sender_map():
    sk = load_sketch(os.path.join(DATA, "taccl_sketch_a100_direct_map.json"))
    assert sk.internode.pattern == "direct-map" and sk.internode.enforce_ordering
    lt = sk.bind(catalog.dgx_a100(2))
    assert lt.group.order == 16
    # rank 3's chunks leave node 0 only from rank 3
    assert lt.sender_ok(3, 0, 3) and not lt.sender_ok(3, 0, 4)
    assert lt.edge_ok(3, 0, 3, 11) and not lt.edge_ok(3, 0, 4, 12)
    assert lt.switch_policy["nvswitch0"] == "uc-max"


def test_ccsynth_sketch_file_and_round_trips(tmp_path):
    sk = load_sketch(os.path.join(DATA, "ccsynth_sketch_toy.json"))
    assert (sk.name, sk.chunk_factor, sk.detours, sk.input_size) == ("toy-relay", 2, 1, 65536)
    assert sk.bind(toy_two_nodes()).group.order == 2
    assert sketch_from_dict(json.loads(sk.to_json())) == sk
    f = tmp_path / "s.json"
    save_sketch(sk, f)
    assert load_sketch(f) == sk
    # TACCL export keeps what TACCL knows
    back = sketch_from_taccl_dict(sketch_to_taccl_dict(sk))
    assert back.chunk_factor == 2 and back.symmetry == sk.symmetry and back.internode.senders == sk.internode.senders
    t = tmp_path / "taccl.json"
    save_taccl_sketch(sk, t)
    assert load_sketch(t) == sketch_from_taccl_dict(sketch_to_taccl_dict(sk), source=str(t))
    # ccsynth.synth.sketch reads ccsynth's own format only
    assert ccsynth_sketch.load_sketch(f) == sk
    with pytest.raises(SketchError, match="a TACCL sketch"):
        ccsynth_sketch.load_sketch(t)


# ----------------------------------------------------------------------------- symmetry
def test_offset_permutation_is_taccl_formula():
    assert offset_permutation(16, 8, 16)[:3] == (8, 9, 10)
    assert offset_permutation(8, 1, 4) == (1, 2, 3, 0, 5, 6, 7, 4)


def test_symmetry_group_of_dgx1_and_its_orbits():
    lt = Sketch(symmetry=((4, 8), (2, 4))).bind(catalog.dgx1())
    g = lt.group
    assert g.order == 4 and g.representatives == (0, 1)
    for r in range(8):
        assert g.element_to[r][g.rep_of[r]] == r


def test_find_symmetries_on_catalog_topologies():
    assert find_symmetries(catalog.ring(6)) == ((1, 6),)
    sym = find_symmetries(catalog.ndv2(2))
    assert (8, 16) in sym
    assert Sketch(symmetry=sym).bind(catalog.ndv2(2)).group.order == 8


@pytest.mark.parametrize("topo", [catalog.dgx1(), catalog.dgx2(), catalog.ndv2(2), catalog.dgx_a100(2), catalog.ring(4),
                                  catalog.fully_connected(4), catalog.torus((3, 3))])
def test_default_sketch_binds_on_catalog(topo):
    sk = default_sketch(topo)
    lt = sk.bind(topo)
    assert lt.group.order >= 1
    if topo.n_nodes > 1:
        assert sk.internode is not None and sk.internode.pattern == "direct-map"


def test_default_chunk_factor_grows_with_size():
    from ccsynth.collectives.spec import Collective

    t = catalog.dgx1()
    c = [default_chunk_factor(t, Collective("allgather", 8), s) for s in (1024, 1 << 20, 64 << 20)]
    assert c[0] == 1 and c[0] <= c[1] <= c[2] and c[2] > 1


# ----------------------------------------------------------------------------- errors before any solver
def test_unknown_switch_policy_is_named():
    with pytest.raises(SketchError, match="uc-mid"):
        load_sketch(os.path.join(DATA, "taccl_sketch_bad_policy.json"))
    with pytest.raises(SketchError, match="uc-foo"):
        SwitchRule((0, 1), "uc-foo")


def test_unreachable_relay_is_detected():
    sk = load_sketch(os.path.join(DATA, "taccl_sketch_relay_unreachable.json"))
    with pytest.raises(SketchError, match=r"rank 1 cannot reach rank 2 .*relay rules"):
        sk.bind(toy_two_nodes())


def test_relay_connection_missing_from_topology():
    # rails without their spine connect GPU i only to GPU i of other nodes: 0 -> 1 across nodes does not exist
    rails_only = replace(catalog.dgx_a100(2), spines=())
    sk = Sketch(internode=InterNode(connections=((0, (1,)),)))
    with pytest.raises(SketchError, match=r"relay connection 0->1 .* no link"):
        sk.bind(rails_only)
    sk.bind(catalog.dgx_a100(2))  # the spine carries it


def test_symmetry_that_does_not_map_topology():
    with pytest.raises(SketchError, match=r"symmetry \[1, 8\] does not map the topology onto itself"):
        Sketch(symmetry=((1, 8),)).bind(catalog.dgx1())
    with pytest.raises(SketchError, match="does not divide"):
        Sketch(symmetry=((1, 3),)).bind(catalog.dgx1())


def test_sketch_field_errors(tmp_path):
    with pytest.raises(SketchError, match=r"for 2 node\(s\) but the topology has 1"):
        load_sketch(os.path.join(DATA, "taccl_sketch_ndv2_n2_relay.json")).bind(catalog.dgx1())
    with pytest.raises(SketchError, match="chunk factor"):
        Sketch(chunk_factor=0)
    with pytest.raises(SketchError, match="intranode strategy"):
        sketch_from_taccl_dict({"nnodes": 1, "intranode_sketch": {"strategy": "zigzag"}, "symmetry_offsets": []})
    with pytest.raises(SketchError, match="internode connection pattern"):
        sketch_from_taccl_dict({"nnodes": 2, "intranode_sketch": {"strategy": "none"},
                                "internode_sketch": {"strategy": "relay", "internode_conn": "star"}})
    with pytest.raises(SketchError, match="unknown field"):
        sketch_from_dict({"format": "ccsynth.sketch", "version": 1, "colour": "red"})
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(SketchError, match="not valid JSON"):
        load_sketch(bad)


def test_group_generation_rejects_fixed_points():
    # [2, 4] twice generates a valid group; a map with a fixed rank is rejected
    with pytest.raises(SketchError, match="fixes rank"):
        SymmetryGroup.generate(4, [(0, 2, 1, 3)])
