"""The run folder's per-pair records as Parquet (``ratings.parquet``), and SQL over them with DuckDB.

A run's rated pairs (one row per response pair, the columns of ``ratings.jsonl`` in earlier
versions) are written in Parquet row groups of :data:`ROW_GROUP` rows as they are handed to
:class:`PairWriter`, to a temporary name renamed at :meth:`PairWriter.close` (a crash leaves
no half file; the answered calls stay in the call cache). Scalar columns are typed
(strings, booleans, int64, float64 — NaN for a missing score); the LMRA's answers
(``order1``, ``order2``, ``judge2_order1``, ``judge2_order2``: OptionProbs objects) and any
other non-scalar column are JSON text, so that pandas and DuckDB read back the same values
that were written (listed in the file's metadata ``lmra.json_columns``).

Run folders of earlier versions hold ``ratings.jsonl``; every reader here falls back to it,
so they stay readable without conversion (``lmra export --format parquet`` is not needed).

Why DuckDB: SQL over Parquet files out of core, reading only the columns a query names, with
a memory limit, in one well-kept in-process engine — aggregation, diagnostics and exports
never hold a million rows of Python objects.
"""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Sequence

import pandas as pd

from lmra.errors import LmraInputError, LmraIOError
from lmra.fileio import process_umask
from lmra.runfolder import json_text, json_value

#: the current per-pair file, and the one written by lmra before issue 15
PARQUET_NAME = "ratings.parquet"
JSONL_NAME = "ratings.jsonl"
#: rows per Parquet row group (≈ 10–20 MB of memory per group while writing)
ROW_GROUP = 50_000
#: DuckDB's memory limit for lmra's queries (it spills to a temporary folder beyond it)
DUCKDB_MEMORY_LIMIT = "1GB"
#: files up to this size are read whole by pyarrow / Python instead (starting DuckDB costs ~0.3 s)
SMALL_FILE_BYTES = 8 * 2**20


def is_small(path: str | Path) -> bool:
    """True when ``path`` is a file small enough to read whole (:data:`SMALL_FILE_BYTES`)."""
    try:
        return Path(path).stat().st_size <= SMALL_FILE_BYTES
    except OSError:
        return True

def pair_flag(value: Any) -> bool:
    """A boolean flag of a pair row (``refused``, ``unlabelled``, ``failed`` …, :data:`_BOOL`) as
    read from ``ratings.parquet`` / ``ratings.jsonl``: True only when set; a missing value (None,
    NaN, ``pd.NA`` — a row or an older run without the column) is False."""
    if value is None or value is pd.NA or (isinstance(value, float) and value != value):
        return False
    return bool(value)


_STRING = ("pair_id", "prompt_id", "domain", "task", "comparison", "group_a", "group_b", "name_a", "name_b",
           "error", "method", "judge2_method", "judge2_error", "criterion")
_BOOL = ("placebo", "refusal_a", "refusal_b", "refused", "unlabelled", "failed", "valid", "judge2_valid")
_INT = ("sample",)
_FLOAT = ("refusal_p_a", "refusal_p_b", "q_F", "q_R", "q_N", "h", "h_min", "h_mean", "h_calibrated",
          "judge2_q_F", "judge2_q_R", "judge2_q_N", "judge2_h", "judge2_h_min", "judge2_h_mean",
          "judge2_h_calibrated")
#: columns holding JSON objects (the LMRA's answers per presentation order)
JSON_COLUMNS = ("order1", "order2", "judge2_order1", "judge2_order2")


def _arrow_type(col: str, s: pd.Series):
    import pyarrow as pa

    if col in _STRING:
        return pa.string()
    if col in _BOOL:
        return pa.bool_()
    if col in _INT:
        return pa.int64()
    if col in _FLOAT:
        return pa.float64()
    if col in JSON_COLUMNS:
        return None
    if pd.api.types.is_bool_dtype(s):
        return pa.bool_()
    if pd.api.types.is_integer_dtype(s):
        return pa.int64()
    if pd.api.types.is_float_dtype(s):
        return pa.float64()
    return None  # anything else is stored as JSON text


def _json_text(v: Any) -> str | None:
    if v is None or (isinstance(v, float) and v != v):
        return None
    return json_text(v)


