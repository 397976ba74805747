"""Every baseline at its own best chunk count, under the same cost model as everything else.

A baseline's chunk factor trades pipelining against per-message cost: more,
smaller chunks let relays forward earlier, but every message pays its
connection's per-message overhead on both ranks (see
:mod:`ccsynth.synth.simulate`). Comparing a synthesized schedule against a
baseline at a fixed chunk factor overstates the speedup whenever another
factor suits the baseline better, so every comparison ccsynth makes goes
through this module:

* :func:`chunk_factor_ladder` -- the factors worth trying for one baseline:
  its smallest useful factor (:func:`~ccsynth.synth.baselines.min_chunk_factor`,
  one block per rank for allreduce) times 1, 2, 4, ... while a chunk keeps
  at least :data:`MIN_CHUNK_BYTES` and the buffer at most
  :data:`MAX_SEARCH_CHUNKS` chunks (beyond that the per-message cost
  dominates on every network ccsynth models);
* :func:`best_for` -- one baseline at one size: walk the ladder, stop once
  two factors in a row are slower than the best so far (the time is a
  convex-looking function of the factor: pipelining gains shrink while
  message costs grow linearly). A factor whose
  :func:`~ccsynth.synth.pipeline_bound.pipeline_bound` (the busiest
  stream, resource or engine with the pipeline's fill before it and its
  drain after it, from the schedule's own dependencies; never above the
  simulated time) exceeds the best so far is that slower factor without
  being simulated, so the walk picks what it picked when it simulated
  every factor;
* :func:`baseline_choices` / :func:`best_baseline` -- every applicable
  baseline at its best, fastest first;
* :func:`plan_baselines` -- the same for many sizes at once (schedules
  built once), for per-size plans;
* :func:`baselines_against` -- the search ``ccsynth synth`` runs: every
  applicable baseline at its best chunk factor *where it could beat* a
  given time (the synthesized schedule's). Until one of its factors is
  simulated, a factor whose static bound
  (:func:`~ccsynth.synth.simulate.static_bound`: its busiest resource's
  bytes, its busiest engine's per-message overheads) exceeds that time
  cannot beat it and is not simulated; when the *volume* part does, no
  factor of that baseline can (a chunk factor cuts every block into
  pieces that take the block's own routes, so every resource carries the
  same bytes at every factor: ``tests/test_baseline_search.py`` checks it
  for every baseline), and the baseline's other factors are not even
  built. After that the pipeline bound prunes as in :func:`best_for`;
  per-message overheads above the best so far end the walk (a larger
  factor never sends fewer messages on an engine, tested the same way),
  and for the baselines that send every chunk as a message of its own
  (:data:`MESSAGES_PER_CHUNK`) the next factor's overheads are twice
  this one's, so a factor whose doubled overheads exceed the best is not
  built either. Before any factor of a baseline could beat that time, a
  factor whose pipeline bound exceeds it is left out too (the ring
  family's busiest stream, :func:`ring_stream`, says as much without
  building it), and factors whose pipeline bounds keep falling are
  simulated only where the fall ends, fastest bound first
  (:class:`_Walk`): at 256 ranks multi_ring's 1-million-op factor 8 is
  not built and only the hierarchical baseline's best factor is
  simulated. Baselines proven slower are reported with
  the bound they exceeded (:class:`Outrun`), never with a time.
  Schedules are built unverified during the search (the builders are
  verified by their tests); the one returned for use is verified
  (:func:`verified`). At 256 ranks this is what lets the comparison
  finish: a 1-million-op schedule costs tens of seconds to build, verify
  and simulate, its bound a fraction; the ring family's and direct's
  bytes come without building at all (:func:`ring_volume_us`,
  :func:`direct_volume_us`), and no factor beyond
  :data:`MAX_OPS` ops is built (the packed trees' own op budget: both
  sides of the comparison get the same; the op count comes from the
  factor before, or for the ring family's first factor from
  :func:`ring_sends`: multi_ring's first factor on 1,024 ranks is 17
  million ops).

Example:
    >>> from ccsynth.collectives.spec import Collective
    >>> from ccsynth.topologies.catalog import ring
    >>> t = ring(8)
    >>> chunk_factor_ladder("ring", "allreduce", t, 1 << 20)
    (8, 16, 32, 64, 128, 256, 512, 1024, 2048)
    >>> best = best_baseline(Collective("allreduce", 8), t, 1 << 20)
    >>> best.name in ("ring", "multi_ring", "recursive_halving", "direct", "one_shot", "recursive_doubling")
    True
"""

