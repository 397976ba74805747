"""Small shared test fixtures (importable from tests: pyproject sets pytest's pythonpath to tests/)."""

from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.verify import VerifyReport, verify
from ccsynth.topologies.model import Link, SharedPort, Topology


def assert_verified(schedule: Schedule, topology: Topology | None = None) -> VerifyReport:
    """The verifier's report on ``schedule``; the assertion fails, with the verifier's finding, if it is wrong."""
    report = verify(schedule, topology, raise_on_error=False)
    assert report.ok, f"{schedule.name!r}: {report.error}"
    return report


def toy_two_nodes(nic_bw: float = 10.0) -> Topology:
    """2 nodes x 2 GPUs: fast pairs inside, every GPU linked to the other node, one shared NIC per node."""
    links = [Link(0, 1, 0.5, 50.0), Link(1, 0, 0.5, 50.0), Link(2, 3, 0.5, 50.0), Link(3, 2, 0.5, 50.0)]
    for a in (0, 1):
        for b in (2, 3):
            links += [Link(a, b, 2.0, nic_bw), Link(b, a, 2.0, nic_bw)]
    ports = (
        SharedPort("nic0.tx", (0, 1), (2, 3), nic_bw),
        SharedPort("nic0.rx", (2, 3), (0, 1), nic_bw),
        SharedPort("nic1.tx", (2, 3), (0, 1), nic_bw),
        SharedPort("nic1.rx", (0, 1), (2, 3), nic_bw),
    )
    return Topology("toy2x2", 4, links=tuple(links), shared_ports=ports, nodes=(0, 0, 1, 1))


class FakeComm:
    """Enough of a communicator for compiling a schedule (no messages are sent)."""

    def __init__(self, size: int, rank: int, tag_ub: int = 32767):
        self.size, self.rank, self.tag_ub = size, rank, tag_ub

    def Get_size(self):
        return self.size

    def Get_rank(self):
        return self.rank

    def Get_attr(self, key):
        return self.tag_ub


def bidirectional(n: int, pairs, alpha: float = 1.0, bw: float = 10.0, **kw) -> Topology:
    """``n`` ranks with a link each way for every pair, all of ``alpha`` us and ``bw`` GB/s."""
    links = tuple(Link(a, b, alpha, bw) for x, y in pairs for a, b in ((x, y), (y, x)))
    return Topology(f"t{n}", n, links=links, **kw)