class PairWriter:
    """Writes per-pair rows to a Parquet file in row groups, atomically.

    Rows are buffered and written every :data:`ROW_GROUP` rows; the file appears under its
    name only at :meth:`close` (until then it is a temporary file next to it, removed by
    :meth:`abort` or when the ``with`` block raises). The schema is fixed by the first rows
    written: known lmra columns get their type, other numeric columns theirs, any other
    column is JSON text.

    Args:
        path: the final file (e.g. ``<run_dir>/ratings.parquet``).
        columns: the column order; default: the columns of the first rows written (later
            rows missing a column get null, extra columns are an error).
        row_group: rows per row group.

    Raises:
        LmraIOError: the file cannot be written (naming ``path``).
    """

    def __init__(self, path: str | Path, columns: Sequence[str] | None = None, row_group: int = ROW_GROUP):
        self.path = Path(path)
        self.columns = list(columns) if columns is not None else None
        self.row_group = row_group
        self.n_rows = 0
        self._buf: list[dict] = []
        self._writer = None
        self._schema = None
        self._json: list[str] = []
        self._tmp: str | None = None
        #: JSON columns whose values are given as their JSON text already (read from a spool
        #: written by this class): written as they are, None or NaN as null
        self.encoded: set[str] = set()

    def __enter__(self) -> "PairWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def write_rows(self, rows: Iterable[dict]) -> None:
        """Add rows (dicts of column → value; NaN or None for a missing value)."""
        for r in rows:
            self._buf.append(r)
            if len(self._buf) >= self.row_group:
                self._flush_rows()

    def write_frame(self, df: pd.DataFrame) -> None:
        """Add the rows of a frame, in row groups of :data:`ROW_GROUP` rows."""
        if self.columns is None:
            self.columns = list(df.columns)
        self._flush_rows()
        for start in range(0, len(df), self.row_group):
            self._write_chunk(df.iloc[start:start + self.row_group])

    def _flush_rows(self) -> None:
        if self._buf:
            chunk = pd.DataFrame(self._buf, columns=self.columns)
            if self.columns is None:
                self.columns = list(chunk.columns)
            self._buf = []
            self._write_chunk(chunk)

    def _open(self, chunk: pd.DataFrame) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        fields = []
        for col in self.columns:
            s = chunk[col] if col in chunk else pd.Series([None] * len(chunk), dtype=object)
            t = _arrow_type(col, s)
            if t is None:
                self._json.append(col)
                t = pa.string()
            fields.append(pa.field(col, t))
        meta = {"lmra.table": "ratings", "lmra.json_columns": json.dumps(self._json)}
        self._schema = pa.schema(fields, metadata=meta)
        try:
            fd, self._tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
            os.close(fd)
            self._writer = pq.ParquetWriter(self._tmp, self._schema, compression="zstd")
        except OSError as exc:
            self.abort()
            raise LmraIOError(f"cannot write this file ({exc.strerror or exc})", path=self.path) from None

    def _write_chunk(self, chunk: pd.DataFrame) -> None:
        import pyarrow as pa

        if chunk.empty and self._writer is not None:
            return
        if self._writer is None:
            self._open(chunk)
        unknown = set(chunk.columns) - set(self.columns)
        if unknown:
            raise ValueError(f"columns not in the file's schema: {sorted(unknown)}")
        arrays = []
        for f in self._schema:
            s = chunk[f.name] if f.name in chunk else pd.Series([None] * len(chunk), index=chunk.index, dtype=object)
            if f.name in self._json and f.name in self.encoded:
                arrays.append(pa.array(s, type=pa.string(), from_pandas=True))
            elif f.name in self._json:
                arrays.append(pa.array([_json_text(v) for v in s], type=pa.string()))
            elif pa.types.is_floating(f.type):
                arrays.append(pa.array(pd.to_numeric(s, errors="coerce").astype(float).to_numpy(), type=f.type))
            else:  # string / bool / int: None and NaN are null
                try:
                    arrays.append(pa.array(s, type=f.type, from_pandas=True))
                except (pa.ArrowInvalid, pa.ArrowTypeError):  # e.g. numbers in a text column
                    conv = str if pa.types.is_string(f.type) else (lambda v: v)
                    arrays.append(pa.array([None if v is None or (isinstance(v, float) and v != v) else conv(v)
                                            for v in s], type=f.type, from_pandas=True))
        try:
            self._writer.write_table(pa.Table.from_arrays(arrays, schema=self._schema))
        except OSError as exc:
            self.abort()
            raise LmraIOError(f"cannot write this file ({exc.strerror or exc})", path=self.path) from None
        self.n_rows += len(chunk)

    def close(self) -> Path:
        """Write the last row group and move the file to its name; returns the path."""
        self._flush_rows()
        if self._writer is None:  # no rows: an empty file with the columns given
            self._write_chunk(pd.DataFrame(columns=self.columns or ["pair_id"]))
        try:
            self._writer.close()
            with open(self._tmp, "rb") as fh:
                os.fsync(fh.fileno())
            os.chmod(self._tmp, 0o666 & ~process_umask())  # the umask's mode, as every other file of the run (s40 break-it:
            # always 0644 — world-readable ratings under umask 077)
            os.replace(self._tmp, self.path)
        except OSError as exc:
            self.abort()
            raise LmraIOError(f"cannot write this file ({exc.strerror or exc})", path=self.path) from None
        self._tmp = None
        return self.path

    def abort(self) -> None:
        """Drop the temporary file (nothing appears under the final name)."""
        if self._writer is not None:
            try:
                self._writer.close()
            except Exception:  # noqa: BLE001 - already failing; the temp file goes anyway
                pass
            self._writer = None
        if self._tmp is not None:
            try:
                os.unlink(self._tmp)
            except OSError:
                pass
            self._tmp = None


