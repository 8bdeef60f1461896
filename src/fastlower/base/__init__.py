"""Plain data and per-thread switches every layer shares; imports no other layer."""
