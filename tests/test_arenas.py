"""Byte ranges read into page-aligned arenas (``models/arenas.py``): the bytes of the file, direct or through the
cache, the tensors views; an arena is read into again only when nothing views it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from infoeval.errors import ModelLoadError
from infoeval.models import arenas
from infoeval.models.arenas import ALIGN, Arenas, past_the_cache, read_range, runs
from infoeval.models.files import SafetensorsTensor
from infoeval.models.skeleton import _view


@pytest.fixture
def data(tmp_path):
    raw = np.random.default_rng(0).integers(0, 256, 5 * ALIGN + 123, dtype=np.uint8).tobytes()
    (tmp_path / "f.bin").write_bytes(raw)
    return tmp_path / "f.bin", raw


@pytest.mark.parametrize("direct", [True, False])
@pytest.mark.parametrize("span", [(0, 1), (1, ALIGN + 7), (ALIGN, 2 * ALIGN), (3 * ALIGN - 5, 5 * ALIGN + 123)])
def test_a_range_reads_the_files_bytes_direct_or_not(data, direct, span):
    path, raw = data
    got = read_range(path, *span, direct=direct)
    assert bytes(got.numpy()) == raw[span[0] : span[1]]
    assert (got.data_ptr() - got.storage_offset()) % ALIGN == 0  # the arena is page-aligned


def test_a_direct_read_the_system_refuses_goes_through_the_cache(data, monkeypatch):
    path, raw = data
    real, refused = arenas.os.preadv, []

    def refuses_direct(fd, buffers, offset):
        if getattr(arenas.os, "O_DIRECT", 0) & _flags(fd):
            refused.append(offset)
            raise OSError(arenas.errno.EINVAL, "Invalid argument")
        return real(fd, buffers, offset)

    monkeypatch.setattr(arenas.os, "preadv", refuses_direct)
    assert bytes(read_range(path, 5, 3 * ALIGN + 1).numpy()) == raw[5 : 3 * ALIGN + 1]
    assert refused == [0] or not hasattr(arenas.os, "O_DIRECT")  # tried once, then through the cache


def _flags(fd):
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_GETFL)


def test_a_file_that_ends_inside_the_range_is_one_clear_error(data):
    path, raw = data
    with pytest.raises(ModelLoadError, match="ends inside a tensor"):
        read_range(path, len(raw) - 10, len(raw) + 10)


def test_an_arena_is_handed_out_again_only_when_nothing_views_it():
    pool = Arenas()
    a = pool.take(100)
    view = a[10:20]
    del a
    b = pool.take(100)  # the first is still viewed: a new one
    assert pool.made == 2 and b.data_ptr() != view.data_ptr() - 10
    del view, b
    assert pool.take(ALIGN) is not None and pool.made == 2  # both free: the smallest that holds it
    assert pool.take(10 * ALIGN).numel() >= 10 * ALIGN and pool.made == 3  # none large enough: a new one
    pool.clear()
    assert not pool._all


def test_close_spans_are_read_as_one_range_and_far_ones_apart():
    assert runs([(50, 60), (0, 10), (10, 20)], gap=0) == [(0, 20), (50, 60)]
    assert runs([(50, 60), (0, 10), (10, 20)], gap=30) == [(0, 60)]
    assert runs([(0, 100), (10, 20)], gap=0) == [(0, 100)]  # one inside another


def test_a_tensor_is_a_view_of_its_range_and_a_copy_where_unaligned(tmp_path):
    values = torch.arange(12, dtype=torch.float32)
    for pad, shared in ((4, True), (3, False)):  # at a file offset its element size divides, or not
        path = tmp_path / f"t{pad}.bin"
        path.write_bytes(b"x" * pad + values.numpy().tobytes())
        chunk = read_range(path, 1, pad + 48)
        t = _view(chunk, pad - 1, SafetensorsTensor(path, pad, 48, torch.float32, (3, 4)))
        assert torch.equal(t, values.view(3, 4))
        assert (t.untyped_storage().data_ptr() == chunk.untyped_storage().data_ptr()) is shared
    assert _view(chunk, 0, SafetensorsTensor(path, 1, 0, torch.float32, (0,))).shape == (0,)  # empty


def test_only_files_larger_than_the_memory_available_are_read_past_the_cache(monkeypatch):
    monkeypatch.setattr(arenas, "host_available", lambda: 10 * ALIGN)
    assert past_the_cache(10 * ALIGN + 1) and not past_the_cache(10 * ALIGN)