def write_pairs(path: str | Path, df: pd.DataFrame) -> Path:
    """Write a frame of per-pair rows to ``path`` (Parquet, see :class:`PairWriter`)."""
    with PairWriter(path, columns=list(df.columns)) as w:
        w.write_frame(df)
    return Path(path)


#: rows per row group of a spool (written while the run's calls wait: a short pause each)
SPOOL_ROW_GROUP = 10_000
#: DuckDB's memory limit when it sorts a spool (it spills to a folder next to the spool beyond it)
SPOOL_SORT_MEMORY = "256MB"


class PairSpool:
    """A run's rated pairs written to a Parquet file as they are rated, in any order, each
    with its position in the run's order (column ``_key``, an int); read back in that order
    with DuckDB (:meth:`sorted_batches`) when the run finishes.

    The file is a :class:`PairWriter` file (JSON text for the LMRA's answers) with a fixed set
    of ``columns``; which columns each row had is kept (:meth:`columns`), so that the run's
    table has the columns, in the order, that a frame of the rows in the run's order has.
    Until :meth:`close` the file is a temporary file next to ``path``; :meth:`abort` (a failed
    or interrupted run) and :meth:`remove` (a finished one) leave nothing behind.

    Args:
        path: the spool file (e.g. ``<run_dir>/.pairs-spool.parquet``).
        columns: every column a row may have (a row with another one is a ``ValueError``).
        row_group: rows per row group.
        extra_columns: float64 columns stored next to the rows' own (not part of the rows'
            table, e.g. numbers read off the rows' answers): their values are given to
            :meth:`add` as a tuple per row.
    """

    def __init__(self, path: str | Path, columns: Sequence[str], row_group: int = SPOOL_ROW_GROUP,
                 extra_columns: Sequence[str] = ()):
        self.path = Path(path)
        self._allowed = frozenset(columns)
        self.extra_columns = list(extra_columns)
        self._writer = PairWriter(self.path, columns=["_key", *columns, *self.extra_columns], row_group=row_group)
        self._row_columns = ["_key", *columns]
        self._rows: list[dict] = []  # rows with extra columns wait here for their row group
        self._extra: list[tuple] = []
        self._first: dict[tuple, int] = {}  # a row's columns (in its order) → the smallest key with them
        self._spill: Path | None = None
        self.n_rows = 0
        self._closed = False

    def add(self, key: int, row: dict, extra: tuple = ()) -> None:
        """Spool one row; ``key`` is its position in the run's order (unique); ``extra``: its
        values of the :attr:`extra_columns` (floats, in their order).

        Raises:
            ValueError: the row has a column not given to the spool.
            LmraIOError: the spool cannot be written.
        """
        sig = tuple(row)
        first = self._first.get(sig)
        if first is None:
            unknown = set(sig) - self._allowed
            if unknown:
                raise ValueError(f"columns not in the spool's schema: {sorted(unknown)}")
            self._first[sig] = key
        elif key < first:
            self._first[sig] = key
        if self.extra_columns:
            self._rows.append({"_key": key, **row})
            self._extra.append(extra)
            if len(self._rows) >= self._writer.row_group:
                self._flush()
        else:
            self._writer.write_rows(({"_key": key, **row},))
        self.n_rows += 1

    def _flush(self) -> None:
        """Write the waiting rows and their extra columns as one row group."""
        import numpy as np

        if not self._rows:
            return
        frame = pd.DataFrame(self._rows, columns=self._row_columns)
        values = np.array(self._extra, dtype=np.float64).reshape(len(self._rows), len(self.extra_columns))
        frame = pd.concat([frame, pd.DataFrame(values, columns=self.extra_columns)], axis=1)
        self._rows, self._extra = [], []
        self._writer.write_frame(frame)

    def columns(self) -> list[str]:
        """The columns of the rows in key order, in order of first appearance (as ``pd.DataFrame(rows)``)."""
        out: dict[str, None] = {}
        for sig in sorted(self._first, key=self._first.__getitem__):
            out |= dict.fromkeys(sig)
        return list(out)

    def close(self) -> Path:
        """Write the last row group and give the file its name (once; again it does nothing)."""
        if not self._closed:
            self._flush()
            self._writer.close()
            self._closed = True
        return self.path

    def frame(self) -> pd.DataFrame:
        """All the rows in key order as one frame (the LMRA's answers decoded; closes the spool)."""
        import pyarrow as pa

        self.close()
        columns = self.columns()
        if not self.n_rows:
            return pd.DataFrame(columns=columns)
        df = pa.Table.from_batches(list(self.sorted_batches(columns, ROW_GROUP))).to_pandas()
        for col in self.json_columns:
            if col in df:
                df[col] = [json_value(v) if isinstance(v, str) else None for v in df[col]]
        return df[columns]

    @property
    def json_columns(self) -> list[str]:
        """The columns stored as JSON text (known once the first row group is written)."""
        return list(self._writer._json)

    def sorted_batches(self, columns: Sequence[str], batch_size: int):
        """The closed spool's rows in key order as pyarrow record batches of ``columns`` (up to
        ``batch_size`` rows each), streamed from DuckDB's sort (out of core under
        :data:`SPOOL_SORT_MEMORY`, spilling to a folder next to the spool) without writing a
        sorted copy of the spool (a million pairs: 3.6 s, where writing a sorted copy with
        DuckDB's ``COPY`` took 26 s; with two threads both ran out of memory under the
        limit, so the sort uses one).

        Raises:
            LmraIOError: the sort's spill folder could not be written.
        """
        con = connect()
        self._spill = self.path.with_name(f"{self.path.stem}.spill")
        src, spill = (str(x).replace("'", "''") for x in (self.path, self._spill))
        cols = ", ".join('"' + c.replace('"', '""') + '"' for c in columns)
        try:
            con.execute(f"SET memory_limit = '{SPOOL_SORT_MEMORY}'")
            con.execute(f"SET temp_directory = '{spill}'")
            con.execute("SET threads = 1")
            reader = con.sql(f"SELECT {cols} FROM read_parquet('{src}') ORDER BY _key").to_arrow_reader(batch_size)
            for batch in reader:
                yield batch
        except OSError as exc:  # duckdb.IOException is an OSError
            raise LmraIOError(f"cannot sort this file ({exc})", path=self.path) from None
        finally:
            con.close()

    def abort(self) -> None:
        """Drop the spool (a failed or interrupted run: its answered calls are in the call cache)."""
        self._rows, self._extra = [], []
        self._writer.abort()
        self.remove()

    def remove(self) -> None:
        """Delete the spool's files."""
        try:
            self.path.unlink()
        except OSError:
            pass
        if self._spill is not None:
            import shutil

            shutil.rmtree(self._spill, ignore_errors=True)


