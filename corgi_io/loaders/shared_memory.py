"""A DataLoader worker's batch memory in shared memory, reused once the main process is done with it.

A batch that crosses from a worker to the trainer through torch's queues travels as a handle to
shared memory.  Fresh shared memory costs the worker a page fault per 4 KiB: for a batch of 64
decoded 224x224 images (9.6 MB), 6.4 ms of the worker's time, about a seventh of the batch's decode
on bench/image_decode.py's ImageNet-like set.  So each worker keeps its buffers (`SharedBuffers`) and
takes one again once the main process has *released* it, which the main process says through the
buffer's last byte, the released flag (0 while in use, 1 once released):

- raw bytes (`fast_batches.SharedPackedBytes`): released once the receiver has copied them out;
- a tensor that is a view of a pooled buffer (`SharedBuffers.lease`, an `ImageDecoder`'s batch):
  released when the last tensor or array the trainer holds on it is gone.  The receiver's tensor is
  made over a numpy view of the buffer (`_received_lease`), and that view's finalizer sets the flag,
  so holding a batch, a row of it or its `.numpy()` for as long as one likes keeps it from reuse.

A batch that never reaches its receiver (the loader shut down with it queued) is never released:
the pool keeps the `KEEP` most recent buffers and lets older ones go.
"""
from __future__ import annotations

import math
import os
import sys
import weakref

import torch

from corgi_io.reading.buffers import GRAIN


class SharedBuffers:
    """A worker's buffers in shared memory: uint8 tensors of whole MiB plus one byte, the released flag.

    A buffer is taken again only when its flag is set and nothing in this process refers to it any more;
    the pool keeps the `KEEP` most recent (a batch never received stays out of use).  Its buffers are its process's
    own: a process forked from it starts with none (`_own`).
    """

    KEEP = 8

    def __init__(self):
        self.buffers = []  # whole tensors: capacity bytes, then the released flag
        self.pid = os.getpid()  # the process the buffers belong to

    def take(self, nbytes: int) -> tuple:
        """(a buffer holding at least `nbytes` and its flag, a writable view of its first `nbytes`)."""
        self._own()
        whole = self._released(nbytes)
        if whole is None:
            capacity = max(1, -(-nbytes // GRAIN)) * GRAIN
            whole = torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage._new_shared(capacity + 1))
            self.buffers = self.buffers[-(self.KEEP - 1):] + [whole]
        array = whole.numpy()
        array[-1] = 0  # sent, not yet released
        return whole, memoryview(array)[:nbytes]

    def tensor(self, shape: tuple) -> torch.Tensor:
        """An uninitialised uint8 tensor of `shape` over a buffer of the pool (see `lease`)."""
        nbytes = math.prod(shape)
        whole, _ = self.take(nbytes)
        return whole[:nbytes].view(shape)

    def lease(self, tensor: torch.Tensor):
        """What crosses to the receiver instead of `tensor`, a view of one of this pool's buffers: a `Lease`,
        which the receiver releases when it drops the tensor; None for any other tensor."""
        self._own()
        pointer = tensor.untyped_storage().data_ptr()
        whole = next((whole for whole in self.buffers if whole.data_ptr() == pointer), None)
        return None if whole is None else Lease(whole, tensor.storage_offset(), tensor.shape, tensor.stride(),
                                                tensor.dtype)

    def _own(self) -> None:
        """In a process forked from the pool's, forget the buffers inherited: they are shared memory, so every worker
        forked from one parent would see the same buffer released, take it, and write its batch over another's."""
        if self.pid != os.getpid():
            self.buffers, self.pid = [], os.getpid()

    def _released(self, nbytes: int):
        """A pooled buffer of more than `nbytes` whose receiver released it and that nothing here refers to any more
        (the pool's list and getrefcount's argument are its only references), or None."""
        buffers = self.buffers
        for i in range(len(buffers)):
            if len(buffers[i]) > nbytes and sys.getrefcount(buffers[i]) == 2 and buffers[i][-1]:
                return buffers[i]
        return None


class Lease:
    """A view (offset, shape, stride, all in elements of `dtype`) of a pooled buffer, as it crosses to the main
    process (`_received_lease`)."""

    __slots__ = ("whole", "offset", "shape", "stride", "dtype")

    def __init__(self, whole: torch.Tensor, offset: int, shape, stride, dtype=torch.uint8):
        self.whole, self.offset, self.shape, self.stride, self.dtype = whole, offset, tuple(shape), tuple(stride), dtype

    def __reduce__(self):
        return _received_lease, (self.whole, self.offset, self.shape, self.stride, self.dtype)


def _received_lease(whole: torch.Tensor, offset: int, shape: tuple, stride: tuple,
                    dtype: torch.dtype = torch.uint8) -> torch.Tensor:
    """The receiving side of a `Lease`: the view as a tensor over a numpy view of the buffer, whose finalizer sets
    the released flag once no tensor or array made from it is left."""
    payload = _PAYLOADS.get(whole.data_ptr())  # one view per buffer: two leases of it (two views of one batch, such as
    if payload is None:  # its images and a permute of them) release it only once neither is held
        array = whole.numpy()
        payload = _PAYLOADS[whole.data_ptr()] = array[:-1]
        weakref.finalize(payload, _release, array[-1:])
    return torch.from_numpy(payload).view(dtype).as_strided(shape, stride, offset)  # a capacity of whole MiB: any dtype


_PAYLOADS = weakref.WeakValueDictionary()  # buffer address -> the numpy view that leased tensors over it are made on,
# while one is held (the mapping, and so its address, lives as long as that view)


def _release(flag) -> None:
    flag[0] = 1


WORKER_BUFFERS = SharedBuffers()  # one per process: a forked worker starts with none, even where its parent took some
# (a test gathering a batch in the main process, say)
