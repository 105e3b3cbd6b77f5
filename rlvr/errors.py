"""The one exception type a user can cause; the CLI prints its message without a traceback."""


class RlvrError(Exception):
    """A problem with the user's input (config, model path, dataset row, reward function)."""
