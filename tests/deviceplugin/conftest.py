"""Fixtures shared by the device-plugin tests: a socket directory and a kubelet stand-in in it."""

from __future__ import annotations

import shutil
import tempfile

import pytest

from tests.deviceplugin.kubelet_standin import KubeletStandIn


@pytest.fixture
def socket_dir():
    path = tempfile.mkdtemp(prefix="dp-", dir="/tmp")  # unix socket paths must stay under 108 bytes
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def kubelet(socket_dir):
    standin = KubeletStandIn(socket_dir).start()
    yield standin
    standin.stop()
