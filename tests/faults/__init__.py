"""The fault matrix (issue 7), end to end: see tests/faults/README in this docstring below."""