from __future__ import annotations

import logging
import math
from typing import NamedTuple
from collections.abc import Callable, Sequence

from ccsynth.collectives.gc_pause import gc_paused
from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.errors import CCSynthError, CollectiveError
from ccsynth.collectives.verify import verify
from ccsynth.synth.baselines import BASELINES, get_baseline, make_baseline, min_chunk_factor, why_not
from ccsynth.synth.baseline_estimates import (
    MESSAGES_PER_CHUNK, direct_volume_us, ring_sends, ring_stream, ring_volume_us,
)
from ccsynth.synth.pipeline_bound import PipelineBound, pipeline_bound
from ccsynth.synth.simulate import SimResult, simulate, simulate_below
from ccsynth.synth.search_worker import InWorker, worker_possible
from ccsynth.tolerance import is_greater, is_less
from ccsynth.topologies.model import Topology

__all__ = [
    "MIN_CHUNK_BYTES",
    "MAX_SEARCH_CHUNKS",
    "WORSE_IN_A_ROW",
    "BaselineChoice",
    "chunk_factor_ladder",
    "best_for",
    "baseline_choices",
    "best_baseline",
    "plan_baselines",
    "Outrun",
    "BaselineSearch",
    "baselines_against",
    "verified",
    "MAX_OPS",
    "COSTLY_OPS",
]

log = logging.getLogger(__name__)

#: smallest chunk worth a message of its own in the search (the smallest factor is always tried)
MIN_CHUNK_BYTES = 512
#: at most this many chunks per buffer in the search
MAX_SEARCH_CHUNKS = 4096
#: the search along the ladder stops after this many factors in a row slower than the best
WORSE_IN_A_ROW = 2
#: :func:`baselines_against` builds no baseline schedule beyond this many ops (estimated from the factor before;
#: the smallest factor is always built): the op budget of the packed-tree search (``ccsynth.synth.trees.search``)
MAX_OPS = 3_000_000
#: :func:`baselines_against` builds a factor of more than this many ops after a slower factor only while the
#: baseline's best so far could still be written (is not slower than the time to beat): see :class:`_Walk`
COSTLY_OPS = 1_000_000


class BaselineChoice(NamedTuple):
    """A baseline at a chunk factor, with its simulated result at the size it was chosen for."""

    name: str
    chunk_factor: int
    result: SimResult
    schedule: Schedule


def chunk_factor_ladder(name: str, kind: str, topology: Topology, size_bytes: float) -> tuple[int, ...]:
    """The chunk factors :func:`best_for` tries for baseline ``name`` (see the module docstring)."""
    base = min_chunk_factor(name, kind, topology)
    out = [base]
    c = base
    while True:
        c *= 2
        try:
            size_chunks = Collective(kind, topology.n_ranks, c).size_chunks
        except CollectiveError:  # beyond ccsynth.limits: a larger factor is no candidate either
            break
        if size_chunks > MAX_SEARCH_CHUNKS or size_bytes / size_chunks < MIN_CHUNK_BYTES:
            break
        out.append(c)
    return tuple(out)


class Outrun(NamedTuple):
    """A baseline left out of a comparison: at chunk factor ``chunk_factor`` (and, with ``every_factor``, at
    all of its factors) it takes at least ``bound_us``, more than the time it had to beat."""

    name: str
    chunk_factor: int
    bound_us: float
    every_factor: bool


class BaselineSearch(NamedTuple):
    """What :func:`baselines_against` found: the baselines that could compete, each at its best chunk factor
    (fastest first), and those proven slower than the time to beat."""

    choices: list[BaselineChoice]
    outrun: list[Outrun]


