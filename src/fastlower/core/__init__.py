"""The planner's facade: graphs encoded as flat arrays, one native ``plan_graph`` call per
graph (``fastlower._core``, C++) or its pure-Python twin (``twin``), plain data back.

Modules: ``schema`` (the codes and dataclasses that cross the boundary), ``encode`` (an FX
graph to arrays), ``plan`` (arrays to a plan, and a stop to the user's error), ``loader``
(chooses the core or the twin, once), ``name_rules`` (torch.fx's illegal names, handed to
the core), ``twin`` (the same algorithms in Python: the test oracle).
"""
