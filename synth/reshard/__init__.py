"""Cross-mesh resharding (Alpa, MLSys'23): layouts, tasks, plans as Schedules, execution over MPI.

Modules, from data to running code: :mod:`.mesh` (device meshes),
:mod:`.sharding` (Alpa and JAX sharding specs), :mod:`.layout` (tiles and
replicas, uneven shapes), :mod:`.task` (pieces: where source and destination
tiles meet), :mod:`.plan` (hops -> Schedule), :mod:`.delivery` (what every
planner shares), the planners :mod:`.naive`, :mod:`.broadcast`,
:mod:`.milp`, and :mod:`.planner` (the front door).
"""

from ccsynth.synth.reshard.layout import TensorLayout
from ccsynth.synth.reshard.mesh import DeviceMesh
from ccsynth.synth.reshard.planner import PLANNERS, place_meshes, plan_reshard
from ccsynth.synth.reshard.sharding import ShardingSpec, parse_spec
from ccsynth.synth.reshard.task import Piece, ReshardTask

__all__ = ["DeviceMesh", "ShardingSpec", "parse_spec", "TensorLayout", "Piece", "ReshardTask", "PLANNERS",
           "place_meshes", "plan_reshard"]
