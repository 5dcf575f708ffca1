"""The worker pool: one Celery app, one thin task, and the step executor behind it."""