class _Builds:
    """Baseline schedules built once per (name, chunk factor); None where the baseline cannot build.

    ``checked=False``: built without :func:`~ccsynth.collectives.verify.verify` (the search's own use;
    see the module docstring).
    """

    def __init__(self, collective: Collective, topology: Topology, checked: bool = True,
                 progress: Callable[[str], None] | None = None):
        self.kind, self.n, self.root = collective.kind, collective.n_ranks, collective.root
        self.topology = topology
        self.checked = checked
        self.progress = progress
        self.cache: dict[tuple[str, int], Schedule | None] = {}
        #: schedules a walk left unsimulated that a later walk may ask for (see :func:`baselines_against`)
        self.kept: dict[tuple[str, int], Schedule] = {}

    def say(self, message: str) -> None:
        """Hand ``message`` to the progress callback, which logs it; without one, log it (INFO)."""
        if self.progress is not None:
            self.progress(message)
        else:
            log.info("%s", message)

    def get(self, name: str, factor: int) -> Schedule | None:
        key = (name, factor)
        if key in self.kept:
            return self.kept.pop(key)
        if key not in self.cache:
            coll = Collective(self.kind, self.n, factor, self.root)
            try:
                with gc_paused():  # up to millions of ops (see ccsynth.collectives.gc_pause)
                    sched = make_baseline(name, coll, self.topology) if self.checked else \
                        get_baseline(name).build(coll, self.topology)
            except CCSynthError as e:
                log.debug("baseline %s at chunk factor %d: %s", name, factor, e)
                sched = None
            if not self.checked:  # the search's own builds are asked for once: kept only by what it returns
                return sched
            self.cache[key] = sched
        return self.cache[key]


class _Pending(NamedTuple):
    """A factor that could beat the best so far, built and bounded, not yet simulated (see :class:`_Walk`)."""

    factor: int
    bound_us: float
    schedule: Schedule


#: what becomes of a factor before it is built (:meth:`_Walk._unbuilt`)
_BUILD, _SKIP, _STOP = "build", "skip", "stop"


