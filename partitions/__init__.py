"""Partitions: the record-batch codec, segments and indexes, the partition log, replica/ISR/HW logic and the
Storage port. Pure: files are reached only through `partitions.storage.Storage`."""
