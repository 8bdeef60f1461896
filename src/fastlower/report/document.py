"""``LoweringReport``: the report's data (``model.ReportData``) and its renderings.

The data is plain (``model`` imports no writer); this class, one layer up, adds the
two conveniences that need a writer: ``summary()`` (``text``) and ``to_dict()``
(``json``). Everything that makes a report makes this class.
"""

from __future__ import annotations

from . import json as _json
from . import text as _text
from .model import ReportData


class LoweringReport(ReportData):
    """What one lowering delegated, what it left out, and where the time went.

    The first fields are the original report's (``partitions`` is a count per
    backend); the ``*_records``, ``operators``, ``not_delegated`` and ``nodes``
    fields are the full picture (see ``fastlower.report``).
    """

    def summary(self) -> str:
        """Tables for a log or a terminal (see ``fastlower.report.text``)."""
        return _text.summary(self)

    def to_dict(self) -> dict:
        """The JSON document (see ``fastlower.report.json`` for the schema)."""
        return _json.to_dict(self)
