"""The figures of the catalog's machines and links, and where they come from.

Every number a catalog builder (:mod:`ccsynth.topologies.catalog`) puts into a
topology is named here once, with its source: bandwidths per link and direction,
latencies per hop, per-message overheads, the DGX-1 NVLink wiring, and the
citations each built topology carries in its ``sources`` (``SRC_*``).

Units: ``alpha`` in microseconds, bandwidth in GB/s, *per direction*.

Figures and where they come from
--------------------------------
* NVLink2 (V100): 25 GB/s per link and direction; a V100 has 6 links,
  300 GB/s in total both ways (NVIDIA Tesla V100 datasheet). DGX-1 wires
  the 8 GPUs as a hybrid cube-mesh in which 8 GPU pairs share two links
  (NVIDIA DGX-1 with Tesla V100 System Architecture, WP-08437-002).
* DGX-2: 16 V100 on 12 NVSwitches, each GPU with its 6 NVLinks = 150 GB/s per
  direction into the switch fabric (NVIDIA DGX-2 datasheet).
* Azure NDv2: 8 V100 in a DGX-1-like cube-mesh, one 100 Gb/s EDR InfiniBand
  NIC per VM = 12.5 GB/s (Microsoft Learn, "NDv2-series").
* DGX A100: 8 A100 on 6 NVSwitches, 600 GB/s bidirectional = 300 GB/s per
  direction per GPU; 8 single-port ConnectX-6 200 Gb/s HDR compute NICs
  = 25 GB/s each, one per GPU (NVIDIA DGX A100 datasheet and user guide).
* DGX H100: 8 H100 on 4 NVSwitches, 900 GB/s bidirectional = 450 GB/s per
  direction per GPU; 8 ConnectX-7 400 Gb/s NDR = 50 GB/s each (NVIDIA DGX
  H100 datasheet).
* The compute fabric between DGX nodes (NVIDIA DGX SuperPOD reference
  architectures: RA-09950-001 for DGX A100, RA-11333-001 / docs.nvidia.com
  "DGX SuperPOD ... H100, Network Fabrics" for DGX H100): nodes come in
  *scalable units* (SUs) of 20 (A100, 40-port HDR QM8790 leaves) or 32
  (H100, 64-port NDR QM9700 leaves) nodes; in an SU, NIC ``i`` of every
  node plugs into leaf switch ``i`` (*rail-optimized*); each leaf has as
  many up-links to the spine as down-links (non-blocking fat tree: the H100
  RA's 4-SU pod has 1,020 node cables and 1,024 leaf-spine cables). "Traffic
  per rail ... is always one hop away from the other ... nodes in a SU.
  Traffic between nodes, or between rails, traverses the spine layer" (H100
  RA). ccsynth: one :class:`~ccsynth.topologies.model.Switch` per rail and
  SU (``rail{i}``, or ``su{s}.rail{i}`` beyond one SU) and one
  non-blocking :class:`~ccsynth.topologies.model.Spine` joining them, so a
  GPU reaches a GPU of another rail (or another SU) directly, through its
  own NIC and the receiver's, at two switch hops more than on a leaf. (The
  140-node A100 pod puts a core tier above its spine groups; ccsynth
  charges every leaf-to-leaf path the same two extra hops.)
* A switch hop: NVIDIA's HDR Quantum switches (QM8700/QM8790 datasheet)
  forward port to port in 130 ns; leaf and spine sit a few racks apart,
  up to about 30 m of fibre at 5 ns/m. ccsynth charges
  :data:`IB_SWITCH_HOP_US` = 0.3 us per extra hop, so a message through the
  spine has ``IB_ALPHA_US + 2 * 0.3`` = 3.2 us of latency and the same
  InfiniBand per-message overhead.
* ``shared_nic`` (``shared_nic:NxG``): hosts of ``G`` GPUs on a switch
  inside the host and *one NIC per host* that all its GPUs share -- the
  machines Alpa's cross-mesh resharding benchmark assumes (MLSys'23: 4 or
  8 GPUs per host, one NIC each), commodity multi-GPU servers, cloud VMs
  with one network adapter. Defaults: 150 GB/s per GPU inside the host
  (the DGX-2 figure: a V100's 6 NVLink2 links into NVSwitch) and a 100 Gb/s
  EDR InfiniBand NIC of 12.5 GB/s (the NDv2 figure), with the NVLink and
  InfiniBand latencies and overheads below; every figure can be given in
  the spec string (``shared_nic:4x4@300,25``).
* ``fat_tree`` generalises the same two tiers: any number of nodes and
  GPUs per node, leaves for groups of ``leaf_nodes`` nodes, and an
  *oversubscription* ratio ``r:1`` that leaves each leaf ``1/r`` of its
  down-link bandwidth towards the spine (a :class:`Spine` ``uplink_bw``).
* Latency: TACCL (Shah et al., NSDI'23) profiled NDv2 at alpha = 0.3 us on
  NVLink and 2.6 us across InfiniBand (``taccl/examples/topo/topo-ndv2-1MB.json``).
  NCCL's tuning model charges about 0.5-0.6 us per NVLink hop for its
  low-latency LL protocol (``src/graph/tuning.cc``, ``hwLat``), which is
  close to the bare latency; ccsynth uses :data:`NVLINK_ALPHA_US` = 0.7 us
  for one NVLink or NVSwitch hop and :data:`IB_ALPHA_US` = 2.6 us for one
  InfiniBand hop.
* Per-message overhead (LogGP's ``o``, TACCL's per-send cost): for the
  Simple protocol that bulk transfers and MSCCL schedules use, NCCL's tuning
  model charges 3.4 us per NVLink hop and 14.0 us per network hop of a ring
  (``hwLat``, Ring/Simple, NCCL 2.18 and later). One hop of a chain of
  messages costs ``alpha + 2 * overhead`` in ccsynth's model (the sender's
  and the receiver's overhead), so :data:`NVLINK_OVERHEAD_US` = (3.4 - 0.7) / 2
  = 1.35 us and :data:`IB_OVERHEAD_US` = (14.0 - 2.6) / 2 = 5.7 us. The
  generic shapes (ring, fully connected, torus) default to the NVLink
  figures; a hierarchy's dimension 0 takes the NVLink figures and the others
  the InfiniBand ones. A machine measured with ``ccsynth topo profile`` has
  its own figures.

"""

