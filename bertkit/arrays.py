"""Streaming, durable writers of embedding arrays: a .npy of a shape known up front, appended chunk by chunk, or
Parquet row groups (file, line, [id,] embedding); each fsynced once when complete, for the caller to rename into
place (`embed` stages them beside the target).

The .npy files are written with ordinary writes, not a memory map: a map of a sparse file dies of SIGBUS when the
disk fills (nothing printed, the temporary left behind), where a write fails with ENOSPC.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from bertkit.run.files import fsync_file
from bertkit.text.corpus import Record


class NpyWriter:
    """A .npy array of a known shape written front to back with ordinary (buffered) writes, fsynced once at the
    end: a full disk fails a write with ENOSPC instead of killing the process later (see the module docstring)."""

    def __init__(self, path: Path, dtype: type, shape: tuple[int, ...]):
        self.dtype = np.dtype(dtype).newbyteorder("<")
        self.file = path.open("wb")
        np.lib.format.write_array_header_1_0(self.file, {"descr": np.lib.format.dtype_to_descr(self.dtype),
                                                         "fortran_order": False, "shape": shape})

    def write(self, rows: np.ndarray) -> None:
        """Append rows (C order) to the array."""
        self.file.write(np.ascontiguousarray(rows, dtype=self.dtype).data)

    def close(self) -> None:
        """Flush and fsync (the caller renames the file into place)."""
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()

    def abandon(self) -> None:
        """Close after a failure (the caller deletes the file); a full disk may fail the last flush too."""
        try:
            self.file.close()
        except OSError:
            pass


class EmbeddingWriter:
    """Chunks of embeddings into a .npy (size known up front) or Parquet row groups."""

    def __init__(self, path: Path, suffix: str, rows: int, dims: tuple[int, ...], with_ids: bool):
        self.path, self.suffix, self.rows, self.position = path, suffix, rows, 0
        dim = dims[-1]
        if suffix == ".npy":
            self.array = NpyWriter(path, np.float32, (rows, *dims))
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            fields = [("id", pa.string())] if with_ids else []
            fields += [("file", pa.string()), ("line", pa.int64()), ("embedding", pa.list_(pa.float32(), dim))]
            self.schema = pa.schema(fields)
            self.with_ids = with_ids
            self.writer = pq.ParquetWriter(path, self.schema)

    def write(self, vectors: np.ndarray, chunk: list[tuple[int, Path, Record]]) -> None:
        if self.position + len(vectors) > self.rows:  # more texts than counted: the caller checks `position`
            self.position += len(vectors)
            return
        if self.suffix == ".npy":
            self.array.write(vectors)
        else:
            import pyarrow as pa

            columns = [pa.array([r.id for _, _, r in chunk], pa.string())] if self.with_ids else []
            columns += [pa.array([str(p) for _, p, _ in chunk], pa.string()),
                        pa.array([r.number for _, _, r in chunk], pa.int64()),
                        pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1), pa.float32()),
                                                          vectors.shape[1])]
            self.writer.write_table(pa.Table.from_arrays(columns, schema=self.schema))
        self.position += len(vectors)

    def close(self) -> None:
        """Finish the file and fsync it."""
        if self.suffix == ".npy":
            self.array.close()
        else:
            self.writer.close()
            fsync_file(self.path)

    def abandon(self) -> None:
        """Close after a failure (the caller deletes the file)."""
        if self.suffix == ".npy":
            self.array.abandon()
        else:
            try:
                self.writer.close()
            except OSError:
                pass
