"""Fixtures shared by the device-plugin tests: a kubelet stand-in in a socket directory
(``socket_dir``, tests/conftest.py)."""

from __future__ import annotations

import pytest

from tests.deviceplugin.kubelet_standin import KubeletStandIn


@pytest.fixture
def kubelet(socket_dir):
    standin = KubeletStandIn(socket_dir).start()
    yield standin
    standin.stop()
