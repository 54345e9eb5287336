"""The agent's operator commands: start, steer, cancel, decide, replay, erase, seed, health."""