__all__ = [
    "NVLINK_ALPHA_US", "IB_ALPHA_US", "IB_SWITCH_HOP_US", "DGX_A100_SU_NODES", "DGX_H100_SU_NODES",
    "NVLINK_OVERHEAD_US", "IB_OVERHEAD_US", "NVLINK2_GBPS", "DEFAULT_BW", "DEFAULT_ALPHA", "DEFAULT_OVERHEAD",
    "DGX1_NVLINKS", "SRC_A100", "SRC_ALPHA", "SRC_DGX1", "SRC_DGX2", "SRC_H100", "SRC_NDV2", "SRC_OVERHEAD", "SRC_RAIL",
    "SRC_SUPERPOD_A100", "SRC_SUPERPOD_H100", "SRC_SWITCH_HOP", "SRC_TACCL", "SRC_V100",
]

#: latency of one NVLink / NVSwitch hop (us); see the module docstring.
NVLINK_ALPHA_US = 0.7
#: latency of one InfiniBand hop (us), TACCL's NDv2 profile.
IB_ALPHA_US = 2.6
#: latency of one more InfiniBand switch hop (us), leaf to spine or back; see the module docstring.
IB_SWITCH_HOP_US = 0.3
#: nodes per scalable unit (one leaf switch per rail) of the DGX SuperPOD reference architectures
DGX_A100_SU_NODES = 20
DGX_H100_SU_NODES = 32
#: per-message overhead on each end of an NVLink / NVSwitch message (us); see the module docstring.
NVLINK_OVERHEAD_US = 1.35
#: per-message overhead on each end of an InfiniBand message (us); see the module docstring.
IB_OVERHEAD_US = 5.7
#: NVLink2 bandwidth per link and direction (GB/s), V100.
NVLINK2_GBPS = 25.0

