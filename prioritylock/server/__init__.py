"""``prioritylock serve``: a lock service over HTTP and gRPC that Dapr clients speak to.

Private modules: ``_config`` (what to serve), ``_names`` (stores by name, and how a resource id
becomes a lock path), ``_alpha1`` (Dapr's alpha1 lock semantics over ``AsyncLock``), ``_alpha2``
(the full API: locks the service renews, streams, priorities, operators), ``_http`` and
``_http2`` (the aiohttp front end of each), ``_events`` (what a stream holder is told, which
each front end renders), ``_grpc`` (the grpc.aio front end, alpha1) and ``_grpc_lock`` (its
``LockService``), ``_metrics`` (``GET /metrics``), ``_components`` (Dapr component files),
``_health`` (the stores' check at start-up, the outbound health, what a client hears of a store
failure), ``_app`` (one event loop running it all, shutdown on SIGTERM). Its dependencies come
with ``pip install 'prioritylock[server]'``.
"""
