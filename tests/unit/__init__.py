"""Unit tests of the core steps (encode, plan, apply), one file per module."""
