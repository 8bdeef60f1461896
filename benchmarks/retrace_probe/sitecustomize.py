"""A measuring probe, not part of fastlower: what each ``run_decompositions`` retrace of a
process changes, and what skipping some of them would change.

Put this folder first on ``PYTHONPATH`` of the process to probe (``export_llm`` under
``benchmarks/production_size_run.py``, whose child processes inherit the environment):

* ``RETRACE_PROBE=FOLDER``: per retrace, one line in ``FOLDER/retraces-PID.txt``: the
  table's size, the nodes before and after, whether the operators and their order are
  the same, how many nodes were renamed (with the first three), how many ``val`` metadata
  differ (as text), whether the range constraints are the same, and the shape
  environment's counters before and after (unbacked symbols made, ``var_to_range``,
  replacements, deferred runtime asserts, guards, unbacked renamings); and, per
  ``_generate_edge_program``, the nodes whose ``val`` holds unbacked symbols and the
  range constraints, in ``FOLDER/edge-PID.txt``, and all of its canonical lines
  (``fastlower.cache.compare.describe``: nodes, metadata but ``from_node`` and ``seq_nr``,
  signature, ranges...) in ``FOLDER/describe-PID.txt``.
* ``RETRACE_PROBE_SKIP=3,6``: the process's 3rd and 6th ``run_decompositions`` calls
  return their input unchanged (an experiment: what the retrace's result is worth).
* ``RETRACE_PROBE_DELTA=1`` (with ``RETRACE_PROBE``): per retrace, every field of the
  shape environment it changed (``fastlower.in_process.shape_env_state``) and the
  entries it added or changed, in ``FOLDER/delta-PID.txt``: what a skip would have to
  replay.
* ``RETRACE_PROBE_CREATED=1`` (with ``RETRACE_PROBE``): per retrace, the nodes its trace
  created that its result does not hold (dropped again: their names are spent), by
  operator, in ``FOLDER/created-PID.txt``.
* ``RETRACE_PROBE_NO_REPEATS=1``: fastlower's edge stage takes no retrace for a repeat of
  an earlier one (``fastlower.in_process.edge.repeated_retrace``): what that skip saves.
* ``RETRACE_PROBE_BLOCKS=1`` (with ``RETRACE_PROBE``): per retrace, every node of its
  input and of its result as ``name<TAB>target<TAB>layer<TAB>unbacked symbols of its
  val`` (the layer: the ``layers.N`` of its ``nn_module_stack``, ``-`` outside a layer),
  in ``FOLDER/blocks-CALL-{in,out}-PID.txt``: whether a retrace names and numbers each
  block's nodes as it does the block before (``benchmarks/retrace_probe/blocks.py``).
"""

import os

if os.environ.get("RETRACE_PROBE_NO_REPEATS"):
    from fastlower.in_process.edge import repeated_retrace

    repeated_retrace.RetraceMemory.repeat_of = lambda self, program, table: None

