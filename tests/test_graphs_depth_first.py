"""ccsynth.graphs: the depth-first topological order (used by the verifier and the contiguity timing)."""

import doctest
import random

import pytest

from ccsynth import graphs
from ccsynth.graphs import dependency_cycle, topological_order
import itertools


def _is_topological(order, preds) -> bool:
    pos = {v: i for i, v in enumerate(order)}
    return len(pos) == len(preds) and all(pos[p] < pos[v] for v, ps in enumerate(preds) for p in ps)


def test_after_a_node_come_the_nodes_it_made_ready_last_first():
    # 0 readies 1 and 2; 2 (readied last) comes next; 1 then readies 3
    assert topological_order([[], [0], [0], [1]], depth_first=True) == [0, 2, 1, 3]
    # a chain is followed to its end before the next initially ready node
    assert topological_order([[], [], [0], [2]], depth_first=True) == [0, 2, 3, 1]
    # the generation order, for comparison
    assert topological_order([[], [], [0], [2]]) == [0, 1, 2, 3]


def test_mapping_graphs_keep_their_node_names():
    preds = {"send": [], "recv": ["send"], "copy": [], "reduce": ["recv", "copy"]}
    assert topological_order(preds, depth_first=True) == ["send", "recv", "copy", "reduce"]


def test_a_cycle_gives_none_and_dependency_cycle_names_it():
    preds = [[], [0, 3], [1], [2]]  # 1 -> 2 -> 3 -> 1
    assert topological_order(preds, depth_first=True) is None
    cycle = dependency_cycle(preds)
    assert sorted(cycle) == [1, 2, 3]
    # in execution order: each node waits for the one before it
    assert all(cycle[i - 1] in preds[cycle[i]] for i in range(len(cycle)))


def test_key_and_depth_first_exclude_each_other():
    with pytest.raises(ValueError, match="exclude"):
        topological_order([[]], key=lambda v: v, depth_first=True)


@pytest.mark.parametrize("seed", range(5))
def test_random_dags_give_a_depth_first_topological_order(seed):
    rng = random.Random(seed)
    n = 200
    preds = [sorted(rng.sample(range(v), min(v, rng.randint(0, 3)))) for v in range(n)]
    order = topological_order(preds, depth_first=True)
    assert _is_topological(order, preds)
    # depth-first: whenever a node readies others, the next node is one of them
    seen = set()
    for x, nxt in itertools.pairwise(order):
        seen.add(x)
        readied = [v for v in range(n) if x in preds[v] and set(preds[v]) <= seen]
        if readied:
            assert nxt == readied[-1]


def test_docstring_examples():
    result = doctest.testmod(graphs)
    assert result.failed == 0 and result.attempted > 0