class _Walk:
    """Baseline ``name``'s ladder walk at ``size_bytes``; stops after WORSE_IN_A_ROW slower factors.

    Without ``beat`` (:func:`best_for`): the first factor is simulated; after it a factor is simulated only if
    its :func:`~ccsynth.synth.pipeline_bound.pipeline_bound` does not exceed the best so far, otherwise it
    counts as the slower factor its simulated time would have made it, so the walk picks what it picked when it
    simulated every factor. Per-message overheads above the best end the walk (they never shrink as the factor
    grows; where every message splits in two at the next factor, :data:`MESSAGES_PER_CHUNK`, the next factor's
    are known without building it, from the last factor bounded or simulated).

    With ``beat`` (:func:`baselines_against`) three more rules, each leaving out only what is proven slower, and
    one that leans on the convexity the walk assumes (``COSTLY_OPS``):

    * *the first factors*: until a factor could beat ``beat``, a factor whose pipeline bound exceeds ``beat``
      goes to ``outrun`` and is not simulated (``first_by_pipeline``; otherwise the static bound decides, as it
      always did: :func:`~ccsynth.synth.simulate.simulate_below`). Its bytes above ``beat`` end the walk (every
      factor moves the same bytes), its overheads count it slower (every larger factor sends as many); a bound
      above ``beat`` by the pipeline's fill alone neither (the fill shrinks as the factor grows: the
      hierarchical allgather's factor 1 and 2 lose to its factor 8 on 256 ranks);
    * *deferred simulation*: factors that could beat the best so far, while their pipeline bounds keep falling
      from one factor to the next, are built and bounded but simulated only when the fall ends (or the ladder
      does), fastest bound first, and only while a bound is below the best simulated so far
      (:meth:`_resolve`). The best of them is the best of their simulated times, as simulating each would
      give; the walk then goes on as if it had simulated them one by one (the factors after the best one count
      slower), so it never stops earlier than the walk that simulates every factor;
    * ``MAX_OPS``: no factor beyond it is built (its op count from the factor before, or for the ring family's
      first factor from :func:`ring_sends`); the ring family's bytes (:func:`ring_volume_us`) above ``beat``
      end the walk before anything is built, and its busiest stream (:func:`ring_stream`, what the pipeline
      bound would say at least) above it leaves a first factor out unbuilt, with its overheads for the
      next;
    * ``COSTLY_OPS``: once a factor has counted slower than the best so far and that best is itself slower
      than ``beat`` (the baseline cannot be what is written), no factor beyond ``COSTLY_OPS`` ops is built: the
      walk assumes the time convex in the factor, under which one slower factor already says every larger one
      is slower; the second one ``WORSE_IN_A_ROW`` asks for is a margin kept where it is cheap. On 256 ranks
      this leaves out the hierarchical reduce-scatter's 1.5-million-op factor 8 (13 s of a 50 s synthesis).
    """

    def __init__(self, name: str, builds: _Builds, size_bytes: float, beat: float | None,
                 outrun: list[Outrun] | None, first_by_pipeline: bool):
        self.name, self.builds, self.size, self.beat = name, builds, size_bytes, beat
        self.beat_us = beat if beat is not None else math.inf  # the time to beat, for comparisons
        self.outrun = outrun if outrun is not None else []
        self.first_by_pipeline = first_by_pipeline
        self.topology = builds.topology
        self.call = self.topology.call_overhead
        self.best: BaselineChoice | None = None
        self.worse = 0
        self.pending: list[_Pending] = []
        self.last: tuple[int, int] | None = None  # the last factor built and its op count
        self.overheads: tuple[int, float] | None = None  # the last factor bounded and its busiest engine's overheads
        #: the first factors left out by their pipeline bound alone (None: not built), nothing before them
        #: could beat ``beat``
        self.filled: list[tuple[int, Schedule | None]] = []
        #: simulate the factors deferred to the walk's end in a worker process (:meth:`_resolve`)
        self.in_worker = False
        self.deferred: tuple[list[_Pending], InWorker] | None = None

    def say(self, factor: int, what: str) -> None:
        self.builds.say(f"baseline {self.name} at chunk factor {factor}: {what}")

    def best_us(self) -> float:
        return self.best.result.time_us if self.best is not None else math.inf

    def run(self) -> BaselineChoice | None:
        b = self.builds
        for factor in chunk_factor_ladder(self.name, b.kind, self.topology, self.size):
            unbuilt = self._unbuilt(factor)
            if unbuilt == _STOP:
                break
            if unbuilt == _SKIP:
                continue
            sched = b.get(self.name, factor)
            if sched is None:
                continue
            self.last = (factor, len(sched.ops))
            if not self._step(factor, sched):
                break
        self._resolve(last=True)
        return self.best if self.deferred is None else None  # then: join()

    def _unbuilt(self, factor: int) -> str:
        """What becomes of ``factor`` before it is built: the walk ends there (its bytes, its op count, its
        overheads), it is left out unbuilt (the ring family's busiest stream), or it is built."""
        b, beat = self.builds, self.beat
        coll = Collective(b.kind, b.n, factor, b.root)
        first = beat is not None and self.best is None and not self.pending and self.worse == 0
        if first and self.last is None:
            # the ring family's and direct's bytes without building their (at 1,024 ranks: 2-17 million op)
            # schedules
            volume = ring_volume_us(self.name, coll, self.topology, self.size)
            if volume is None:
                volume = direct_volume_us(self.name, coll, self.topology, self.size)
            if volume is not None and is_greater(volume + self.call, self.beat_us):
                self.say(factor, f"at least {volume + self.call:.3f} us (its bytes, at every factor), slower than "
                                 f"{self.beat_us:.3f} us")
                self.outrun.append(Outrun(self.name, factor, volume + self.call, True))
                return _STOP
        if beat is not None:
            sends = ring_sends(self.name, coll) if self.last is None else None
            last = self.last
            ops = last[1] * factor / last[0] if last is not None else None if sends is None else 2 * sends
            if ops is not None and ops > MAX_OPS:
                self.say(factor, f"not tried (about {ops:.0f} ops, over MAX_OPS)")
                return _STOP
            if ops is not None and ops > COSTLY_OPS and self.worse and self.best is not None and \
                    is_greater(self.best_us(), self.beat_us):
                self.say(factor, f"not tried (about {ops:.0f} ops, over COSTLY_OPS, after a slower factor; its "
                                 f"best {self.best_us():.3f} us is slower than {self.beat_us:.3f} us)")
                return _STOP
        if self.overheads is not None and self.name in MESSAGES_PER_CHUNK:
            engine = self.overheads[1] * factor / self.overheads[0] + self.call
            if self.pending and is_greater(engine, min(p.bound_us for p in self.pending)):
                self._resolve()  # the deferred factors decide whether this one could still be the best
                if self.worse >= WORSE_IN_A_ROW:
                    return _STOP
            if is_greater(engine, self.best_us()) or (first and is_greater(engine, self.beat_us)):
                self.say(factor, f"at least {engine:.3f} us (its per-message overheads, not built), slower than "
                                 f"{'its best so far' if self.best is not None else f'{self.beat_us:.3f} us'}")
                return _STOP
        if first and self.first_by_pipeline:
            rs = ring_stream(self.name, coll, self.topology, self.size)
            if rs is not None and is_greater(rs.stream_us + self.call, self.beat_us):
                # what its pipeline bound would say at least: left out unbuilt, as a first factor whose
                # pipeline bound exceeds the time to beat is
                self.say(factor, f"at least {rs.stream_us + self.call:.3f} us (its busiest ring stream, not "
                                 f"built), slower than {self.beat_us:.3f} us")
                self.outrun.append(Outrun(self.name, factor, rs.stream_us + self.call, False))
                self.overheads = (factor, rs.engine_us)
                self.filled.append((factor, None))
                return _SKIP
        return _BUILD

    def _step(self, factor: int, sched: Schedule) -> bool:
        """Bound, defer or simulate ``factor``; False where the walk ends."""
        topology, beat = self.topology, self.beat
        nothing_yet = self.best is None and not self.pending
        if nothing_yet and beat is None:
            with gc_paused():
                self._simulated(factor, sched, simulate(sched, topology, self.size))
            return self.worse < WORSE_IN_A_ROW
        if nothing_yet and not self.first_by_pipeline:  # the static bound against the time to beat, as always
            with gc_paused():
                sb, got = simulate_below(sched, topology, self.size, self.beat_us)
            self.overheads = (factor, sb.engine_us)
            if got is not None:
                self._simulated(factor, sched, got)
                return self.worse < WORSE_IN_A_ROW
            every = is_greater(sb.volume_us + sb.call_us, self.beat_us)
            why = "its bytes, at every factor" if every else "its per-message overheads"
            self.say(factor, f"at least {sb.time_us:.3f} us ({why}), slower than {self.beat_us:.3f} us")
            self.outrun.append(Outrun(self.name, factor, sb.time_us, every))
            self.worse += 1
            return not every and self.worse < WORSE_IN_A_ROW
        b = pipeline_bound(sched, topology, self.size)
        self.overheads = (factor, b.engine_us)
        if nothing_yet:  # beat is not None: the pipeline bound against the time to beat
            if is_greater(b.time_us, self.beat_us):
                return self._first_out(factor, sched, b)
        elif self.pending and b.time_us < self.pending[-1].bound_us and not self._over_beat(b):
            self.pending.append(_Pending(factor, b.time_us, sched))  # still falling: deferred
            return True
        else:
            self._resolve()
            if self.worse >= WORSE_IN_A_ROW:
                return False
            if self._over_beat(b) or is_greater(b.time_us, self.best_us()):
                done = is_greater(b.engine_us + self.call, self.best_us())
                why = "its per-message overheads, at every larger factor" if done else f"its pipeline: {b.which}"
                self.say(factor, f"at least {b.time_us:.3f} us ({why}), slower than its best so far")
                if done:
                    return False
                self.worse += 1
                return self.worse < WORSE_IN_A_ROW
        self.pending.append(_Pending(factor, b.time_us, sched))
        if beat is None:  # nothing deferred without a time to beat: the walk simulating every factor
            self._resolve()
            return self.worse < WORSE_IN_A_ROW
        return True

    def _over_beat(self, b: PipelineBound) -> bool:
        """Its bytes or overheads alone exceed the time to beat (as the static bound always said)."""
        return is_greater(max(b.volume_us, b.engine_us) + self.call, self.beat_us)

    def _first_out(self, factor: int, sched: Schedule, b: PipelineBound) -> bool:
        """Nothing could beat ``beat`` yet and ``factor``'s pipeline bound exceeds it (see the class docstring)."""
        call = self.call
        every = is_greater(b.volume_us + call, self.beat_us)
        overheads = not every and is_greater(b.engine_us + call, self.beat_us)
        why = "its bytes, at every factor" if every else "its per-message overheads" if overheads else \
            f"its pipeline: {b.which}"
        self.say(factor, f"at least {b.time_us:.3f} us ({why}), slower than {self.beat_us:.3f} us")
        self.outrun.append(Outrun(self.name, factor, b.time_us, every))
        if every:
            return False
        if overheads:
            self.worse += 1
            return self.worse < WORSE_IN_A_ROW
        self.filled.append((factor, sched))
        return True

    def _simulated(self, factor: int, sched: Schedule, r: SimResult) -> None:
        self.say(factor, f"{r.time_us:.3f} us ({len(sched.ops)} ops, simulated)")
        if self.best is None or is_less(r.time_us, self.best.result.time_us):
            self.best, self.worse = BaselineChoice(self.name, factor, r, sched), 0
        else:
            self.worse += 1

    def _resolve(self, last: bool = False) -> None:
        """Simulate the deferred factors, fastest bound first, while a bound is below the best so far; then
        count the walk on as if each had been simulated in turn (see the class docstring).

        ``last``: the walk ends here; with ``in_worker`` the simulations then run in a worker process
        (:class:`InWorker`) while the search goes on, and :meth:`join` counts them in.
        """
        if not self.pending:
            return
        run, self.pending = self.pending, []
        if last and self.in_worker:
            least = self.best_us()
            self.deferred = (run, InWorker(lambda: self._times(run, least, None)))
            return
        self._count_on(run, self._times(run, self.best_us(), self.say))

    def _times(self, run: list[_Pending], least: float,
               say: Callable[[int, str], None] | None) -> tuple[dict[int, SimResult], list[tuple[int, str]]]:
        """The simulated times of ``run``'s factors worth simulating against ``least``, and what was said (to
        ``say`` at once where given, else returned to be said)."""
        said: list[tuple[int, str]] = []
        tell = say if say is not None else (lambda factor, what: said.append((factor, what)))
        times: dict[int, SimResult] = {}
        for p in sorted(run, key=lambda p: (p.bound_us, p.factor)):
            if is_greater(p.bound_us, least):
                tell(p.factor, f"at least {p.bound_us:.3f} us (its pipeline), slower than its best so far")
                continue
            with gc_paused():
                r = times[p.factor] = simulate(p.schedule, self.topology, self.size)
            tell(p.factor, f"{r.time_us:.3f} us ({len(p.schedule.ops)} ops, simulated)")
            least = min(least, r.time_us)
        return times, said

    def _count_on(self, run: list[_Pending], found: tuple[dict[int, SimResult], list[tuple[int, str]]]) -> None:
        times, said = found
        for factor, what in said:
            self.say(factor, what)
        # in ladder order, as the walk simulating one factor after another compares them (ties: the first);
        # a factor left unsimulated is slower than one simulated, never the best
        for p in run:
            got = times.get(p.factor)
            if got is not None and (self.best is None or is_less(got.time_us, self.best.result.time_us)):
                self.best, self.worse = BaselineChoice(self.name, p.factor, got, p.schedule), 0
            else:
                self.worse += 1

    def join(self) -> BaselineChoice | None:
        """The walk's best, once the simulations it left to a worker are in (raises what they raised)."""
        if self.deferred is not None:
            run, worker = self.deferred
            self.deferred = None
            self._count_on(run, worker.result())
        return self.best


