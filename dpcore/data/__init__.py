"""Loading, typing, encoding, cleaning, bounding and scaling the curator's tables."""

from dpcore.data.encoding import CategoricalEncoding, DateEncoding
from dpcore.data.fingerprint import fingerprint
from dpcore.data.io import MAX_COLUMNS, MAX_NAME_CHARS, MAX_TABLE_BYTES, load_table, table_name
from dpcore.data.missing import MISSING_STRATEGIES, handle_missing, missing_report
from dpcore.data.prepare import SCALINGS, PreparedData, prepare
from dpcore.data.samples import SAMPLES, load_sample, make_blobs
from dpcore.data.schema import KINDS, ColumnKind, Schema, column_encoding, infer_date_format, infer_schema
from dpcore.errors import DataError

__all__ = [
    "KINDS",
    "MAX_COLUMNS",
    "MAX_NAME_CHARS",
    "MAX_TABLE_BYTES",
    "MISSING_STRATEGIES",
    "SAMPLES",
    "SCALINGS",
    "CategoricalEncoding",
    "ColumnKind",
    "DataError",
    "DateEncoding",
    "PreparedData",
    "Schema",
    "column_encoding",
    "fingerprint",
    "handle_missing",
    "infer_date_format",
    "infer_schema",
    "load_sample",
    "load_table",
    "make_blobs",
    "missing_report",
    "prepare",
    "table_name",
]