def pairs_file(run_dir: str | Path) -> Path | None:
    """The run's per-pair file: ``ratings.parquet``, else ``ratings.jsonl`` (earlier versions), else None."""
    run_dir = Path(run_dir)
    for name in (PARQUET_NAME, JSONL_NAME):
        if (run_dir / name).is_file():
            return run_dir / name
    return None


def parquet_schema(path: str | Path):
    """The Arrow schema of a Parquet file (its footer only).

    Raises:
        LmraInputError: the file is missing, empty, cut short or not Parquet (naming it): a
            damaged run folder, said in one line instead of pyarrow's traceback.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_schema(path)
    except (OSError, pa.ArrowException) as exc:
        raise LmraInputError(f"not a readable Parquet file ({type(exc).__name__}: {' '.join(str(exc).split())})",
                             file=path) from None


@contextmanager
def reading(path: str | Path):
    """Around code that reads the per-pair file ``path``: a damaged file's error from pyarrow or
    DuckDB (a data page that does not decompress, a bad footer …) becomes one
    :class:`~lmra.errors.LmraInputError` naming it. I/O errors (OSError, DuckDB's IOException:
    a full disk while writing) pass as they are, but for DuckDB's "Failed to read file"."""
    try:
        yield
    except LmraInputError:
        raise
    except Exception as exc:  # noqa: BLE001 — sorted below
        import pyarrow as pa

        duck = type(exc).__module__.lstrip("_").startswith("duckdb")
        if "Failed to read file" in str(exc) or (isinstance(exc, pa.ArrowException) and not isinstance(exc, OSError)) \
                or (duck and not isinstance(exc, OSError)):
            raise LmraInputError(f"not a readable Parquet file ({type(exc).__name__}: "
                                 f"{' '.join(str(exc).split())[:300]})", file=path) from None
        raise


