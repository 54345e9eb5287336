"""The engine's commands: the worker, and moving runs parked on an old version to this one."""
