"""Names shared by the compiler (registers observed metrics) and the runtime (reads them)."""

#: Prefix of every observed-metric name streamtable registers.
METRIC_PREFIX = "streamtable_dropped"
