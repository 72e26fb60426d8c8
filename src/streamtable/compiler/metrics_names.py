"""Names shared by the compiler (which registers observed metrics) and the runtime (which reads them)."""

#: Prefix of every observed-metric name streamtable registers.
METRIC_PREFIX = "streamtable_dropped"