#: Defaults of the generic shapes (ring, fully connected, torus).
DEFAULT_BW = 25.0
DEFAULT_ALPHA = 0.7
DEFAULT_OVERHEAD = NVLINK_OVERHEAD_US


#: NVLink count between GPU pairs of a DGX-1 (V100) / NDv2 node, row = GPU 0..7.
DGX1_NVLINKS: tuple[tuple[int, ...], ...] = (
    (0, 2, 1, 1, 2, 0, 0, 0),
    (2, 0, 1, 2, 0, 1, 0, 0),
    (1, 1, 0, 2, 0, 0, 2, 0),
    (1, 2, 2, 0, 0, 0, 0, 1),
    (2, 0, 0, 0, 0, 2, 1, 1),
    (0, 1, 0, 0, 2, 0, 1, 2),
    (0, 0, 2, 0, 1, 1, 0, 2),
    (0, 0, 0, 1, 1, 2, 2, 0),
)

SRC_V100 = "NVIDIA Tesla V100 datasheet: NVLink2 300 GB/s per GPU = 6 links x 25 GB/s per direction"
SRC_DGX1 = "NVIDIA DGX-1 with Tesla V100 System Architecture (WP-08437-002): hybrid cube-mesh NVLink topology"
SRC_DGX2 = "NVIDIA DGX-2 datasheet: 16 V100 on 12 NVSwitches, 6 NVLinks (150 GB/s per direction) per GPU"
SRC_NDV2 = "Microsoft Learn, NDv2-series: 8 V100 with NVLink, one 100 Gb/s EDR InfiniBand NIC (12.5 GB/s)"
SRC_A100 = ("NVIDIA DGX A100 datasheet / user guide: 6 NVSwitches, 600 GB/s bidirectional NVLink per GPU; "
             "8 single-port ConnectX-6 HDR 200 Gb/s (25 GB/s) compute NICs, one per GPU")
SRC_H100 = ("NVIDIA DGX H100 datasheet: 4 NVSwitches, 900 GB/s bidirectional NVLink per GPU; "
             "8 ConnectX-7 NDR 400 Gb/s (50 GB/s) NICs, one per GPU")
SRC_RAIL = "NVIDIA DGX SuperPOD reference architecture: rail-optimized InfiniBand (NIC i of every node on leaf/rail i)"
SRC_SUPERPOD_A100 = ("NVIDIA DGX SuperPOD with DGX A100 reference architecture (RA-09950-001): scalable units of 20 "
                      "nodes, one HDR leaf (QM8790, 20 ports down, 20 up) per rail, non-blocking fat tree")
SRC_SUPERPOD_H100 = ("NVIDIA DGX SuperPOD with DGX H100 reference architecture (RA-11333-001; docs.nvidia.com/dgx-superpod/"
                      "reference-architecture-scalable-infrastructure-h100, Network Fabrics): SUs of 32 nodes rail-aligned, "
                      "'traffic between nodes, or between rails, traverses the spine layer'; 4 SUs: 32 leaves, 16 spines, "
                      "1,020 node and 1,024 leaf-spine cables (non-blocking)")
SRC_SWITCH_HOP = ("NVIDIA Quantum HDR switch (QM8700/QM8790) datasheet: 130 ns port-to-port; with up to ~30 m of fibre "
                   "(5 ns/m) ccsynth charges 0.3 us per extra switch hop (leaf-spine-leaf: +0.6 us)")
SRC_TACCL = ("TACCL (Shah et al., NSDI'23), taccl/examples/topo/topo-ndv2-1MB.json: alpha 0.3 us NVLink, "
              "2.6 us InfiniBand")
SRC_ALPHA = ("ccsynth: 0.7 us per NVLink/NVSwitch hop (TACCL's 0.3 us link latency plus kernel per-hop cost, "
              "cf. NCCL tuning model ~0.5 us/NVLink hop for LL)")
SRC_OVERHEAD = ("NCCL src/graph/tuning.cc hwLat, Ring/Simple (NCCL >= 2.18): 3.4 us per NVLink hop, 14.0 us per network "
                 "hop; ccsynth: hop = alpha + 2 x overhead, so 1.35 us (NVLink) and 5.7 us (InfiniBand) per message end")

