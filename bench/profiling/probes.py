"""What ``ccsynth topo profile`` measures: its options, the probes and the records of their times.

The design of the whole profile (why each probe, and how its figures are
fitted) is :mod:`ccsynth.bench.profile`'s docstring; this module holds the
plan of measurement and nothing that runs it:

* :class:`ProfileOptions` and the constants that size every probe;
* :class:`Pattern` (a permutation of the ranks, all of them active:
  :func:`patterns`, and :func:`pair_pattern` for one pair alone) and
  :class:`Probe` (a small schedule on a pattern: chains, windows, forwards,
  rounds, footprint windows; :func:`probe_schedule` builds it);
* :func:`plan_probes`, :func:`round_probes`, :func:`footprint_probes` and
  :func:`pair_probes`: every probe of a profile, in the order they run;
* the bytes a probe touches between two calls (:func:`probe_footprint`,
  :func:`eviction_bytes`: from the caches Linux's sysfs lists);
* the records of what was measured: :class:`Sample`, :class:`KernelRates`,
  :class:`RawProfile` (what ``ccsynth topo profile --raw`` saves).

Probes are plain frozen values, so the fit (:mod:`ccsynth.bench.profiling.fit`)
can key its caches by them and a raw profile read back from a file gives the
same probes, and the same topology, as a fresh measurement.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ccsynth.bench import calibration as cal
from ccsynth.bench.omb import Options as BenchOptions
from ccsynth.collectives.builder import ScheduleBuilder
from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.units import format_size

__all__ = [
    "SMALL", "DEFAULT_SIZES", "QUICK_SIZES", "SLICES", "ROUNDS", "WINDOWS", "FORWARD_ROUNDS", "FORWARD_SMALLEST",
    "LADDER", "QUICK_LADDER", "LADDER_ROUNDS", "BW_WINDOW", "PORT_MARGIN", "KERNEL_BYTES", "KERNEL_SECONDS",
    "CURVE_MIN_BYTES", "CURVE_MIN_SHARE", "LOCAL_LADDER", "PASSES", "ROUND_COUNTS", "ROUND_MAX_PEERS",
    "ROUND_MAX_MESSAGES", "FOOTPRINT_MESSAGE", "FOOTPRINT_SMALL", "FOOTPRINTS", "QUICK_FOOTPRINTS", "FOOTPRINT_FLAT",
    "FOOTPRINT_ITERS", "ProfileOptions", "Pattern", "Probe", "Sample", "KernelRates", "RawProfile", "node_ids",
    "node_members", "own_cores", "patterns", "pair_pattern", "probe_schedule", "round_peer_counts", "round_partners",
    "round_probes", "plan_probes", "footprint_probes", "pair_probes", "eviction_pass_bytes", "probe_footprint",
    "eviction_bytes",
]


SMALL = 8  # bytes per message of the latency and overhead probes
DEFAULT_SIZES = (64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20)
QUICK_SIZES = (64 << 10, 1 << 20)
SLICES = (1 << 20, 4 << 20)  # the executor's slice sizes: reducing collectives, the others
ROUNDS = (1, 2, 4, 8)
WINDOWS = (1, 2, 4, 8, 16)
#: rounds of a forward probe (a chain of large messages, see :mod:`ccsynth.bench.profile`)
FORWARD_ROUNDS = 2
#: the forward probes' messages: this size (below the bandwidth probes) and the bandwidth probes' sizes
FORWARD_SMALLEST = 16 << 10
#: message sizes of the protocol probes (chains of LADDER_ROUNDS rounds): where does a hop get dearer?
LADDER = (1 << 10, 2 << 10, 4 << 10, 6 << 10, 8 << 10, 12 << 10, 16 << 10, 32 << 10)
QUICK_LADDER = (2 << 10, 4 << 10, 8 << 10, 16 << 10)
LADDER_ROUNDS = 2
BW_WINDOW = 2  # messages per window of a bandwidth probe
PORT_MARGIN = 0.15  # all pairs at once below (1 - this) x one pair alone: a shared port
KERNEL_BYTES = 16 << 20  # local kernels are timed on buffers this large (beyond the caches)
KERNEL_SECONDS = 0.25  # ... for this long each (quick: a fifth)
ITERS_SMALL, WARMUP_SMALL = 120, 10
ITERS_LARGE, WARMUP_LARGE = 12, 2
#: probes whose messages carry at least this many bytes give a point of the message curve, at the probe's size
#: (below, a message's bytes are a small part of its time, and a factor fitted there would be noise)
CURVE_MIN_BYTES = 4 << 10
#: ... and only where the bytes are at least this share of the probes' predicted time (the median over the probes
#: of one size of ``d log(time) / d log(factor)``): a factor fitted on a share ``s`` moves by ``e / s`` for a timing
#: error ``e``, so the protocol ladder's chains of 4-16 KiB messages on 4 ranks (shares 0.07-0.17) put 0.13 or 1.2 on
#: call sizes of 64-128 KiB from 5-10% of noise, and the 4-rank allreduces of 64 KiB, whose own messages are
#: mostly bytes, were predicted 2.5x too fast (docs/results.md, h51-mid); below the first point the curve is flat
CURVE_MIN_SHARE = 0.25
#: buffer sizes of the local-kernel ladder (the local curve); KERNEL_BYTES is its last point
LOCAL_LADDER = (4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20)
PASSES = 3  # every probe is measured in this many passes over all of them; the fastest pass counts
#: rounds of the round probes (quick: the first and the last); the per-round cost is the slope over these
ROUND_COUNTS = (1, 2, 4, 8)
#: the most peers a round probe waits on, and the most messages per rank of one (fewer rounds beyond; at least two
#: round counts): a probe of every rank on many ranks would cost more to build and fit than to run
ROUND_MAX_PEERS, ROUND_MAX_MESSAGES = 64, 128
#: message size of the footprint probes (windows of BW_WINDOW messages: one slice each)
FOOTPRINT_MESSAGE = 256 << 10
#: message size of the second footprint probes (a quarter of the bytes: what a cold call pays once, and per byte)
FOOTPRINT_SMALL = 64 << 10
#: the footprints per rank the footprint probes are timed at, beside their own buffers alone (an eviction pass makes
#: up the rest): a factor of 2 apart, from about the L2 to most of what ``ccsynth bench --interleave`` touches up to
#: 16 MiB (0.6-392 MiB per rank in run F), whatever the last-level cache the system reports (docs/results.md,
#: h49-probes); not 512 MiB: its passes alone would double the eviction passes' bytes (``--footprints 2M:512M``)
FOOTPRINTS = tuple(m << 20 for m in (2, 4, 8, 16, 32, 64, 128, 256))
QUICK_FOOTPRINTS = (8 << 20, 64 << 20)
#: a footprint curve whose factors all lie within this of 1 says nothing: left out
FOOTPRINT_FLAT = 0.05
#: timed iterations of a footprint probe over all passes (a ratio of two probes is fitted: more than a window's;
#: 48 with six footprints, 18 with the ladder's nine: at 48 its eviction passes made the 2-rank profile 2.2x as long,
#: docs/results.md, h49-probes)
FOOTPRINT_ITERS = 18
QUICK_ITERS_SMALL, QUICK_ITERS_LARGE = 15, 3


@dataclass(frozen=True)
class ProfileOptions:
    """What ``ccsynth topo profile`` was asked for."""

    sizes: tuple[int, ...] | None = None  # message sizes of the bandwidth probes (None: DEFAULT_SIZES, QUICK_SIZES)
    iters: int | None = None  # timed iterations per probe, over all passes (None: by size)
    quick: bool = False  # fewer probes and iterations: seconds instead of a minute
    passes: int | None = None  # passes over all probes (None: PASSES, quick 1); a probe keeps its fastest pass
    cold: bool = True  # large-message probes start with the caches holding other data (see :mod:`ccsynth.bench.profile`)
    footprints: tuple[int, ...] | None = None  # footprints of the footprint probes (None: FOOTPRINTS, QUICK_FOOTPRINTS)
    calibrate: bool = True  # run the reference collectives that give the run curve (ccsynth.bench.calibration)

    @property
    def bw_sizes(self) -> tuple[int, ...]:
        if self.sizes:
            return tuple(self.sizes)
        return QUICK_SIZES if self.quick else DEFAULT_SIZES

    @property
    def n_passes(self) -> int:
        return self.passes or (1 if self.quick else PASSES)

    def iterations(self, nbytes: int) -> tuple[int, int]:
        """(timed iterations, warm-up iterations) of one pass of a probe moving ``nbytes`` per message."""
        large = nbytes > 64 << 10
        if self.iters is not None:
            iters, warmup = self.iters, max(1, self.iters // 10)
        elif self.quick:
            iters, warmup = (QUICK_ITERS_LARGE, 1) if large else (QUICK_ITERS_SMALL, 2)
        else:
            iters, warmup = (ITERS_LARGE, WARMUP_LARGE) if large else (ITERS_SMALL, WARMUP_SMALL)
        return max(1, -(-iters // self.n_passes)), warmup

    @property
    def calibration_sizes(self) -> tuple[int, ...]:
        """Input bytes per rank of the reference collectives (none when ``calibrate`` is off)."""
        if not self.calibrate:
            return ()
        return cal.QUICK_SIZES if self.quick else cal.SIZES

    def calibration_iterations(self, size: int) -> tuple[int, int]:
        """(timed, warm-up) iterations of one pass of the reference collectives at ``size`` input bytes per rank:
        ``ccsynth bench``'s counts shared among the passes (a quarter of them, quick)."""
        iters, warmup = BenchOptions(sizes=()).iterations(size)
        if self.quick:
            iters, warmup = max(2, iters // 4), max(1, warmup // 4)
        return max(2, -(-iters // self.n_passes)), warmup

    @property
    def rounds(self) -> tuple[int, ...]:
        return (1, 2, 4) if self.quick else ROUNDS

    @property
    def windows(self) -> tuple[int, ...]:
        return (1, 4) if self.quick else WINDOWS

    @property
    def slices(self) -> tuple[int, ...]:
        return SLICES[:1] if self.quick else SLICES

    @property
    def ladder(self) -> tuple[int, ...]:
        return QUICK_LADDER if self.quick else LADDER

    @property
    def footprint_targets(self) -> tuple[int, ...]:
        """Footprints per rank (bytes) the footprint probes are timed at besides their own buffers alone."""
        if self.footprints:
            return tuple(sorted(set(self.footprints)))
        return QUICK_FOOTPRINTS if self.quick else FOOTPRINTS


@dataclass(frozen=True)
class Pattern:
    """A permutation of the ranks: rank ``r`` sends to ``dest[r]`` (-1: ``r`` stays idle).

    ``kind`` is ``intra`` (pairs inside nodes) or ``inter`` (across nodes).
    """

    name: str
    dest: tuple[int, ...]
    kind: str = "intra"

    @property
    def pairs(self) -> tuple[tuple[int, int], ...]:
        return tuple((r, d) for r, d in enumerate(self.dest) if d >= 0)


@dataclass(frozen=True)
class Probe:
    """One measurement schedule: ``messages`` messages of ``nbytes`` per active rank, on ``pattern``.

    ``shape`` is ``chain`` (each round forwards the last one's message; of
    small messages and of the protocol ladder), ``rounds`` (``messages``
    rounds of exchanges with ``peers`` peers, :func:`round_probes`; the
    pattern only names it), ``forward`` (the same of
    large messages: the bandwidth probes of forwarded data), ``window``
    (all messages independent, in flight together) or ``footprint`` (a
    window, each call after an eviction pass over ``evict_bytes``);
    ``slice_bytes`` is the executor's pipeline slice (None: its default).
    """

    pattern: Pattern
    shape: str
    messages: int
    nbytes: int
    slice_bytes: int | None = None
    peers: int = 1  # shape "rounds": the peers every rank exchanges with in each of its ``messages`` rounds
    evict_bytes: int = 0  # footprint probes: the eviction pass before each call

    @property
    def buffer_bytes(self) -> int:
        """Bytes of one rank's send and receive buffers (the probe's own working set)."""
        return self.messages * self.peers * self.nbytes * (1 + len(self.pattern.dest))

    @property
    def size_bytes(self) -> int:
        """The schedule's message size (nccl-tests convention of its allgather spec)."""
        return len(self.pattern.dest) * self.messages * self.peers * self.nbytes

    def describe(self) -> str:
        if self.shape == "rounds":
            return f"{self.messages} rounds with {self.peers} peer{'s' if self.peers > 1 else ''} of {format_size(self.nbytes)}"
        sl = f", {self.slice_bytes >> 20} MiB slices" if self.slice_bytes and self.nbytes > SMALL else ""
        ev = f", after {format_size(self.evict_bytes)} of other data" if self.shape == "footprint" else ""
        return f"{self.pattern.name}: {self.shape} of {self.messages} x {format_size(self.nbytes)}{sl}{ev}"


@dataclass(frozen=True)
class Sample:
    """A probe and its measured time (us: median over iterations of the slowest rank)."""

    probe: Probe
    measured_us: float


@dataclass(frozen=True)
class KernelRates:
    """GB/s of the backend's kernels on float32, every rank running at once.

    ``copy`` (``dst = src``), ``reduce`` (``dst += src``) and ``fused``
    (``dst = a + b``, the receive-reduce-copy that reducing collectives run
    most); ``local_bw`` is the fused kernel's rate.
    """

    copy: float
    reduce: float
    fused: float
    nbytes: int
    call_us: float = 0.0  # one call of the fused kernel on 8 bytes: the fixed cost of a kernel call
    ladder: tuple[tuple[int, float], ...] = ()  # (buffer bytes, us per call of the fused kernel) at LOCAL_LADDER

    @property
    def local_bw(self) -> float:
        return self.fused


@dataclass(frozen=True)
class RawProfile:
    """What :func:`measure_machine` timed, before any fit: :func:`fit_profile` makes the profile of it, the same
    one whether it was just measured or read back from a file (:mod:`ccsynth.bench.profile_raw`).

    ``probe_us``: every probe of :func:`plan_probes` and the pair-alone windows, with its time in every pass (us,
    the slowest rank's median; the fit keeps the fastest); ``round_us``: the round probes, measured twice a pass
    (the fit keeps :func:`robust_us`); ``communicator_us``: per collective, the times through ccsynth's
    communicator and through the executor directly (:func:`measure_communicator`, twice a pass).
    """

    n: int
    options: ProfileOptions
    hosts: tuple[str, ...]
    cores: tuple[int, ...]
    mpi_library: str
    when: str  # "YYYY-mm-dd HH:MM UTC" when the measurement ended
    load: str  # the load average then
    probe_us: tuple[tuple[Probe, tuple[float, ...]], ...]
    round_us: tuple[tuple[Probe, tuple[float, ...]], ...]
    communicator_us: tuple[tuple[str, tuple[float, ...], tuple[float, ...]], ...]
    kernels: KernelRates
    seconds: float = 0.0  # the measurement's wall time
    calibration: tuple[cal.CalibrationRow, ...] = ()  # the reference collectives, every pass's time (run curve)

    @property
    def nodes(self) -> tuple[int, ...]:
        return node_ids(self.hosts)


def node_ids(hosts: Sequence[str]) -> tuple[int, ...]:
    """Node id of every rank, numbered in order of first appearance."""
    ids: dict[str, int] = {}
    return tuple(ids.setdefault(h, len(ids)) for h in hosts)


def patterns(nodes: Sequence[int]) -> tuple[Pattern, ...]:
    """``n - 1`` permutations, all ranks active, that together send once over every ordered pair.

    With ``N`` nodes of ``p`` ranks each, pattern ``(s, t)`` sends from rank
    ``j`` of node ``a`` to rank ``j + t`` of node ``a + s`` (mod ``p`` and
    ``N``): ``s = 0`` keeps to nodes (``t = 1 .. p-1``), ``s > 0`` crosses
    them (``t = 0 .. p-1``). Nodes of unequal sizes fall back to the shifts
    ``r -> r + k`` of the whole world (a pattern may then mix pair kinds).
    """
    n = len(nodes)
    members = node_members(nodes)
    groups = [members[k] for k in sorted(members)]
    p = len(groups[0])
    if any(len(g) != p for g in groups):
        out = []
        for k in range(1, n):
            dest = tuple((r + k) % n for r in range(n))
            kinds = {"intra" if nodes[r] == nodes[d] else "inter" for r, d in enumerate(dest)}
            out.append(Pattern(f"shift {k}", dest, kinds.pop() if len(kinds) == 1 else "mixed"))
        return tuple(out)
    where = {r: (a, j) for a, g in enumerate(groups) for j, r in enumerate(g)}
    N = len(groups)
    out = []
    for s in range(N):
        for t in range(1 if s == 0 else 0, p):
            dest = tuple(groups[(where[r][0] + s) % N][(where[r][1] + t) % p] for r in range(n))
            name = f"shift {t}" if N == 1 else (f"node shift 0, rank shift {t}" if s == 0 else f"node shift {s}, rank shift {t}")
            out.append(Pattern(name, dest, "intra" if s == 0 else "inter"))
    return tuple(out)


def pair_pattern(nodes: Sequence[int], node: int) -> Pattern | None:
    """The first two ranks of ``node`` exchanging, every other rank idle (None if the node has < 3 ranks)."""
    ranks = [r for r, x in enumerate(nodes) if x == node]
    if len(ranks) < 3:
        return None
    a, b = ranks[0], ranks[1]
    dest = [-1] * len(nodes)
    dest[a], dest[b] = b, a
    return Pattern(f"pair {a}<->{b} alone", tuple(dest))


def probe_schedule(n: int, probe: Probe) -> Schedule:
    """The schedule of ``probe`` on ``n`` ranks (an allgather spec: chunk ``j`` of ``o`` takes message ``j``).

    Not a complete allgather (it is never verified as one): the executor
    needs only a race-free schedule whose messages match.
    """
    if probe.shape == "rounds":
        return _rounds_schedule(n, probe)
    m = probe.messages
    b = ScheduleBuilder(Collective("allgather", n, m), f"{probe.shape}{m}", topology="profile")
    for j in range(m):
        for r, d in probe.pattern.pairs:
            if probe.shape in ("chain", "forward"):  # a window or footprint probe: independent messages
                b.transfer(r, d, ("i", 0) if j == 0 else ("o", j - 1), ("o", j))
            else:
                b.transfer(r, d, ("i", j), ("o", j))
    return b.build()


def _rounds_schedule(n: int, probe: Probe) -> Schedule:
    """The schedule of a round probe: round ``j`` sends, on every rank, what round ``j - 1`` received from each
    peer to that peer's counterpart (the first round: the input), after all of round ``j - 1``'s receives."""
    k, rounds = probe.peers, probe.messages
    perms = round_partners(n, k)
    b = ScheduleBuilder(Collective("allgather", n, rounds * k), f"rounds{rounds}x{k}", topology="profile")
    last: list[list[int]] = [[] for _ in range(n)]  # per rank: the receives of the last round
    for j in range(rounds):
        now: list[list[int]] = [[] for _ in range(n)]
        for i, dest in enumerate(perms):
            for r in range(n):
                src = ("i", i) if j == 0 else ("o", (j - 1) * k + i)
                _, rid = b.transfer(r, dest[r], src, ("o", j * k + i), send_deps=last[r])
                now[dest[r]].append(rid)
        last = now
    return b.build()


def round_peer_counts(n: int) -> tuple[int, ...]:
    """The peer counts ``k`` of the round probes on ``n`` ranks: 1 to 8, then about doubling, and ``n - 1``, up to
    :data:`ROUND_MAX_PEERS` (the round cost stays at its last point beyond)."""
    ks = {k for k in (*range(1, 9), 12, 16, 24, 32, 48, ROUND_MAX_PEERS) if k < n}
    return tuple(sorted(ks | ({n - 1} if n - 1 <= ROUND_MAX_PEERS else set())))


def round_partners(n: int, k: int) -> tuple[tuple[int, ...], ...]:
    """``k`` permutations of the ranks, the peers of a round: with ``n`` a power of two ``r -> r xor m``
    (``m = 1 .. k``: a rank sends to and receives from the same ``k`` peers, as recursive doubling and the
    direct algorithms do), otherwise ``r -> r + s`` (``s = 1 .. k``: it receives from ``k`` others)."""
    if n & (n - 1) == 0:
        return tuple(tuple(r ^ m for r in range(n)) for m in range(1, k + 1))
    return tuple(tuple((r + s) % n for r in range(n)) for s in range(1, k + 1))


def round_probes(n: int, options: ProfileOptions) -> list[Probe]:
    """The round probes (see :mod:`ccsynth.bench.profile`): per peer count, every round count of :data:`ROUND_COUNTS`."""
    counts = (ROUND_COUNTS[0], ROUND_COUNTS[-1]) if options.quick else ROUND_COUNTS
    out = []
    for k in round_peer_counts(n):
        pat = Pattern(f"{k} peer{'s' if k > 1 else ''}", round_partners(n, k)[0])
        mine = [r for i, r in enumerate(counts) if i < 2 or r * k <= ROUND_MAX_MESSAGES]
        out += [Probe(pat, "rounds", r, SMALL, peers=k) for r in mine]
    return out


def plan_probes(pats: Sequence[Pattern], options: ProfileOptions) -> list[Probe]:
    """Every probe of a profile, in the order they run."""
    out: list[Probe] = []
    forward_sizes = sorted({FORWARD_SMALLEST, *options.bw_sizes})
    for pat in pats:
        out += [Probe(pat, "chain", r, SMALL) for r in options.rounds]
        out += [Probe(pat, "window", w, SMALL) for w in options.windows if w > 1]
        out += [Probe(pat, "chain", LADDER_ROUNDS, s) for s in options.ladder]
        for sl in options.slices:
            # below 1 MiB every slice size cuts a message alike: one probe is enough
            out += [Probe(pat, "window", BW_WINDOW, s, sl) for s in options.bw_sizes if sl == SLICES[0] or s >= SLICES[0]]
        out += [Probe(pat, "forward", FORWARD_ROUNDS, s, SLICES[0]) for s in forward_sizes]
    return out + footprint_probes(pats[0], options)


def footprint_probes(pat: Pattern, options: ProfileOptions) -> list[Probe]:
    """The footprint probes (see :mod:`ccsynth.bench.profile`): windows of :data:`FOOTPRINT_MESSAGE` messages on their own
    buffers alone and after an eviction pass that makes their footprint each of ``options.footprint_targets``
    above those buffers, and windows of :data:`FOOTPRINT_SMALL` messages at the same footprints (their buffers are
    smaller: their eviction passes longer by the difference)."""
    own = Probe(pat, "footprint", BW_WINDOW, FOOTPRINT_MESSAGE, SLICES[0]).buffer_bytes
    large = [Probe(pat, "footprint", BW_WINDOW, FOOTPRINT_MESSAGE, SLICES[0], evict_bytes=e)
             for e in (0, *(t - own for t in options.footprint_targets if t > own))]
    less = large[0].buffer_bytes - Probe(pat, "footprint", BW_WINDOW, FOOTPRINT_SMALL, SLICES[0]).buffer_bytes
    return large + [replace(p, nbytes=FOOTPRINT_SMALL, evict_bytes=p.evict_bytes + less) for p in large]


def _caches() -> list[tuple[int, str]]:
    """(bytes, shared_cpu_list) of every cache of cpu0 that sysfs lists."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        entries = os.listdir(base)
    except OSError:
        return []
    out = []
    for e in entries:
        try:
            with open(os.path.join(base, e, "size")) as f:
                text = f.read().strip()
            with open(os.path.join(base, e, "shared_cpu_list")) as f:
                shared = f.read().strip()
        except OSError:
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
        try:
            out.append((int(text.rstrip("KMGkmg")) * mult, shared))
        except ValueError:
            continue
    return out


def eviction_pass_bytes(probe: Probe, cold: bool) -> int:
    """Bytes of the untimed eviction pass before each timed call of ``probe``."""
    if probe.shape == "footprint":
        return probe.evict_bytes
    if cold and probe.shape in ("window", "forward") and probe.nbytes > SMALL:
        return eviction_bytes()
    return 0


def probe_footprint(probe: Probe, cold: bool = True) -> int:
    """The bytes a rank touches between two timed calls of ``probe``: its buffers and the eviction pass."""
    return probe.buffer_bytes + eviction_pass_bytes(probe, cold)


def eviction_bytes() -> int:
    """Bytes that push a rank's data out of its core's own caches: four times the largest cache private to
    a core (read from Linux's sysfs; a cache shared by several cores, the last level, is left alone); 8 MiB
    where the system does not say."""
    largest = 0
    for size, shared in _caches():
        if "," not in shared and "-" not in shared:  # private to a core
            largest = max(largest, size)
    return 4 * largest if largest else 8 << 20


def node_members(nodes: Sequence[int]) -> dict[int, list[int]]:
    """The ranks of every node (``nodes[r]``: rank ``r``'s node), in rank order."""
    members: dict[int, list[int]] = {}
    for r, node in enumerate(nodes):
        members.setdefault(node, []).append(r)
    return members


def own_cores(nodes: Sequence[int], cores: Sequence[int]) -> bool:
    """Whether every rank has a core of its own (no node runs more ranks than it has cores): where it has, the
    profile says ``receiver_copies`` (see :mod:`ccsynth.bench.profile`)."""
    return all(len(ranks) <= cores[ranks[0]] for ranks in node_members(nodes).values())


def pair_probes(nodes: Sequence[int], options: ProfileOptions) -> dict[Pattern, list[Probe]]:
    """Per node of at least three ranks, the window of one pair streaming alone (see :mod:`ccsynth.bench.profile`)."""
    pairs = [p for p in (pair_pattern(nodes, node) for node in sorted(set(nodes))) if p is not None]
    return {p: [Probe(p, "window", BW_WINDOW, s, SLICES[0]) for s in options.bw_sizes if s >= SLICES[0]][-1:]
            for p in pairs}