def _search(name: str, builds: _Builds, size_bytes: float, beat: float | None = None,
            outrun: list[Outrun] | None = None, first_by_pipeline: bool = False) -> BaselineChoice | None:
    """Walk baseline ``name``'s ladder at ``size_bytes`` (see :class:`_Walk`)."""
    return _Walk(name, builds, size_bytes, beat, outrun, first_by_pipeline).run()


def best_for(name: str, collective: Collective, topology: Topology, size_bytes: float) -> BaselineChoice | None:
    """Baseline ``name`` at its fastest chunk factor for ``size_bytes``, or None if it cannot build."""
    return _search(name, _Builds(collective, topology), size_bytes)


def _applicable(collective: Collective, topology: Topology) -> list[str]:
    """The baselines that can build ``collective``'s kind on ``topology`` at their smallest useful factor."""
    kind, n, root = collective.kind, collective.n_ranks, collective.root
    return [
        name for name in BASELINES
        if why_not(name, Collective(kind, n, min_chunk_factor(name, kind, topology), root), topology) is None
    ]


def baseline_choices(collective: Collective, topology: Topology, size_bytes: float) -> list[BaselineChoice]:
    """Every applicable baseline at its best chunk factor, fastest first (ties: registry order)."""
    out = []
    builds = _Builds(collective, topology)
    for name in _applicable(collective, topology):
        choice = _search(name, builds, size_bytes)
        if choice is not None:
            out.append(choice)
            log.info("baseline %s: best at chunk factor %d, %.3f us", name, choice.chunk_factor, choice.result.time_us)
    out.sort(key=lambda c: c.result.time_us)  # stable
    return out


