"""The generated messages and stubs, under their old private name: they are public now, as
:mod:`prioritylock.v1` (import them from there)."""

from prioritylock.v1 import lock_pb2, lock_pb2_grpc

__all__ = ["lock_pb2", "lock_pb2_grpc"]