def _json_columns(path: Path) -> list[str]:
    meta = parquet_schema(path).metadata or {}
    return json.loads(meta.get(b"lmra.json_columns", b"[]"))


def parquet_columns(path: str | Path) -> list[str]:
    """Column names of a Parquet file.

    Raises:
        LmraInputError: not a readable Parquet file (:func:`parquet_schema`)."""
    return list(parquet_schema(path).names)


def read_jsonl_rows(path: Path) -> list[dict]:
    """The rows of a JSON Lines file (blank lines skipped), each a JSON object.

    Raises:
        LmraInputError: a line is not valid JSON or not an object (naming the file and line).
    """
    rows = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json_value(line)
            except json.JSONDecodeError as exc:
                raise LmraInputError(f"not valid JSON ({exc.msg})", file=path, line=lineno) from None
            if not isinstance(row, dict):
                raise LmraInputError("not a JSON object", file=path, line=lineno)
            rows.append(row)
    return rows


def read_pairs(path: str | Path, columns: Sequence[str] | None = None, *, decode: bool = True) -> pd.DataFrame:
    """A per-pair file as a frame, one row per pair, in file order.

    Args:
        path: ``ratings.parquet`` or ``ratings.jsonl`` (a run folder: its :func:`pairs_file`).
        columns: only these columns (those the file lacks are absent from the frame); default all.
        decode: False leaves a Parquet file's JSON columns as their text (:func:`decode_json`
            decodes them, e.g. after rows were selected).

    Returns:
        The frame: JSON columns decoded to dicts (None where null), ``q_F, q_R, q_N, h``
        numeric (NaN for a missing score) — the same values for both formats.

    Raises:
        LmraInputError: a JSON Lines file with a line that is not a JSON object; a Parquet file that cannot
            be read; no per-pair file.
    """
    p = Path(path)
    if p.is_dir():
        found = pairs_file(p)
        if found is None:
            raise LmraInputError(f"no {PARQUET_NAME} or {JSONL_NAME}", file=p)
        p = found
    if p.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        have = parquet_columns(p)
        want = [c for c in (columns or have) if c in have]
        try:
            df = pq.read_table(p, columns=want).to_pandas()
        except (OSError, pa.ArrowException) as exc:  # a footer that reads, pages that do not
            raise LmraInputError(f"not a readable Parquet file ({type(exc).__name__}: {' '.join(str(exc).split())})",
                                 file=p) from None
        return decode_json(df, p) if decode else df
    df = pd.DataFrame(read_jsonl_rows(p))
    if columns is not None:
        df = df[[c for c in columns if c in df]]
    for col in ("q_F", "q_R", "q_N", "h"):
        if col in df:
            df[col] = pd.to_numeric(df[col], errors="coerce")
    return df


