"""Class-wise shortest distances (synth/distances.py) equal the graph's, and structural translations equal the
pair-by-pair check."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from ccsynth.synth.bound_network import message_hop_us as _message_us
from ccsynth.synth.distances import class_distances, classes_disjoint
from ccsynth.synth.flows import symmetry
from ccsynth.topologies import catalog

from tests.test_exact_bounds import exact_topology


def _graph_distances(t, s, weight, reverse):
    g = t.graph.reverse(copy=False) if reverse else t.graph
    if weight == "hops":
        d = nx.single_source_shortest_path_length(g, s)
    else:
        d = nx.single_source_dijkstra_path_length(g, s, weight=_message_us)
    arr = np.full(t.n_ranks, np.inf)
    for k, v in d.items():
        arr[k] = v
    return arr


def _check(t):
    for weight in ("hops", "message"):
        for reverse in (False, True):
            got = class_distances(t, range(t.n_ranks), weight, reverse)
            if got is None:
                assert not classes_disjoint(t)
                return
            for s in range(t.n_ranks):
                np.testing.assert_allclose(got[s], _graph_distances(t, s, weight, reverse), rtol=1e-12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(exact_topology(max_n=10))
def test_class_distances_equal_the_graph_on_random_machines(t):
    _check(t)


@pytest.mark.parametrize("make", [lambda: catalog.dgx_a100(3), lambda: catalog.fat_tree(4, 2, leaf_nodes=2,
                                                                                      oversubscription=2),
                                  lambda: catalog.ndv2(2), lambda: catalog.dgx1()])
def test_class_distances_equal_the_graph_on_catalog_machines(make):
    _check(make())


@pytest.mark.parametrize("make", [lambda: catalog.dgx_a100(4), lambda: catalog.fat_tree(8, 4, leaf_nodes=2,
                                                                                      oversubscription=2),
                                  lambda: catalog.ndv2(3), lambda: catalog.torus(4, 4), lambda: catalog.dgx1()])
def test_structural_translations_equal_the_full_check(make):
    t = make()
    structure = symmetry._structure(t)
    index = symmetry._constraint_index(t)
    for sizes in symmetry._systems(t):
        for d, s in enumerate(sizes):
            if s < 2:
                continue
            probe = symmetry.Translations(t.n_ranks, sizes, (d,))
            perm = probe.permutation(tuple(1 if i == d else 0 for i in range(len(sizes))))
            assert symmetry._structural_automorphism(t, perm, structure) == symmetry.is_automorphism(t, perm, index)
