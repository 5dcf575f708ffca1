"""The client side: the ``planloop`` command line, talking to Redis only."""