def decode_json(df: pd.DataFrame, path: str | Path, only: Iterable[str] | None = None) -> pd.DataFrame:
    """Decode, in place, the JSON columns of rows read from the Parquet file ``path`` (with
    ``read_pairs(..., decode=False)``; None where null), or those of them in ``only``;
    returns ``df``. A column's dtype is what pandas infers from the decoded values."""
    for col in _json_columns(Path(path)):
        if col in df and (only is None or col in only):
            df[col] = [json_value(v) if isinstance(v, str) else None for v in df[col]]
    return df


def iter_rows(path: str | Path) -> list[dict]:
    """The rows of a per-pair file as JSON-ready dicts (missing values None), as ``ratings.jsonl`` holds them."""
    from lmra.runfolder import jsonable

    p = Path(path)
    if p.suffix != ".parquet":
        return read_jsonl_rows(p)
    return [jsonable(r) for r in read_pairs(p).to_dict(orient="records")]


def connect():
    """A DuckDB connection for lmra's queries (in memory, :data:`DUCKDB_MEMORY_LIMIT`, spilling to a temp folder)."""
    import duckdb

    con = duckdb.connect(":memory:")
    con.execute(f"SET memory_limit = '{DUCKDB_MEMORY_LIMIT}'")
    con.execute("SET preserve_insertion_order = true")
    con.execute("SET enable_progress_bar = false")  # DuckDB draws it on stdout even off a terminal
    return con


def register_pairs(con, path: str | Path, name: str = "pairs", columns: Sequence[str] | None = None) -> list[str]:
    """Make the per-pair file ``path`` the view ``name`` on DuckDB connection ``con``, with a
    column ``row_no`` (0-based file order); returns its columns (without ``row_no``).

    A Parquet file is queried in place (out of core); a ``ratings.jsonl`` of an earlier
    version is read (``columns`` only) and registered as a frame.
    """
    p = Path(path)
    if p.suffix == ".parquet":
        have = parquet_columns(p)
        lit = str(p).replace("'", "''")
        con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT *, file_row_number AS row_no "
                    f"FROM read_parquet('{lit}', file_row_number = true)")
        return have
    df = read_pairs(p, columns)
    df = df[[c for c in df.columns if c not in JSON_COLUMNS]].copy()
    df["row_no"] = range(len(df))
    con.register(f"_{name}_frame", df)
    con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM _{name}_frame")
    return [c for c in df.columns if c != "row_no"]


def read_pairs_where(path: str | Path, keys: Sequence[str], values: Iterable[tuple],
                     top: tuple[Sequence[str], str, int] | None = None) -> pd.DataFrame:
    """The rows of a per-pair file whose ``keys`` columns hold one of ``values`` (all columns,
    file order, JSON columns decoded as :func:`read_pairs`). A Parquet file is filtered by DuckDB
    without reading the other rows; a ``ratings.jsonl`` is read whole and filtered.

    ``top = (partition, order_by, n)`` keeps, of a large Parquet file, only the first ``n`` rows
    of each ``partition`` group under the SQL ``order_by``, with the group's row count in an added
    column ``_n_in_group`` (callers that sort again get the same first rows); otherwise ignored."""
    values = [tuple(v) for v in values]
    p = Path(path)
    if p.suffix != ".parquet" or not values or is_small(p):
        df = read_pairs(p, decode=False)
        if df.empty or not values:
            return (decode_json(df, p) if p.suffix == ".parquet" else df).iloc[:0]
        # the LMRA's answers (JSON_COLUMNS: objects or null, so an object column however many
        # rows) are decoded for the rows kept only; other JSON columns whole, as read_pairs
        # does, since the dtype pandas infers depends on all their values
        json_cols = _json_columns(p) if p.suffix == ".parquet" else []
        late = [c for c in json_cols if c in JSON_COLUMNS]
        if json_cols:
            decode_json(df, p, only=[c for c in json_cols if c not in late])
        mask = pd.MultiIndex.from_frame(df[list(keys)].astype(object)).isin(values)
        kept = df[mask].reset_index(drop=True)
        if p.suffix != ".parquet":
            return kept
        if kept.empty:
            return kept.astype({c: object for c in late if c in kept})
        return decode_json(kept, p, only=late)
    with reading(p):
        return _pairs_where_sql(p, keys, values, top)


