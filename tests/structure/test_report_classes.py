"""What the report says about structural classes: the text line, the JSON field and its
schema, summed over a lowering's preprocess batches."""

from __future__ import annotations

import json

import jsonschema
import pytest

from fastlower.report import json as report_json
from tests.report.test_report_content import _lower
from tests.report.toy import add_mul_partitioner, add_mul_sin_program


def test_classes_in_the_text_and_the_json_document():
    _, report = _lower(add_mul_sin_program(), add_mul_partitioner())
    assert "structure:" not in report.summary()  # no class formed: no line, no field
    assert "preprocess_classes" not in json.loads(report_json.dumps(report))
    report.record_classes({"classes": 2, "derived": 5, "verified": 2, "fallbacks": []})
    report.record_classes({"classes": 1, "derived": 0, "verified": 0,
                           "fallbacks": [{"tag": "tag9", "why": "a reason"}]})
    assert report.classes_line() == ("structure: 3 classes, 5 partitions derived, 2 verified, "
                                     "1 preprocessed instead (a reason)")
    doc = json.loads(report_json.dumps(report))
    jsonschema.validate(doc, report_json.schema())
    assert doc["preprocess_classes"]["fallbacks"] == [{"tag": "tag9", "why": "a reason"}]
    doc["preprocess_classes"]["derived"] = -1  # the schema catches a broken field
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, report_json.schema())
