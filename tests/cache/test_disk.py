"""The caches' diskcache disk: byte values are written in one piece and read back whole."""

from __future__ import annotations

import diskcache

from fastlower.cache.trust.disk import BytesOnlyDisk


def test_a_large_value_of_many_lines_is_one_write_and_reads_back(tmp_path, monkeypatch):
    value = b"weights\n" * 200_000 + b"\x00\xff" * 1000  # 1.6 MB, 200,000 "lines"
    chunks = []
    real_write = BytesOnlyDisk._write

    def counting_write(self, full_path, iterator, mode, encoding=None):
        items = list(iterator)
        chunks.append(len(items))
        return real_write(self, full_path, iter(items), mode, encoding)

    monkeypatch.setattr(BytesOnlyDisk, "_write", counting_write)
    with diskcache.Cache(str(tmp_path), disk=BytesOnlyDisk) as cache:
        cache.set("k", value)
        cache.set("small", b"a\nb")  # below diskcache's file size: in the database
        assert chunks == [1]
        assert cache.get("k") == value
        assert cache.get("small") == b"a\nb"
        with cache.get("k", read=True) as stream:
            assert stream.read() == value