if os.environ.get("RETRACE_PROBE") or os.environ.get("RETRACE_PROBE_SKIP"):
    import torch
    from torch.export import ExportedProgram

    _RUN = ExportedProgram.run_decompositions
    _SKIP = {int(x) for x in os.environ.get("RETRACE_PROBE_SKIP", "").split(",") if x}
    _FOLDER = os.environ.get("RETRACE_PROBE")
    _CALLS = [0]

    def _write(name, text):
        if _FOLDER:
            with open(os.path.join(_FOLDER, f"{name}-{os.getpid()}.txt"), "a") as f:
                f.write(text + "\n")

    def _nodes(program):
        return [(n.op, str(n.target), n.name) for n in program.graph_module.graph.nodes]

    def _vals(program):
        return [str(n.meta.get("val")) for n in program.graph_module.graph.nodes]

    def _shape_env(program):
        env = _env_of(program)
        if env is None:
            return None
        return dict(unbacked=env.unbacked_symint_counter, ranges=len(env.var_to_range),
                    replacements=len(env.replacements),
                    runtime_asserts=sum(map(len, env.deferred_runtime_asserts.values())),
                    guards=len(env.guards), renamings=len(env.unbacked_renamings))

    def _constraints(program):
        return {str(k): str(v) for k, v in program.range_constraints.items()}

    def _described(program, table, out, env_before):
        before, after = _nodes(program), _nodes(out)
        same = [x[:2] for x in before] == [x[:2] for x in after]
        renamed = [(x[2], y[2]) for x, y in zip(before, after) if x[2] != y[2]] if same else []
        vals = sum(x != y for x, y in zip(_vals(program), _vals(out))) if same else "-"
        return (f"call {_CALLS[0]} table {len(table or {})} nodes {len(before)}->{len(after)} "
                f"same_ops {same} renamed {len(renamed) if same else '-'} {renamed[:3]} "
                f"val_differences {vals} range_constraints_same "
                f"{_constraints(program) == _constraints(out)} shape_env {env_before} "
                f"-> {_shape_env(out)}")

    def run_decompositions(self, decomp_table=None, *args, **kwargs):
        _CALLS[0] += 1
        if _CALLS[0] in _SKIP:
            _write("retraces", f"call {_CALLS[0]} skipped")
            return self
        if not _FOLDER:
            return _RUN(self, decomp_table, *args, **kwargs)
        created = _created_names() if os.environ.get("RETRACE_PROBE_CREATED") else None
        env_before = _shape_env(self)  # the same object as the result's: read it first
        env = _env_of(self) if os.environ.get("RETRACE_PROBE_DELTA") else None
        state = _state(env) if env is not None else None
        out = _RUN(self, decomp_table, *args, **kwargs)
        _write("retraces", _described(self, decomp_table, out, env_before))
        if os.environ.get("RETRACE_PROBE_BLOCKS"):
            _write(f"blocks-{_CALLS[0]}-in", _block_lines(self))
            _write(f"blocks-{_CALLS[0]}-out", _block_lines(out))
        if created is not None:
            _write("created", _dropped(created, out))
        if env is not None:
            _write("delta", f"call {_CALLS[0]} table {len(decomp_table or {})}\n"
                   + _delta(state, _state(env)))
        return out

    def _layer(node):
        import re

        for path, _ in (node.meta.get("nn_module_stack") or {}).values():
            found = re.search(r"layers[._\[]+(\d+)", str(path))
            if found:
                return found.group(1)
        return "-"

    def _block_lines(program):
        from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

        lines = []
        for n in program.graph_module.graph.nodes:
            val = n.meta.get("val")
            try:
                unbacked = sorted(map(str, free_unbacked_symbols(val)))
            except Exception:
                unbacked = []
            lines.append(f"{n.name}\t{n.target}\t{_layer(n)}\t{','.join(unbacked)}")
        return "\n".join(lines)

    _CREATED = []  # per open retrace: the (name, target) of every node created meanwhile
    _CREATE_NODE = torch.fx.Graph.create_node

    def _create_node(graph, *args, **kwargs):
        node = _CREATE_NODE(graph, *args, **kwargs)
        if _CREATED and node.op == "call_function":
            _CREATED[-1].append((node.name, str(node.target)))
        return node

    if os.environ.get("RETRACE_PROBE_CREATED"):
        torch.fx.Graph.create_node = _create_node

    def _created_names():
        _CREATED.append([])
        return _CREATED[-1]

    def _dropped(created, out):
        _CREATED.remove(created)
        kept = {n.name for n in out.graph_module.graph.nodes}
        dropped = [(name, target) for name, target in created if name not in kept]
        by_target = {}
        for _, target in dropped:
            by_target[target] = by_target.get(target, 0) + 1
        return (f"call {_CALLS[0]} created {len(created)} dropped {len(dropped)} "
                f"{sorted(by_target.items(), key=lambda x: -x[1])[:8]} first {dropped[:4]}")

    def _env_of(program):
        for n in program.graph_module.graph.nodes:
            env = getattr(getattr(n.meta.get("val"), "fake_mode", None), "shape_env", None)
            if env is not None:
                return env
        return None

    def _state(env):
        from fastlower.in_process.shape_env_state import shape_env_state

        return shape_env_state(env)

    def _delta(before, after):
        lines = []
        for name in sorted(set(before) | set(after)):
            old, new = before.get(name), after.get(name)
            if old == new:
                continue
            if isinstance(old, dict) and isinstance(new, dict):
                added = {k: v for k, v in new.items() if k not in old}
                changed = {k: (old[k], v) for k, v in new.items() if k in old and old[k] != v}
                gone = [k for k in old if k not in new]
                lines.append(f"  {name}: +{len(added)} changed {len(changed)} gone {len(gone)}")
                lines += [f"    + {k!s}: {v!s}"[:300] for k, v in list(added.items())[:12]]
                lines += [f"    ~ {k!s}: {a!s} -> {b!s}"[:300] for k, (a, b) in
                          list(changed.items())[:12]]
            elif isinstance(old, (tuple, frozenset)) and isinstance(new, (tuple, frozenset)):
                extra = [x for x in new if x not in set(old)]
                shown = [str(x) for x in extra[:12]]
                lines.append(f"  {name}: {len(old)} -> {len(new)}; new {shown}"[:600])
            else:
                lines.append(f"  {name}: {str(old)[:120]} -> {str(new)[:120]}")
        return "\n".join(lines) or "  unchanged"

    ExportedProgram.run_decompositions = run_decompositions

    if _FOLDER:
        import executorch.exir.program._program as _program

        _GENERATE = _program._generate_edge_program

        def _generate_edge_program(*args, **kwargs):
            from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

            out = _GENERATE(*args, **kwargs)
            lines = [f"program of {len(out.graph_module.graph.nodes)} nodes"]
            for n in out.graph_module.graph.nodes:
                val = n.meta.get("val")
                if isinstance(val, (torch.SymInt, torch.Tensor)) and free_unbacked_symbols(val):
                    reads = [(a.name, str(a.target)) for a in n.all_input_nodes]
                    lines.append(f"  {n.name} {val} unbacked_bindings "
                                 f"{n.meta.get('unbacked_bindings')} reads {reads}")
            lines.append(f"  range constraints {sorted(_constraints(out).items())}")
            _write("edge", "\n".join(lines))
            from fastlower.cache import compare  # every line but from_node and seq_nr

            _write("describe", "\n".join(f"{where}\t{text}" for where, text in
                                         compare.describe({"forward": out})))
            return out

        _program._generate_edge_program = _generate_edge_program
