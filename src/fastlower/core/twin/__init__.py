"""Pure-Python twins of the C++ planning core (``fastlower._core``).

Each function here has the same signature and result as its C++ counterpart;
tests run both on the same cases.  They are also the fallback when the
extension is not built.
"""
