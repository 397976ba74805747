"""ccsynth.topologies: the network model, the catalog and its names, ccsynth's JSON files.

Foreign topology files (TACCL profiles) are read one layer up, by
:mod:`ccsynth.formats`; ``ccsynth.get_topology`` reads them all.

>>> from ccsynth.topologies import get_topology
>>> t = get_topology("ndv2x2")
>>> t.n_ranks, t.n_nodes, t.name
(16, 2, 'ndv2x2')
>>> [row[0] for row in list_topologies()][:3]
['dgx1', 'dgx2', 'ndv2']
"""

from ccsynth.topologies.model import (
    BandwidthConstraint,
    Connection,
    Dimension,
    Link,
    SharedPort,
    Spine,
    Switch,
    Topology,
)
from ccsynth.topologies.catalog import (
    dgx1,
    dgx2,
    dgx_a100,
    dgx_h100,
    fat_tree,
    fully_connected,
    hierarchical,
    ndv2,
    ring,
    torus,
)
from ccsynth.topologies.names import list_topologies, parse_topology_spec
from ccsynth.topologies.io import (
    load_topology,
    save_topology,
    topology_from_dict,
    topology_to_dict,
    topology_to_json,
)

#: ``get_topology(spec)``: the agreed public name of :func:`parse_topology_spec`.
get_topology = parse_topology_spec

__all__ = [
    "BandwidthConstraint",
    "Connection",
    "Dimension",
    "Link",
    "SharedPort",
    "Spine",
    "Switch",
    "Topology",
    "get_topology",
    "parse_topology_spec",
    "list_topologies",
    "ring",
    "fully_connected",
    "torus",
    "hierarchical",
    "dgx1",
    "dgx2",
    "ndv2",
    "dgx_a100",
    "dgx_h100",
    "fat_tree",
    "load_topology",
    "save_topology",
    "topology_to_dict",
    "topology_from_dict",
    "topology_to_json",
]
