"""Messages and stubs generated from proto/prioritylock/v1/lock.proto by scripts/gen-proto."""
