"""The supervisor's I/O: the store port and its backends, batched writes, the record, the queue."""
