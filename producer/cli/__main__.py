"""``python -m planloop.producer.cli``: the ``planloop`` command line."""

from planloop.producer.cli import main

if __name__ == "__main__":  # imported (a module walk, a test) it does nothing
    main()
