"""The messages and gRPC stubs of ``prioritylock serve``'s lock API, generated from
``lock.proto`` (``proto/prioritylock/v1/lock.proto`` in the source, beside this package in a
wheel) by ``scripts/gen-proto``:

- :mod:`prioritylock.v1.lock_pb2`: the messages (``LockRequest``, ``LockServerStream``, ...);
- :mod:`prioritylock.v1.lock_pb2_grpc`: ``LockServiceStub``, for a channel of your own.

:mod:`prioritylock.client` is the small client most apps want. Needs
``pip install 'prioritylock[client]'`` (grpcio and protobuf).
"""
