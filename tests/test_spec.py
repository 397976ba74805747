"""Collective specs: buffer sizes, pre/postconditions, names."""

import pytest
from hypothesis import given, settings, strategies as st

from ccsynth.collectives.spec import KINDS, Collective, busbw_factor, canonical_kind
from ccsynth.errors import CollectiveError


def test_allreduce_post_is_full_sum():
    c = Collective("allreduce", 3, 2)
    post = c.postcondition()
    assert post[(1, "o", 1)] == ((0, 1), (1, 1), (2, 1))
    assert len(post) == 3 * 2


def test_reduce_scatter_gives_rank_its_block():
    c = Collective("reduce-scatter", 3, 2)
    assert c.kind == "reduce_scatter" and c.in_chunks == 6 and c.out_chunks == 2
    assert c.postcondition()[(2, "o", 1)] == ((0, 5), (1, 5), (2, 5))


def test_alltoall_transposes_blocks():
    c = Collective("alltoall", 3)
    # output block q of rank d = input block d of rank q
    assert c.postcondition()[(1, "o", 2)] == ((2, 1),)


def test_rooted():
    b = Collective("bcast", 4, 1, root=2)
    assert set(b.postcondition().values()) == {((2, 0),)}
    r = Collective("reduce", 4, 1, root=3)
    assert list(r.postcondition()) == [(3, "o", 0)]
    g = Collective("gather", 3, 1, root=1)
    assert g.postcondition()[(1, "o", 2)] == ((2, 0),)
    s = Collective("scatter", 3, 1, root=1)
    assert s.postcondition()[(2, "o", 0)] == ((1, 2),)


@given(kind=st.sampled_from(KINDS), n=st.integers(1, 9), c=st.integers(1, 4))
@settings(max_examples=60, deadline=None)
def test_postcondition_only_names_existing_inputs(kind, n, c):
    col = Collective(kind, n, c)
    pre = col.precondition()
    for (rank, buf, idx), value in col.postcondition().items():
        assert buf == "o" and 0 <= idx < col.out_chunks and 0 <= rank < n
        assert list(value) == sorted(set(value))  # sorted, no duplicates
        for q, j in value:
            assert (q, "i", j) in pre
    assert col.size_chunks == max(col.in_chunks, col.out_chunks)


def test_busbw_factors_follow_nccl_tests():
    assert busbw_factor("allreduce", 8) == pytest.approx(2 * 7 / 8)
    assert busbw_factor("allgather", 4) == pytest.approx(3 / 4)
    assert busbw_factor("broadcast", 4) == 1.0


@pytest.mark.parametrize(
    "args, words",
    [(("allsum", 4), "unknown collective 'allsum'"), (("allgather", 0), "positive integer"),
     (("allgather", 4, 0), "chunk factor"), (("broadcast", 4, 1, 4), "root 4"), (("allgather", 4, 1, 1), "has no root")],
)
def test_bad_collectives(args, words):
    with pytest.raises(CollectiveError, match=words):
        Collective(*args)


def test_round_trip_and_aliases():
    c = Collective("scatter", 5, 3, root=4)
    assert Collective.from_dict(c.to_dict()) == c
    assert canonical_kind("All-Reduce") == "allreduce"
    with pytest.raises(CollectiveError, match="missing field 'kind'"):
        Collective.from_dict({"n_ranks": 2})
