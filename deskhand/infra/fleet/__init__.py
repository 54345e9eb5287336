"""The workers: a registry of executor ids (``Worker``) and the lease keeping one process to each.

A low layer: the engine takes a dead worker's runs over; this package only proves who is alive."""