def best_baseline(collective: Collective, topology: Topology, size_bytes: float) -> BaselineChoice | None:
    """The fastest baseline at its own best chunk factor, or None when none applies."""
    choices = baseline_choices(collective, topology, size_bytes)
    return choices[0] if choices else None


def plan_baselines(collective: Collective, topology: Topology, sizes: Sequence[float]) -> dict[float, list[BaselineChoice]]:
    """For every size, every applicable baseline at its best chunk factor (fastest first).

    Schedules are built once per (baseline, factor) across sizes. The
    distinct schedules of the result are what a per-size plan needs as
    baseline candidates: each size range then gets each baseline at its best.
    """
    builds = _Builds(collective, topology)
    names = _applicable(collective, topology)
    out = {}
    for size in sizes:
        choices = [c for c in (_search(name, builds, size) for name in names) if c is not None]
        choices.sort(key=lambda c: c.result.time_us)
        out[size] = choices
    return out


def baselines_against(collective: Collective, topology: Topology, size_bytes: float, beat: float,
                      progress: Callable[[str], None] | None = None, workers: bool = True) -> BaselineSearch:
    """Every applicable baseline at its best chunk factor, where it could be faster than ``beat`` us.

    The choices come fastest first, their schedules unverified (:func:`verified` before use); a baseline
    whose every candidate factor is proven slower than ``beat`` (or whose walk stopped on such factors before
    reaching one that is not) appears only in ``outrun``, with the least bound of the factors it left out
    (what holds for each of them). A factor
    is left out only when it is provably slower than the time it had to beat (see the module docstring and
    :class:`_Walk`). A first factor left out by its pipeline bound alone is simulated after all when no
    baseline has a simulated time at the end (the static bound would not have left it out): the comparison
    then still names its best baseline with a time, as it always did.
    ``progress`` is told what became of every factor (the lines logged at INFO): at 1,024 ranks the search
    takes minutes.

    ``workers``: where a walk ends on simulations and more walks follow, those simulations run in a forked
    worker process (one at a time, where the machine has a second CPU) while the next walks build and bound
    their schedules; the results are the same as without (each walk's choice depends on its own times and
    ``beat`` only), and so is the order of the choices; the progress lines of those simulations come when
    they are joined, after the last walk's. An error in the worker is raised here.
    """
    builds = _Builds(collective, topology, checked=False, progress=progress)
    choices: list[BaselineChoice] = []
    outrun: dict[str, list[Outrun]] = {}
    filled: list[str] = []  # baselines left out by their pipeline's fill before any factor could beat ``beat``
    names = _applicable(collective, topology)
    walks: list[_Walk] = []
    chosen = False  # some walk has (or will have, once joined) a simulated time
    for i, name in enumerate(names):
        walk = _Walk(name, builds, size_bytes, beat, outrun.setdefault(name, []), first_by_pipeline=True)
        # the last simulations of a walk with more walks after it run beside them (see the docstring)
        walk.in_worker = workers and i + 1 < len(names) and not any(w.deferred for w in walks) and \
            worker_possible()
        walk.run()
        walks.append(walk)
        if walk.best is not None or walk.deferred is not None:
            chosen = True
            builds.kept.clear()
            filled.clear()
        elif walk.filled and not chosen:
            filled.append(name)
            builds.kept.update(((name, f), s) for f, s in walk.filled if s is not None)
    for walk in walks:
        choice = walk.join()
        if choice is not None:
            choices.append(choice)
            log.info("baseline %s: best at chunk factor %d, %.3f us", choice.name, choice.chunk_factor,
                     choice.result.time_us)
    for name in filled:  # no simulated time otherwise: these as the static bound decides (see above)
        builds.say(f"baseline {name}: no baseline simulated, so its first factors as the static bound decides")
        outrun[name] = []
        choice = _search(name, builds, size_bytes, beat, outrun[name])
        if choice is not None:
            choices.append(choice)
    builds.kept.clear()
    choices.sort(key=lambda c: c.result.time_us)  # stable
    found = [c.name for c in choices]
    # each baseline with the least of its factors' bounds: what holds for every factor it left out
    return BaselineSearch(choices, [min(o, key=lambda x: x.bound_us) for name, o in outrun.items()
                                    if o and name not in found])


def verified(choice: BaselineChoice, topology: Topology) -> BaselineChoice:
    """``choice`` after :func:`~ccsynth.collectives.verify.verify` of its schedule (raises if it fails)."""
    verify(choice.schedule, topology)
    return choice
