"""The groups of fields :class:`planloop.config.settings.Settings` is made of, one module per
concern; only that class reads the environment."""
