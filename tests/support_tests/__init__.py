"""Tests of the in-repo fake API server (tests/support) with the real client and kubectl."""
