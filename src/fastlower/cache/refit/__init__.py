"""A new checkpoint of a lowered structure: a stored lowering re-made for new weights.

:mod:`.checkpoint` finds the earlier checkpoint's entry through its structure record and
runs the refit; :mod:`.provenance` says where each tensor of the programs came from and
refuses what cannot follow the new weights; :mod:`.programs` rewrites the programs and
re-makes each changed delegate by a template proven on the stored one.
"""
