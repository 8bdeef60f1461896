"""What fastlower changes in ExecuTorch's process while it lowers, each change scoped,
listed and removable (docs/embedding.md, "What fastlower changes in your process").

``while_lowering.lowering_step`` is the one block each lowering step enters: the heap
frozen for the collector (``heap_freeze``), shared ``from_node`` histories
(``node_history``), fake outputs known without a run (``fake_outputs``), XNNPACK's
patterns not built where they cannot match (``xnnpack_patterns``), the memos of
torch's own work (``retrace_quant_ops``, ``cia_ops``, ``sym_arith``, ``graph_code``), all
over ``scoped_patch``. Also here: stack room for deep graphs (``stack_room``), ExecuTorch's
entry points routed to fastlower (``dispatch``, named by ``fastlower.patch``), the edge
stage with its no-op retraces skipped (``edge``), and torchao's HQQ quantization of the
weights before the export, computed natively with torchao's bits (``hqq``).
"""
