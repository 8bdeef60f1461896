"""Apply a plan: build each partition's program, then the final graph, in one pass.

:mod:`.partition` builds the partition programs the backends preprocess;
:mod:`.graph` (:class:`GraphBuilder`, one per planned graph module) holds the
meta of the nodes the plan created and builds the final graph.
"""

from .graph import GraphBuilder
from .partition import Partition, SignatureIndex, build_partition

__all__ = ["GraphBuilder", "Partition", "SignatureIndex", "build_partition"]
