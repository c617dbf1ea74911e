"""``prioritylock serve``: a lock service over HTTP and gRPC that Dapr clients speak to.

Private modules: ``_config`` (what to serve), ``_alpha1`` (Dapr's alpha1 lock semantics over
``AsyncLock``), ``_http`` (aiohttp front end), ``_grpc`` (grpc.aio front end), ``_app`` (one event
loop running both, shutdown on SIGTERM). Its dependencies come with ``pip install
'prioritylock[server]'``.
"""
