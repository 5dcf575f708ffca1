"""Tool modules only tests use. The shipped processes import them as a user's own tools:
``tests/shipped.py`` copies this folder's modules to a folder on their ``PYTHONPATH``, so
inside a worker they are top-level modules (``secret_tools``), never ``tests.*``."""
