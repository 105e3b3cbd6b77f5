"""The key-reach modules' shared fixtures (tests/key_reach/harness.py)."""
from tests.key_reach.harness import batch_world, one_thread  # noqa: F401 (fixtures: one_thread is autouse)
