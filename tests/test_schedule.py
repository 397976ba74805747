"""The schedule IR: structure checks, matching, JSON round trip, file errors, in-place buffers."""

import json

import pytest
from hypothesis import given, settings, strategies as st

from ccsynth.collectives.builder import ScheduleBuilder
from ccsynth.collectives.schedule import Chunks, Op, Schedule, in_place_storage, read_schedule, save_schedule
from ccsynth.collectives.spec import KINDS, Collective
from ccsynth.collectives.transforms import alias_in_place
from ccsynth.collectives.verify import verify
from ccsynth.errors import ScheduleError, ScheduleFormatError
from ccsynth.formats.files import load_schedule
from ccsynth.synth.simulate import simulate
from ccsynth.topologies.catalog import ring


def direct_allgather(n, c=1):
    b = ScheduleBuilder(Collective("allgather", n, c), "direct")
    for r in range(n):
        b.copy(r, ("i", 0, c), ("o", r * c, c))
    for k in range(1, n):
        for r in range(n):
            b.transfer(r, (r + k) % n, ("i", 0, c), ("o", r * c, c))
    return b.build(algorithm="direct")


def test_builder_derives_minimal_dependencies():
    b = ScheduleBuilder(Collective("allreduce", 2), "t")
    c0 = b.copy(0, ("i", 0), ("o", 0))
    s, r = b.transfer(1, 0, ("i", 0), ("o", 0), reduce=True)  # RAW+WAW on rank 0's o[0]
    s2, r2 = b.transfer(0, 1, ("o", 0), ("o", 0))  # reads o[0] after the reduce
    c1 = b.copy(0, ("i", 0), ("s", 0))  # independent of everything on rank 0's o
    sched = b.build()
    assert sched.ops[r].deps == (c0,)
    assert sched.ops[s].deps == ()
    assert sched.ops[s2].deps == (r,)
    assert sched.ops[c1].deps == ()
    assert sched.scratch_chunks == 1
    assert sched.matches[s] == r and sched.matches[r2] == s2


@given(n=st.integers(2, 6), c=st.integers(1, 3))
@settings(max_examples=20, deadline=None)
def test_json_round_trip_is_exact(n, c):
    s = direct_allgather(n, c)
    again = Schedule.from_dict(json.loads(s.to_json()))
    assert again == s and again.meta == s.meta
    assert again.to_dict() == s.to_dict()


def test_file_round_trip(tmp_path):
    s = direct_allgather(3)
    p = tmp_path / "s.json"
    save_schedule(s, p)
    assert load_schedule(p, verify=False) == s


@pytest.mark.parametrize(
    "mutate, words",
    [
        (lambda d: d.update(version=7), "version 7 is not supported"),
        (lambda d: d.update(format="other"), "not a ccsynth schedule"),
        (lambda d: d.pop("ops"), "no 'ops' list"),
        (lambda d: d["ops"][0].pop("rank"), "missing field 'rank'"),
        (lambda d: d["ops"][0].update(op="teleport"), "unknown kind 'teleport'"),
        (lambda d: d["ops"][0].update(src=["x", 0, 1]), "unknown buffer 'x'"),
        (lambda d: d["ops"][0].update(dst=["o", 99, 1]), "past the end of buffer 'o'"),
        (lambda d: d["ops"][3].update(deps=[1]), "dependencies must stay on one rank"),
        (lambda d: d["ops"][3].update(deps=[1000]), "unknown operation 1000"),
        (lambda d: d["collective"].update(kind="allsum"), "unknown collective"),
        (lambda d: d["ops"][0].update(id="zero"), "id must be an integer"),
    ],
)
def test_corrupted_files_are_rejected(tmp_path, mutate, words):
    d = direct_allgather(3).to_dict()
    mutate(d)
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(d))
    with pytest.raises(ScheduleFormatError, match=words):
        load_schedule(p, verify=False)


