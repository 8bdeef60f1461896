"""Differential-test models for fastlower.

Every *factory* (``ModelCase.build``) builds a FRESH model, export and Edge
program on every call: the reference ``to_backend`` mutates its input (e.g. it
adds duplicated constants to the input program's shared ``constants`` dict and
deletes lowered ones), so each implementation under comparison must get its
own program.  Partitioners are also created fresh.

Which demo backends execute in ``executorch.runtime`` (pip wheel 1.5.1)?
``Runtime.get().backend_registry.registered_backend_names`` is
``['QnnBackend', 'OpenvinoBackend', 'XnnpackBackend']``: only XNNPACK of the
backends used here.  Loading a program that delegates to
``BackendWithCompilerDemo`` (or any other demo backend shipped in
``executorch/exir/backend/test``) fails with ``RuntimeError: Failed to load
method forward, error: 0x:20`` ("Backend BackendWithCompilerDemo is not
registered").  So runtime numerics are checked only for the XNNPACK cases
(``ModelCase.runtime``).  For every case the lowered program is additionally
executed *eagerly* (``ExportedProgram.module()``; ``executorch_call_delegate``
runs the delegate's ``original_module`` on CPU), which checks numerics of the
graph surgery even for non-runnable demo backends.

Control flow with a *runtime* check: ``XnnpackControlFlowPartitioner`` tags
add/sub/mul/mm nodes at top level and inside ``torch.cond`` branches /
``torch.map`` bodies for ``XnnpackBackend``; the resulting programs (delegates
inside the branch submodules) load and run in the pip runtime.

Error cases (``ERROR_CASES``) record the exact exception the reference raises
(``ErrorCase.expected_type`` / ``expected_message``, a regex matched after
``0x…`` addresses are replaced by ``0xADDR``).  Reference 1.5.1, all three
program paths unless noted:

=======================  ===================  =====================================
case                     type                 message
=======================  ===================  =====================================
tagged_output            RuntimeError         output node output should not be tagged
tagged_user_input        RuntimeError         placeholder node for non-params,
                                              non-buffer, and non-tensor constants
                                              should not be tagged: x ␠(trailing space)
no_copy_shared_constant  RuntimeError         constant data node (b_k) is tagged
                                              with (tag0) but has user
                                              (aten_add_tensor_1) which has tag (tag1)
mutates_graph            AssertionError       The partitioner <…_FnPartitioner object
                                              at 0x…> should not modify the graph module
partition_tags_none      AssertionError       Partitioner <… object at 0x…> needs a
                                              `partition_tags` field containing a
                                              mapping of tags to delegate spec
unknown_backend          NotImplementedError  Backend NoSuchBackend was not found.
cycle                    AssertionError       Invalid partition, found dependency
                                              cycles  (torch.fx fuser_utils)
list_arg_const           RuntimeError         path dependent, see build_list_arg_const
=======================  ===================  =====================================

A tag used on nodes but missing from ``partition_tags`` is NOT an error: those
nodes are silently left undelegated (``ModelCase('missing_tag')``).  A tag in
``partition_tags`` with no nodes is skipped.

The package, by what the models exercise (import from the module that defines a name):

* ``base``: ``Built``, ``ModelCase``, ``ErrorCase``, ``_single``; importing any module
  registers the demo backends;
* ``partitioners``: generic partitioners (``TargetsPartitioner``, ``_FnPartitioner``...);
* ``basic``, ``control_flow``, ``multimethod``, ``constants``, ``chains``: models that lower;
* ``tagging``: hand-tagged programs, rules broken one at a time, partitioner edits;
* ``orders``: two broken rules, the one the reference meets first;
* ``registry``: ``MODEL_CASES``, ``ERROR_CASES``, ``SEED_DEPENDENT_ERROR_CASES``.
"""
