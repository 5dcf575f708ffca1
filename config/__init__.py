"""Configuration: the one settings object and the Celery configuration derived from it."""

from config.settings import Settings, get_settings

__all__ = ["Settings", "get_settings"]