def _pairs_where_sql(p: Path, keys: Sequence[str], values: list[tuple], top) -> pd.DataFrame:
    """:func:`read_pairs_where` of a large Parquet file, by DuckDB."""
    con = connect()
    have = register_pairs(con, p)
    con.register("_wanted", pd.DataFrame(values, columns=list(keys)))
    cols = ", ".join(f'p."{c}"' for c in have)
    on = " AND ".join(f'p."{k}" = w."{k}"' for k in keys)
    query = f"SELECT {cols}, p.row_no FROM pairs p SEMI JOIN _wanted w ON {on}"
    if top is not None:
        part = ", ".join(f'"{c}"' for c in top[0])
        query = (f"SELECT * EXCLUDE (_k), count(*) OVER (PARTITION BY {part}) AS _n_in_group FROM "
                 f"(SELECT *, row_number() OVER (PARTITION BY {part} ORDER BY {top[1]}) AS _k FROM ({query})) "
                 f"QUALIFY _k <= {int(top[2])}")
    rel = con.sql(f"SELECT * EXCLUDE (row_no) FROM ({query}) ORDER BY row_no")
    df = (rel.to_arrow_table() if hasattr(rel, "to_arrow_table") else rel.arrow()).to_pandas()
    return decode_json(df, p)


def jsonl_rows_where(path: str | Path, field: str, values: Iterable[str]) -> list[dict]:
    """The JSON objects of a JSON Lines file (e.g. ``responses.jsonl``) whose ``field`` is one of
    ``values``, in file order; ``[]`` when the file is absent. DuckDB scans the lines and only the
    matching ones are parsed by Python (the same dicts as ``json.loads``).

    Raises:
        LmraInputError: a matching line is not valid JSON.
    """
    p = Path(path)
    wanted = sorted({str(v) for v in values})
    if not p.is_file() or not wanted:
        return []
    if is_small(p):
        keep = set(wanted)
        return [r for r in read_jsonl_rows(p) if str(r.get(field)) in keep]
    con = connect()
    con.register("_wanted", pd.DataFrame({"v": wanted}))
    lit = str(p).replace("'", "''")
    lines = con.sql(
        f"SELECT line FROM read_csv('{lit}', columns = {{'line': 'VARCHAR'}}, delim = '\\x01', quote = '', "
        "escape = '', header = false, auto_detect = false, max_line_size = 1000000000, strict_mode = false) "
        f"WHERE TRY_CAST(line AS JSON) IS NULL "  # a malformed line comes back, and is named below
        f"OR json_extract_string(TRY_CAST(line AS JSON), '$.{field}') IN (SELECT v FROM _wanted)").fetchall()
    out = []
    for (line,) in lines:
        if line is None or not line.strip():  # blank lines are skipped, as the full read does
            continue
        try:
            row = json_value(line)
        except json.JSONDecodeError:
            row = None
        if not isinstance(row, dict):  # a malformed line: the full read names its file and line
            read_jsonl_rows(p)
            raise LmraInputError("not a JSON object", file=p)
        out.append(row)
    return out



def sql_isnan(expr: str) -> str:
    """SQL that is true when the DOUBLE ``expr`` is NaN (false for NULL), for queries over
    ``ratings.parquet``.

    DuckDB's ``isnan(col)`` cannot be trusted on a Parquet column: the file's min/max
    statistics leave NaN out (as the Parquet format says), DuckDB takes them to mean the
    column holds no NaN, and ``isnan`` in a filter or a projection comes out false for every
    row (seen with DuckDB 2.0.1: 0 of 6,995 NaN scores found in 200,000 pairs). The text
    form of the value has no statistics: ``'nan'`` / ``'-nan'``.
    """
    return f"(CAST({expr} AS VARCHAR) IN ('nan', '-nan'))"
