"""Tools for working on prioritylock from a source checkout, shared by the tests and the benchmarks.

Not part of the installed package (the wheel holds only ``prioritylock`` and ``scopes``):

- :mod:`tools.emulators`: the cloud-store emulators (moto, SeaweedFS, fake-gcs-server, Azurite),
  started on free ports on 127.0.0.1 and stopped however the run ends;
- :mod:`tools.sdk`: the SDKs' own clients for those emulators, configured as the stores configure
  theirs;
- :mod:`tools.service`: ``prioritylock serve`` as a subprocess on free ports, as a user starts it.
"""