def test_not_json_and_missing_file(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("{not json")
    with pytest.raises(ScheduleFormatError, match="not valid JSON"):
        load_schedule(p)
    with pytest.raises(ScheduleFormatError, match="cannot read"):
        load_schedule(tmp_path / "missing.json")


def test_unmatched_send_is_named():
    col = Collective("allgather", 2)
    ops = (Op(0, 0, "send", Chunks("i", 0), peer=1), Op(1, 0, "copy", Chunks("i", 0), Chunks("o", 0)))
    s = Schedule("x", col, ops)
    with pytest.raises(ScheduleError, match="unmatched send op 0"):
        _ = s.matches


def test_count_mismatch_between_send_and_recv():
    col = Collective("allgather", 2, 2)
    ops = (Op(0, 0, "send", Chunks("i", 0, 2), peer=1), Op(1, 1, "recv", dst=Chunks("o", 0, 1), peer=0))
    with pytest.raises(ScheduleError, match="sends 2 chunk"):
        _ = Schedule("x", col, ops).matches


def test_local_op_shape_errors():
    col = Collective("allgather", 4)
    with pytest.raises(ScheduleError, match="overlapping"):
        Schedule("x", col, (Op(0, 0, "copy", Chunks("o", 0, 2), Chunks("o", 1, 2)),))
    with pytest.raises(ScheduleError, match="only a recv can carry reduce"):
        Schedule("x", col, (Op(0, 0, "copy", Chunks("i", 0), Chunks("o", 0), reduce=True),))
    with pytest.raises(ScheduleError, match="bad peer"):
        Schedule("x", col, (Op(0, 0, "send", Chunks("i", 0), peer=0),))


def test_input_buffer_is_read_only():
    col = Collective("allgather", 2)
    with pytest.raises(ScheduleError, match="writes the input buffer"):
        Schedule("x", col, (Op(0, 0, "copy", Chunks("o", 0), Chunks("i", 0)),))


def test_read_schedule_reads_ccsynth_json_only(tmp_path):
    s = direct_allgather(3)
    p = tmp_path / "s.json"
    save_schedule(s, p)
    assert read_schedule(p) == s
    x = tmp_path / "s.xml"
    x.write_text("<algo/>")
    with pytest.raises(ScheduleFormatError, match="not valid JSON"):
        read_schedule(x)


# ----------------------------------------------------------------- in place
def pair_allreduce(send_from: str):
    """2 ranks: each sends its value (from input or output) to the other's scratch and adds it."""
    b = ScheduleBuilder(Collective("allreduce", 2), f"pair_{send_from}")
    for r in range(2):
        b.copy(r, ("i", 0), ("o", 0))
    for r in range(2):
        b.transfer(r, 1 - r, (send_from, 0), ("s", 0))
    for r in range(2):
        b.reduce(r, ("s", 0), ("o", 0))
    return b.build()


@pytest.mark.parametrize("kind", KINDS)
def test_in_place_storage_puts_the_smaller_buffer_inside_the_larger(kind):
    coll = Collective(kind, 4, 2)
    r = 3
    for buf, n in (("i", coll.in_chunks), ("o", coll.out_chunks)):
        for j in range(n):
            c = in_place_storage(coll, r, Chunks(buf, j))
            big = "i" if coll.in_chunks > coll.out_chunks else "o"  # "o" also where they are the same size
            assert c.buf == big and 0 <= c.index < coll.size_chunks
    assert in_place_storage(coll, r, Chunks("s", 5)) == Chunks("s", 5)


def test_in_place_schedule_verifies_on_one_buffer():
    s = pair_allreduce("o")
    a = alias_in_place(s)
    assert a.in_place and not s.in_place
    assert [op.kind for op in a.ops].count("copy") == 0  # input and output are one buffer: no initial copy
    verify(s)
    verify(a)
    # the simulator charges messages and local ops, not addresses: copies are free by default
    assert simulate(a, ring(2), 1 << 20).time_us == pytest.approx(simulate(s, ring(2), 1 << 20).time_us)
    # the same ops out of place miss the input: nothing copies it to the output
    with pytest.raises(ScheduleError):
        verify(Schedule(a.name, a.collective, a.ops, a.scratch_chunks))
    # sending the input instead is correct out of place, but in place the send
    # reads the chunk the reduce writes, unordered
    verify(pair_allreduce("i"))
    with pytest.raises(ScheduleError, match=r"race on rank \d, chunk o\[0\]"):
        verify(alias_in_place(pair_allreduce("i")))
    # allgather in place: rank r's input is output chunk r
    ag = alias_in_place(direct_allgather(3))
    assert ag.in_place and not any(op.kind == "copy" for op in ag.ops)
    assert {op.src for op in ag.ops_of(1) if op.kind == "send"} == {Chunks("o", 1)}
    verify(ag)


def test_in_place_may_write_its_input():
    col = Collective("reduce_scatter", 2)
    ops = (Op(0, 0, "copy", Chunks("s", 0), Chunks("i", 1)),)
    with pytest.raises(ScheduleError, match="writes the input buffer"):
        Schedule("x", col, ops, 1)
    Schedule("x", col, ops, 1, in_place=True)
    # rank 0's output is its input chunk 0: a copy from o[0] to i[0] reads and writes one chunk
    with pytest.raises(ScheduleError, match="overlapping chunks .input and output are one buffer"):
        Schedule("x", col, (Op(0, 0, "copy", Chunks("o", 0), Chunks("i", 0)),), in_place=True)


def test_in_place_json_round_trip_and_old_files(tmp_path):
    s = direct_allgather(3)
    assert "in_place" not in s.to_dict()  # files written before the field read the same
    a = alias_in_place(s)
    d = a.to_dict()
    assert d["in_place"] is True and d["version"] == 1
    again = Schedule.from_dict(json.loads(a.to_json()))
    assert again == a and again.in_place and again.to_dict() == d
    assert again != Schedule.from_dict({**d, "in_place": False})
    p = tmp_path / "a.json"
    save_schedule(a, p)
    assert load_schedule(p) == a  # verified in place
    with pytest.raises(ScheduleFormatError, match="in_place must be true or false"):
        Schedule.from_dict({**d, "in_place": "yes"})
