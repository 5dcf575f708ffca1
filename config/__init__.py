"""Configuration: the one settings object and the Celery configuration derived from it."""

from planloop.config.settings import Settings, get_settings

__all__ = ["Settings", "get_settings"]
