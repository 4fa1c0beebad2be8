"""mpi4py + CuPy: device arrays handed straight to MPI.

Without Ferry, a non-CUDA-aware Open MPI crashes on these calls. With it:
    mpirun -np 2 -x LD_PRELOAD=/path/libferry.so python3 examples/mpi4py_cupy.py
"""
import cupy as cp
import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
cp.cuda.Device(rank % cp.cuda.runtime.getDeviceCount()).use()
rng = np.random.default_rng(1234 + rank)
failures = []

# Allreduce on random float64 data, odd length.
n = 1_000_003
mine = rng.integers(-1000, 1000, n).astype(np.float64)
everyone = comm.allgather(mine)  # host reference, pickled through host MPI
send = cp.asarray(mine)
recv = cp.empty_like(send)
comm.Allreduce(send, recv, op=MPI.SUM)
if not np.array_equal(cp.asnumpy(recv), np.sum(everyone, axis=0)):
    failures.append("Allreduce")

# Bcast from the last rank.
data = cp.asarray(rng.random(65_537)) if rank == size - 1 else cp.zeros(65_537)
expected = comm.bcast(cp.asnumpy(data) if rank == size - 1 else None, root=size - 1)
comm.Bcast(data, root=size - 1)
if not np.array_equal(cp.asnumpy(data), expected):
    failures.append("Bcast")

# Alltoallv: rank r sends p + 1 values of 1000 * r + p to rank p.
send_counts = np.arange(1, size + 1, dtype=np.int64)
send_displs = np.concatenate(([0], np.cumsum(send_counts)[:-1]))
recv_counts = np.full(size, rank + 1, dtype=np.int64)
recv_displs = np.concatenate(([0], np.cumsum(recv_counts)[:-1]))
send_host = np.concatenate([np.full(p + 1, 1000 * rank + p, dtype=np.int32) for p in range(size)])
send = cp.asarray(send_host)
recv = cp.zeros(int(recv_counts.sum()), dtype=cp.int32)
comm.Alltoallv([send, (send_counts, send_displs), MPI.INT], [recv, (recv_counts, recv_displs), MPI.INT])
expected = np.concatenate([np.full(rank + 1, 1000 * p + rank, dtype=np.int32) for p in range(size)])
if not np.array_equal(cp.asnumpy(recv), expected):
    failures.append("Alltoallv")

all_failures = comm.gather(failures, root=0)
if rank == 0:
    bad = sorted({f for fs in all_failures for f in fs})
    print("mpi4py+CuPy through Ferry:", "all correct" if not bad else "WRONG: " + ", ".join(bad))
raise SystemExit(1 if failures else 0)
