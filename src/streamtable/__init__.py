"""streamtable: the Kafka Streams programming model in Python, on Spark Structured Streaming."""
