"""How lowering-cache entries are told apart from preprocess entries in the shared folder.

Lowering entries have keys ``PREFIX + <hex>`` and diskcache's tag ``TAG``; preprocess
keys are bare hex digests without a tag. Kept apart from :mod:`.store` so that
``fastlower cache info`` can count entries without importing torch.
"""

TAG = "lowering"
PREFIX = "lowering:"
